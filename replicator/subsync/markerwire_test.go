package subsync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire/wiretest"
)

// TestWireMarkerWriter: markers written over the wire client are one
// entry each, under the writer's producer name, with sequence ids from
// the broker's record on (another writer of the name goes on from it), in
// order whoever writes at once; the marker
// property names the kind and the payload decodes under the keys; a
// topic unloaded meanwhile loses none and repeats none.
func TestWireMarkerWriter(t *testing.T) {
	b := wiretest.New(t)
	b.KeepEntries()
	c, err := wire.NewClient(wire.ClientOptions{ServiceURL: b.URL(), OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := marker.NewKeys(syncKey)
	name := marker.MarkerProducerName("east", "west")
	w := NewWireMarkerWriter(func() (*wire.Client, error) { return c, nil }, syncTopic, name, keys)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	kinds := []marker.Kind{marker.KindSnapshotRequest, marker.KindSnapshotResponse, marker.KindUpdate}
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				mk := marker.Marker{Kind: kinds[(g+i)%len(kinds)], From: "east", To: "west", Topic: syncTopic,
					SnapshotID: fmt.Sprintf("w%d-%d", g, i), Subscription: "billing"}
				if err := w.Write(ctx, mk); err != nil {
					t.Errorf("write %d/%d: %v", g, i, err)
				}
				if g == 0 && i == each/2 {
					b.Unload(syncTopic) // the producer reconnects and sends what was unconfirmed again
				}
			}
		}()
	}
	wg.Wait()
	w.Close()
	// Another writer (a restart, a takeover) goes on from the broker's
	// record of the name.
	w2 := NewWireMarkerWriter(func() (*wire.Client, error) { return c, nil }, syncTopic, name, keys)
	if err := w2.Write(ctx, marker.Marker{Kind: marker.KindUpdate, From: "east", To: "west", Topic: syncTopic, SnapshotID: "after", Subscription: "billing"}); err != nil {
		t.Fatal(err)
	}
	w2.Close()

	got := b.Entries(syncTopic)
	if len(got) != writers*each+1 {
		t.Fatalf("%d entries stored, want %d", len(got), writers*each+1)
	}
	ids := map[string]bool{}
	for i, e := range got {
		if e.Producer != name || e.SequenceID != uint64(i) {
			t.Errorf("entry %d: producer %q seq %d, want %q seq %d", i, e.Producer, e.SequenceID, name, i)
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		v, _ := md.Property(marker.Property)
		mk, err := keys.Decode(e.Payload)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if v != fmt.Sprint(int(mk.Kind)) || md.ProducerName != name || e.NumMessages != 1 {
			t.Errorf("entry %d: property %q for a marker of kind %d, producer %q", i, v, mk.Kind, md.ProducerName)
		}
		if ids[mk.SnapshotID] {
			t.Errorf("marker %s stored twice", mk.SnapshotID)
		}
		ids[mk.SnapshotID] = true
	}
}
