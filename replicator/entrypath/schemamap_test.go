package entrypath

import (
	"context"
	"testing"
)

// The remote's schema versions are asked once per local version, and again
// after the producer's link went down: the target topic may have been
// deleted and created again meanwhile, with other versions.
func TestTargetSchemaForgottenWhenTheLinkDrops(t *testing.T) {
	asked := 0
	remoteVersion := byte(7)
	e := &wireEndpoints{registerSchema: func(_ context.Context, version []byte) ([]byte, error) {
		asked++
		return []byte{version[0], remoteVersion}, nil
	}}
	ctx := context.Background()
	lookup := func(want byte, wantAsked int) {
		t.Helper()
		v, err := e.targetSchema(ctx, []byte{1})
		if err != nil {
			t.Fatal(err)
		}
		if v[1] != want || asked != wantAsked {
			t.Fatalf("remote version %d after %d registrations, want %d after %d", v[1], asked, want, wantAsked)
		}
	}
	var told []bool
	link := e.producerLink(func(up bool) { told = append(told, up) })
	lookup(7, 1)
	lookup(7, 1) // cached
	link(true)
	lookup(7, 1)
	// The target topic is re-created: its registry gives other versions.
	link(false)
	remoteVersion = 3
	lookup(3, 2)
	link(true)
	lookup(3, 2)
	if len(told) != 3 || told[0] != true || told[1] != false || told[2] != true {
		t.Errorf("the entry pipe was told %v, want [true false true]", told)
	}
}
