package subsync

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// threeLedgers: ledger 3 holds entries 0-9, ledger 5 0-3, ledger 9 0-5.
func threeLedgers() *cluster.Layout {
	return &cluster.Layout{Ledgers: []cluster.LedgerSpan{{ID: 3, Entries: 10}, {ID: 5, Entries: 4}, {ID: 9, Entries: 6}}}
}

func TestPlanHistory(t *testing.T) {
	l := threeLedgers() // 20 entries
	tests := []struct {
		name    string
		at      []marker.Position
		n       int64
		tail    entrySpan
		windows []entrySpan
	}{
		{"no subscription: the tail", nil, 4, entrySpan{subsynctest.Pos(9, 2), subsynctest.Pos(9, 5)}, nil},
		{"tail larger than the partition", nil, 100, entrySpan{subsynctest.Pos(3, 0), subsynctest.Pos(9, 5)}, nil},
		{"subscription inside the tail: the entries before it, up to the tail", []marker.Position{subsynctest.Pos(9, 3)}, 4,
			entrySpan{subsynctest.Pos(9, 2), subsynctest.Pos(9, 5)}, []entrySpan{{subsynctest.Pos(5, 3), subsynctest.Pos(9, 1)}}},
		{"partition smaller than the tail: one read", []marker.Position{subsynctest.Pos(5, 2)}, 100, entrySpan{subsynctest.Pos(3, 0), subsynctest.Pos(9, 5)}, nil},
		{"subscription far behind", []marker.Position{subsynctest.Pos(3, 5)}, 2,
			entrySpan{subsynctest.Pos(9, 4), subsynctest.Pos(9, 5)}, []entrySpan{{subsynctest.Pos(3, 3), subsynctest.Pos(3, 7)}}},
		{"window clipped at the tail", []marker.Position{subsynctest.Pos(5, 3)}, 4,
			entrySpan{subsynctest.Pos(9, 2), subsynctest.Pos(9, 5)}, []entrySpan{{subsynctest.Pos(3, 9), subsynctest.Pos(9, 1)}}},
		{"two subscriptions close together: one window", []marker.Position{subsynctest.Pos(3, 6), subsynctest.Pos(3, 3)}, 2,
			entrySpan{subsynctest.Pos(9, 4), subsynctest.Pos(9, 5)}, []entrySpan{{subsynctest.Pos(3, 1), subsynctest.Pos(3, 8)}}},
		{"two subscriptions apart: two windows", []marker.Position{subsynctest.Pos(5, 2), subsynctest.Pos(3, 1)}, 1,
			entrySpan{subsynctest.Pos(9, 5), subsynctest.Pos(9, 5)}, []entrySpan{{subsynctest.Pos(3, 0), subsynctest.Pos(3, 2)}, {subsynctest.Pos(5, 1), subsynctest.Pos(5, 3)}}},
		{"adjacent windows merge", []marker.Position{subsynctest.Pos(3, 1), subsynctest.Pos(3, 4)}, 1,
			entrySpan{subsynctest.Pos(9, 5), subsynctest.Pos(9, 5)}, []entrySpan{{subsynctest.Pos(3, 0), subsynctest.Pos(3, 5)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planHistory(l, tt.at, tt.n)
			if got.tail != tt.tail || !slices.Equal(got.windows, tt.windows) {
				t.Errorf("plan = %+v, want tail %+v windows %+v", got, tt.tail, tt.windows)
			}
		})
	}
}

// TestRebuildBounded: with the partition's layout known, the start-up
// re-read reads the tail and the window around each tracked subscription,
// not the whole partition; it goes further back only while a third
// origin's watermark is unknown, and learns watermarks only from a
// contiguous suffix of the partition.
func TestRebuildBounded(t *testing.T) {
	snap := func(id string, at marker.Position) marker.Marker {
		return marker.Marker{Kind: marker.KindSnapshot, SnapshotID: id, From: "east", To: "west", Topic: syncTopic,
			Local: at, Remote: subsynctest.Pos(70, at.Entry), Time: 1}
	}
	// 100 entries in ledgers 1 and 2 (50 each). Entry (1,10) is a
	// snapshot covering billing at (1,12); (2,45) a snapshot near the end.
	build := func(t *testing.T, r *syncRig, extra map[marker.Position]*subsynctest.Msg) *cluster.Layout {
		for l := int64(1); l <= 2; l++ {
			for e := int64(0); e < 50; e++ {
				p := subsynctest.Pos(l, e)
				var m *subsynctest.Msg
				switch {
				case extra[p] != nil:
					m = extra[p]
				case p == subsynctest.Pos(1, 10):
					m = subsynctest.MarkerMsg(t, 1, 10, snap("old", subsynctest.Pos(1, 10)), syncKey, "")
				case p == subsynctest.Pos(2, 45):
					m = subsynctest.MarkerMsg(t, 2, 45, snap("new", subsynctest.Pos(2, 45)), syncKey, "")
				default:
					m = subsynctest.MsgAt(l, e, -1, "x")
				}
				r.hist.Msgs = append(r.hist.Msgs, m)
			}
		}
		return &cluster.Layout{Ledgers: []cluster.LedgerSpan{{ID: 1, Entries: 50}, {ID: 2, Entries: 50}},
			MarkDeletes: map[string]marker.Position{"billing": subsynctest.Pos(1, 12), "other-app": subsynctest.Pos(1, 30)},
			Cursors:     []string{"billing", "other-app"}}
	}
	// resp is this sidecar's own response at (ledger, entry) naming wm as
	// north's watermark: what teaches a watermark in the re-read.
	resp := func(ledger, entry int64, wm marker.Position) *subsynctest.Msg {
		mk := response("east", "west", syncTopic)
		mk.Watermarks = map[string]marker.Position{"north": wm}
		return subsynctest.MarkerMsg(t, ledger, entry, mk, syncKey, "")
	}
	tests := []struct {
		name     string
		third    []string
		extra    map[marker.Position]*subsynctest.Msg
		froms    []marker.Position
		read     int // entries read
		covering map[marker.Position]string
		wm       marker.Position // north's watermark after ("" if unknown)
		unknown  bool
	}{
		{name: "tail and the subscription's window",
			froms: []marker.Position{subsynctest.Pos(2, 40), subsynctest.Pos(1, 2)}, read: 10 + 21,
			covering: map[marker.Position]string{subsynctest.Pos(1, 12): "old", subsynctest.Pos(2, 49): "new"}},
		{name: "watermark in the tail: no further back", third: []string{"north"},
			extra: map[marker.Position]*subsynctest.Msg{subsynctest.Pos(2, 42): resp(2, 42, subsynctest.Pos(40, 9))},
			froms: []marker.Position{subsynctest.Pos(2, 40), subsynctest.Pos(1, 2)}, read: 10 + 21, wm: subsynctest.Pos(40, 9)},
		{name: "watermark further back: read back in doubling steps", third: []string{"north"},
			extra: map[marker.Position]*subsynctest.Msg{subsynctest.Pos(1, 45): resp(1, 45, subsynctest.Pos(40, 5))},
			// tail (2,40); back 10 to (2,30); back 20 to (2,10); back 40 to (1,20): found.
			froms: []marker.Position{subsynctest.Pos(2, 40), subsynctest.Pos(2, 30), subsynctest.Pos(2, 10), subsynctest.Pos(1, 20), subsynctest.Pos(1, 2)},
			read:  10 + 10 + 20 + 40 + 18, wm: subsynctest.Pos(40, 5)},
		{name: "a response inside a subscription's window counts once the suffix reaches it", third: []string{"north"},
			// The window is not read on its own: the suffix covers it.
			extra: map[marker.Position]*subsynctest.Msg{subsynctest.Pos(1, 5): resp(1, 5, subsynctest.Pos(40, 2))},
			froms: []marker.Position{subsynctest.Pos(2, 40), subsynctest.Pos(2, 30), subsynctest.Pos(2, 10), subsynctest.Pos(1, 20), subsynctest.Pos(1, 0)},
			read:  10 + 10 + 20 + 40 + 20, wm: subsynctest.Pos(40, 2)},
		{name: "an unverifiable copy teaches nothing", third: []string{"north"},
			// Its origin properties could be anyone's: a watermark named
			// far ahead would date snapshots past uncopied messages.
			extra: map[marker.Position]*subsynctest.Msg{subsynctest.Pos(2, 42): subsynctest.CopyMsg(2, 42, "north", subsynctest.Pos(40, 9))},
			froms: []marker.Position{subsynctest.Pos(2, 40), subsynctest.Pos(2, 30), subsynctest.Pos(2, 10), subsynctest.Pos(1, 20), subsynctest.Pos(1, 0)},
			read:  100, unknown: true},
		{name: "watermark nowhere: the whole partition once", third: []string{"north"},
			froms: []marker.Position{subsynctest.Pos(2, 40), subsynctest.Pos(2, 30), subsynctest.Pos(2, 10), subsynctest.Pos(1, 20), subsynctest.Pos(1, 0)},
			read:  100, unknown: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{third: tt.third, cursors: []string{"billing", "other-app"}})
			r.s.HistoryEntries = 10
			layout := build(t, r, tt.extra)
			r.s.rebuild(context.Background(), layout)
			if !slices.Equal(r.hist.Froms, tt.froms) {
				t.Errorf("readers started at %v, want %v", r.hist.Froms, tt.froms)
			}
			if r.hist.Closed != r.hist.Opened {
				t.Errorf("%d readers opened, %d closed", r.hist.Opened, r.hist.Closed)
			}
			for md, id := range tt.covering {
				if s, ok := r.s.Machine.Covering(md); !ok || s.ID != id {
					t.Errorf("snapshot covering %v = %+v, %v; want %q", md, s, ok, id)
				}
			}
			if got := r.s.Machine.Unknown(); (len(got) > 0) != tt.unknown {
				t.Errorf("unknown watermarks = %v, want unknown %v", got, tt.unknown)
			}
			if !tt.unknown && len(tt.third) > 0 {
				subsynctest.ReadMarker(context.Background(), r.s, subsynctest.MarkerMsg(t, 3, 1, subsynctest.Request("west", "east", syncTopic), syncKey, "west"))
				w := r.sink.Take()
				if len(w) != 1 || w[0].Watermarks["north"] != tt.wm {
					t.Errorf("response = %+v, want north's watermark %v", w, tt.wm)
				}
			}
			if got := metricstest.Counter(r.m.HistoryEntriesRead, "east"); got != float64(tt.read) {
				t.Errorf("entries read (history_entries_read_total) = %v, want %d", got, tt.read)
			}
		})
	}
}

// The start-up re-reads of all the syncs of a process together hold at
// most the gate's readers open at once; the others wait for a place, and
// every one runs in the end.
//
// Fails for: NewHistory without the gate (gate.source returning src):
// all six readers open at once.
func TestHistoryGateBoundsConcurrentRereads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := NewHistoryGate(2, 4<<20)
		src := &blockingHistory{release: make(chan struct{})}
		ctx := context.Background()
		const syncs = 6
		done := make(chan struct{}, syncs)
		for range syncs {
			r := newSyncRig(t, rigConfig{cursors: []string{"billing"}})
			r.s.History = gate.source(src)
			go func() {
				defer func() { done <- struct{}{} }()
				r.s.rebuild(ctx, nil)
			}()
		}
		synctest.Wait()
		if open, _, opened, _ := src.counts(); open != 2 || opened != 2 {
			t.Errorf("%d readers open (%d opened) while they read, want the gate's 2", open, opened)
		}
		close(src.release)
		for range syncs {
			<-done
		}
		if open, most, opened, closed := src.counts(); most != 2 || opened != syncs || closed != syncs || open != 0 {
			t.Errorf("at most %d open at once, %d opened, %d closed, %d still open; want 2, %d, %d, 0", most, opened, closed, open, syncs, syncs)
		}
		if gate.readerWindow() != 2<<20 {
			t.Errorf("a reader's window = %d bytes, want 2 MiB (4 MiB over 2 readers)", gate.readerWindow())
		}
	})
}

// Cancelling the context (the stop) ends a re-read at once: the one
// reading returns without waiting for its next entry (nor for the 10 s
// it would wait for one), and one waiting for a place in the gate leaves
// the line; readers and places are given back.
//
// Fails for: rebuild's reads on context.Background() instead of ctx (the
// reader waits out historyIdle, and the waiting one takes its place and
// reads after the stop).
func TestHistoryRereadEndsWithTheStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := NewHistoryGate(1, 1<<20)
		src := &blockingHistory{release: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan string, 2)
		for _, name := range []string{"reading", "waiting"} {
			r := newSyncRig(t, rigConfig{cursors: []string{"billing"}})
			r.s.History = gate.source(src)
			go func() {
				r.s.rebuild(ctx, nil)
				done <- name
			}()
			synctest.Wait() // the first holds the place before the second asks
		}
		if open, _, opened, _ := src.counts(); open != 1 || opened != 1 {
			t.Fatalf("%d open, %d opened before the stop; want 1, 1", open, opened)
		}
		stopped := time.Now()
		cancel()
		synctest.Wait()
		if len(done) != 2 {
			t.Fatalf("%d of 2 re-reads ended with the stop", len(done))
		}
		if d := time.Since(stopped); d != 0 {
			t.Errorf("the re-reads ended %v after the stop, want at once (not after a read timeout)", d)
		}
		if open, _, opened, closed := src.counts(); open != 0 || opened != 1 || closed != 1 {
			t.Errorf("after the stop: %d open, %d opened, %d closed; want 0, 1, 1", open, opened, closed)
		}
		if err := gate.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		gate.release() // the place was given back
	})
}
