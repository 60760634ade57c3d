package verify

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// KeyID names a marker key in a report without giving it away: the first
// 8 bytes, in hex, of SHA-256 over a domain string and the key. Two
// configs hold the same key when their ids match. It tells an attacker
// nothing the copies do not: every signed origin on a target is already
// a MAC under the key over data anyone who reads the topic knows, so a
// guess at a weak key is checked as easily against those.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("geo-sidecar marker key id\x00"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// KeyIDs are the ids (KeyID) of the keys a signature is tried under, the
// current key first; nil for the zero Keys.
func KeyIDs(keys marker.Keys) []string {
	var out []string
	for _, k := range keys.Accepted() {
		out = append(out, KeyID(k))
	}
	return out
}
