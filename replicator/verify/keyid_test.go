package verify

import (
	"slices"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// TestKeyIDs: the current key first, then the accepted ones; each id
// fixed by the key, different between keys, and holding no byte of it.
func TestKeyIDs(t *testing.T) {
	cur, old := []byte("current-marker-key-0123456789abcdef"), []byte("older-marker-key-0123456789abcdef")
	ids := KeyIDs(marker.NewKeys(cur, old))
	if len(ids) != 2 || ids[0] != KeyID(cur) || ids[1] != KeyID(old) || ids[0] == ids[1] || len(ids[0]) != 16 {
		t.Fatalf("ids %v", ids)
	}
	if !slices.Equal(KeyIDs(marker.NewKeys(cur)), ids[:1]) || KeyIDs(marker.Keys{}) != nil {
		t.Errorf("one key: %v; none: %v", KeyIDs(marker.NewKeys(cur)), KeyIDs(marker.Keys{}))
	}
	for _, id := range ids {
		if strings.Contains(string(cur), id) || strings.Contains(string(old), id) {
			t.Errorf("id %s is part of a key", id)
		}
	}
}
