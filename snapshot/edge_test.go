package snapshot

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// TestCacheOrder: the cache is sorted by Local, then Remote, then ID, and
// Covering returns the last covered entry in that order. A Remote order
// that disagrees with the Local one must not reorder the cache, and of two
// snapshots at the same Local the one with the larger Remote is returned,
// whatever their ids (it moves the remote subscription furthest).
func TestCacheOrder(t *testing.T) {
	at := func(e int64) marker.Position { return pos(e) }
	t.Run("local first", func(t *testing.T) {
		m := New(Config{Topic: topic, Local: "A", Remote: "B"})
		for _, e := range []int64{3, 1, 2} {
			m.cache.add(Snapshot{ID: fmt.Sprintf("s%d", e), Local: at(e), Remote: at(100 - e), Time: t0})
		}
		if got, want := ids(m.cache.s), []string{"s1", "s2", "s3"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("cache %v, want %v", got, want)
		}
		if got, ok := m.Covering(at(2)); !ok || got.ID != "s2" {
			t.Errorf("Covering(2) = %q, %v; want s2", got.ID, ok)
		}
	})
	t.Run("same local: larger remote", func(t *testing.T) {
		for _, first := range []string{"a", "b"} {
			m := New(Config{Topic: topic, Local: "A", Remote: "B"})
			small := Snapshot{ID: "b", Local: at(5), Remote: at(40), Time: t0}
			large := Snapshot{ID: "a", Local: at(5), Remote: at(90), Time: t0}
			if first == "a" {
				m.cache.add(large)
				m.cache.add(small)
			} else {
				m.cache.add(small)
				m.cache.add(large)
			}
			if got, want := ids(m.cache.s), []string{"b", "a"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("added %s first: cache %v, want %v", first, got, want)
			}
			if got, ok := m.Covering(at(5)); !ok || got != large {
				t.Errorf("added %s first: Covering(5) = %+v, %v; want %+v", first, got, ok, large)
			}
		}
	})
}

// TestSeenOnlyThirdOrigins: origins come from message properties any
// producer can set, so the machine tracks the watermarks of the configured
// third origins only, and its memory stays bounded by the config.
func TestSeenOnlyThirdOrigins(t *testing.T) {
	h := newHarness(nil) // third origin C
	for i := range 100 {
		h.m.Data(pos(int64(i)), fmt.Sprintf("X%d", i), pos(int64(i)))
		h.m.Learn(fmt.Sprintf("Y%d", i), pos(int64(i)))
	}
	h.m.Data(pos(200), "A", pos(1))
	h.m.Data(pos(201), "B", pos(1))
	h.m.Data(pos(202), "C", pos(7))
	if want := map[string]marker.Position{"C": pos(7)}; !reflect.DeepEqual(h.m.seen, want) {
		t.Errorf("seen %v, want %v", h.m.seen, want)
	}
}

// TestWatermarkInLedgerZero: only a negative ledger (marker.NoneSeen) means
// "nothing of that origin". A watermark in ledger 0 is a real position the
// requester must have seen before the snapshot completes; completing early
// could move a subscription on B past C-origin messages A has not got yet.
func TestWatermarkInLedgerZero(t *testing.T) {
	h := newHarness(nil)
	c := func(e int64) marker.Position { return marker.Position{Ledger: 0, Entry: e, Batch: -1} }
	run(t, h, []step{
		{op: data(1, "", 0)},
		{op: tick(true), want: wantRequest("id-1", 0)},
		{op: read(5, responseFromB("id-1", 40, map[string]marker.Position{"C": c(5)}))},
		{op: dataAt(pos(6), "C", c(4))},
		{op: dataAt(pos(7), "C", c(5)), want: wantSnapshot("id-1", 7, 40, 0)},
	})
}
