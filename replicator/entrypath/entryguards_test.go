package entrypath

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Tests of the entry pipe's guards against loss and stalls that a hand
// mutation audit found untested (issue 20, "Tests that would have caught
// these"); each names the mutation it fails for.

// entryNames is e<first>..e<first+n-1>.
func entryNames(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("e%d", first+i)
	}
	return out
}

// The remote's record for the producer name runs ahead of the cursor. With
// deduplication on the remote, the pipe neither stores an entry twice
// (the read-back reaches as far back as the record says: recordReach, not
// the usual window) nor stalls (an entry the read-back does not find is
// sent above the record: the floor, not its packed id, which the remote
// would answer as a duplicate in every session for ever).
//
// Fails for: recordReach(...) replaced by 0 in the session (copies beyond
// the usual window sent again), and `seq = 0` instead of the record + 1
// (halts on a duplicate receipt, restarts, halts again).
func TestEntryPipeRecordAhead(t *testing.T) {
	tests := []struct {
		name   string
		remote []string // on the remote before the start, stored in order
		record int64    // the remote's record for the producer name
		local  int      // entries e0.. on the local partition, none acknowledged
	}{
		// An instance ran 300 entries ahead of the cursor (its
		// acknowledgements were lost): the usual window (100 + look back
		// 100) sees only the last 200 of them.
		{"copies beyond the usual window", entryNames(0, 300), 10<<32 | 299, 310},
		// The record says e0..e5 were stored, the read-back finds none
		// (retention, a truncated topic): sent again, above the record.
		{"record ahead of the copies", nil, 10<<32 | 5, 10},
		{"record in an older ledger", nil, 9<<32 | 50_000, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.dedup, w.readBack = true, 100
				w.remote, w.lastSeq = slices.Clone(tt.remote), tt.record
				w.add(tt.local, nil)
				p := newTestEntryPartition(t, w)
				stop := runEntryPartition(t, p)
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == tt.local })
				stop()
				_, remote, _ := w.snapshot()
				if want := entryNames(0, tt.local); !slices.Equal(remote, want) {
					i := 0
					for i < min(len(remote), len(want)) && remote[i] == want[i] {
						i++
					}
					t.Errorf("remote holds %d entries, want %d, each once, in order: %v from its %dth on",
						len(remote), tt.local, remote[i:min(len(remote), i+5)], i)
				}
				if got := metricstest.Counter(p.m.DupsUnproven, "east", "west"); got != 0 {
					t.Errorf("unproven duplicates = %v, want 0", got)
				}
				for _, v := range w.violations {
					t.Error(v)
				}
			})
		})
	}
}

// Every byte taken from the process-wide budget for a send comes back,
// whichever way the send ends: confirmed, refused and skipped, failed
// synchronously, or never made because the session was halting. A leak
// grows with every failure until each partition of the process waits for
// budget for ever.
//
// Fails for: no budget.release when Send fails synchronously, or on the
// halted path.
func TestEntryPipeBudgetReturned(t *testing.T) {
	tests := []struct {
		name  string
		setup func(w *fakeEntryWorld, p *Partition)
	}{
		{"refused and skipped", func(w *fakeEntryWorld, p *Partition) {
			w.sendErr = map[string]error{"e2": fmt.Errorf("x: %w", wire.ErrTooLarge)}
			p.skipRefused = true
		}},
		{"send fails synchronously", func(w *fakeEntryWorld, _ *Partition) {
			w.sendErr, w.sendErrOnce = map[string]error{"e2": errors.New("producer is reconnecting")}, true
		}},
		// e0's duplicate receipt arrives before its Send returns: e1 has
		// its bytes when the session finds itself halted.
		{"halted after a duplicate receipt", func(w *fakeEntryWorld, _ *Partition) {
			w.settle = true
			first := true
			w.receipt = func(name string) (bool, error) {
				dup := name == "e0" && first
				first = first && !dup
				return dup, nil
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(6, nil)
				p := newTestEntryPartition(t, w)
				tt.setup(w, p)
				stop := runEntryPartition(t, p)
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 6 })
				stop()
				if got := p.budget.held(); got != 0 {
					t.Errorf("the budget holds %d bytes after the stop, want 0", got)
				}
				for _, v := range w.violations {
					t.Error(v)
				}
			})
		})
	}
}

// The cursor delivers the entry it just delivered again (its client
// reconnected between the two): the session starts over rather than send
// it twice.
//
// Fails for: the redelivery check `pos.Compare(last) <= 0` → `< 0`.
func TestEntryPipeSameEntryAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(6, nil)
		w.repeat = 3 // e2, twice in a row
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) >= 6 })
		stop()
		_, remote, _ := w.snapshot()
		if want := entryNames(0, 6); !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v: each once", remote, want)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// The entry the sync saw last, delivered again, follows it (gremlins
// survivor entrypipe.go:417, `< 0`: a redelivery of the last entry was
// taken for a takeover, and the third origins' watermarks re-learned).
func TestEntryContinuesSameEntry(t *testing.T) {
	rig := newSyncRig(t, rigConfig{third: []string{"north"}, fresh: true})
	p := &Partition{sync: rig.s, lastSeen: subsynctest.Pos(10, 4), hasSeen: true}
	if !p.continues(subsynctest.Pos(10, 4)) {
		t.Error("continues(10:4) after 10:4 = false, want true")
	}
}

// mdSource is a cursor that only says its mark-delete position.
type mdSource struct {
	entrySource
	md wire.MessageID
}

func (s mdSource) MarkDelete(context.Context) (wire.MessageID, bool, error) { return s.md, true, nil }

// startAt against the mark-delete position 10:4: the next entry of the
// ledger and the first entry of a later one start the session; what was
// acknowledged is passed over; any later entry starts the session again,
// until the same one came first maxStartAhead times in a row.
//
// Fails for the gremlins survivors entrypipe.go:452 (`&&` between the two
// next cases: every session start wasted three sessions first; `!=
// 0`: a later ledger's later entry sent first, out of order; `<=`) and
// :460 (`pos == p.aheadAt`: runs of different entries counted as one,
// so a later entry was taken as the start).
func TestStartAt(t *testing.T) {
	src := mdSource{md: wire.EntryID(10, 4)}
	names := map[int]string{startNext: "next", startAcknowledged: "acknowledged", startAhead: "ahead"}
	for _, tt := range []struct {
		name string
		seq  []marker.Position // first entries of successive sessions
		want []int
	}{
		{"the next entry", []marker.Position{subsynctest.Pos(10, 5)}, []int{startNext}},
		{"a later ledger's first entry", []marker.Position{subsynctest.Pos(11, 0)}, []int{startNext}},
		{"acknowledged", []marker.Position{subsynctest.Pos(10, 4), subsynctest.Pos(10, 0), subsynctest.Pos(9, 0)}, []int{startAcknowledged, startAcknowledged, startAcknowledged}},
		{"a later entry", []marker.Position{subsynctest.Pos(10, 7)}, []int{startAhead}},
		{"a later ledger's later entry", []marker.Position{subsynctest.Pos(11, 3)}, []int{startAhead}},
		{"the same later entry, again and again", []marker.Position{subsynctest.Pos(10, 7), subsynctest.Pos(10, 7), subsynctest.Pos(10, 7), subsynctest.Pos(10, 7)},
			[]int{startAhead, startAhead, startAhead, startNext}},
		{"different later entries", []marker.Position{subsynctest.Pos(10, 7), subsynctest.Pos(10, 7), subsynctest.Pos(10, 8), subsynctest.Pos(10, 8), subsynctest.Pos(10, 7)},
			[]int{startAhead, startAhead, startAhead, startAhead, startAhead}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &Partition{log: zap.NewNop()}
			for i, at := range tt.seq {
				got, err := p.startAt(context.Background(), src, at)
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want[i] {
					t.Errorf("session %d starting at %v: %s, want %s", i+1, at, names[got], names[tt.want[i]])
				}
			}
		})
	}
}

// A receipt is a duplicate only when the broker answers -1:-1: a copy
// stored in a remote's ledger 0 (a fresh cluster) is not (gremlins
// survivor entrypipe.go:490, `<= 0`: every session on such a remote
// halted on its first receipt, for ever).
func TestIsDuplicate(t *testing.T) {
	for _, tt := range []struct {
		id   wire.MessageID
		want bool
	}{
		{wire.EntryID(math.MaxUint64, math.MaxUint64), true},
		{wire.EntryID(0, 0), false},
		{wire.EntryID(0, 7), false},
		{wire.EntryID(500, 3), false},
	} {
		if got := isDuplicate(wire.Receipt{MessageID: tt.id}); got != tt.want {
			t.Errorf("isDuplicate(%d:%d) = %v, want %v", tt.id.Ledger, tt.id.Entry, got, tt.want)
		}
	}
}

// A cursor that fails to receive ends the session with that error, so
// that runSessions backs off and says so (gremlins survivor
// entrypipe.go:566, `sctx.Err() != nil`: the session ended as if
// stopped, and the next started at once).
func TestEntryPipeReceiveError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		gone := errors.New("consumer closed by the broker")
		w.recvErr = gone
		p := newTestEntryPartition(t, w)
		if _, err := p.session(context.Background()); !errors.Is(err, gone) {
			t.Errorf("session() = %v, want the receive error", err)
		}
	})
}

// Entries skipped (copies, markers, replicate_to) do not end the session
// (gremlins survivor entrypipe.go:635, `break`: a session restart, and a
// read-back, after every skipped entry).
func TestEntryPipeSkipsInOneSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(1, nil)
		w.add(3, func(b *wire.MetadataBuilder) { b.ReplicatedFrom = "north" })
		w.add(1, nil, replicateTo("east"))
		w.add(1, nil)
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 6 })
		stop()
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.sources) != 1 || w.opens != 1 {
			t.Errorf("%d cursors and %d producers opened, want one session", len(w.sources), w.opens)
		}
	})
}

// An entry in flight holds its bytes, metadata and payload, in the budget
// (gremlins survivor entrypipe.go:715, `len(patched) - len(payload)`: the
// bound counted the wrong size, even a negative one).
func TestEntryPipeBudgetHoldsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.hold = make(chan struct{})
		w.addPayload(make([]byte, 1000), nil)
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "e0 sent", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.seqs) == 1 })
		if got := p.budget.held(); got <= 1000 {
			t.Errorf("the budget holds %d bytes for an entry of 1,000 payload bytes in flight, want its metadata too", got)
		}
		close(w.hold)
		stop()
	})
}

// A send that fails at once ends the session with that error (gremlins
// survivor entrypipe.go:759, `sctx.Err() != nil`: the session ended as if
// stopped, and the next started at once, without backoff).
func TestEntryPipeSendError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(2, nil)
		boom := errors.New("producer is reconnecting")
		w.sendErr = map[string]error{"e1": boom}
		p := newTestEntryPartition(t, w)
		if _, err := p.session(context.Background()); !errors.Is(err, boom) {
			t.Errorf("session() = %v, want the send error", err)
		}
	})
}
