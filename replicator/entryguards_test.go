package replicator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
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
				if got := counter(p.m.DupsUnproven, "east", "west"); got != 0 {
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
		setup func(w *fakeEntryWorld, p *entryPartition)
	}{
		{"refused and skipped", func(w *fakeEntryWorld, p *entryPartition) {
			w.sendErr = map[string]error{"e2": fmt.Errorf("x: %w", wire.ErrTooLarge)}
			p.skipRefused = true
		}},
		{"send fails synchronously", func(w *fakeEntryWorld, _ *entryPartition) {
			w.sendErr, w.sendErrOnce = map[string]error{"e2": errors.New("producer is reconnecting")}, true
		}},
		// e0's duplicate receipt arrives before its Send returns: e1 has
		// its bytes when the session finds itself halted.
		{"halted after a duplicate receipt", func(w *fakeEntryWorld, _ *entryPartition) {
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

// A copy of the remote's marker counts only with a signed origin naming
// the remote itself: in an aggregate topology (west→east and north→east)
// north's signed copy of a marker claiming to come from west proves
// nothing about west.
//
// Fails for: the `from.Cluster != s.remote` check removed from markerAt.
func TestSyncSignedCopyFromTheRemote(t *testing.T) {
	tests := []struct {
		name    string
		from    marker.Origin
		applied bool
	}{
		{"signed, from the remote", marker.Origin{Cluster: "west", At: pos(90, 4), Signed: true}, true},
		{"unsigned, from the remote", marker.Origin{Cluster: "west", At: pos(90, 4)}, false},
		{"signed, from a third cluster", marker.Origin{Cluster: "north", At: pos(90, 4), Signed: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			payload, err := marker.Encode(update("west", "east", syncTopic), syncKey)
			if err != nil {
				t.Fatal(err)
			}
			if r.s.MarkerAt(context.Background(), pos(3, 4), payload, tt.from, "geo-sidecar.markers.west-->east") {
				t.Error("a copy of the remote's update forwarded")
			}
			_, queued := r.pending()["billing"]
			if queued != tt.applied {
				t.Errorf("update queued = %v, want %v", queued, tt.applied)
			}
			want := 1.0
			if tt.applied {
				want = 0
			}
			if got := counter(r.m.MarkersInvalid, "east", "unsigned-copy"); got != want {
				t.Errorf("markers_invalid_total{reason=\"unsigned-copy\"} = %v, want %v", got, want)
			}
		})
	}
}

// entrySeq and recordReach at the edges of the packing: ledger 0 (a
// fresh BookKeeper, or a test cluster, starts there), entry 0, an entry
// id just past what fits, the floor itself (the epochs of ledger ids
// from 2^31 on are TestEntrySeq's).
//
// Fails for: `pos.Ledger < 0` → `<= 0` in either, as the code was before
// epochs (a ledger 0 entry sent under a counted id, or its record
// ignored); `pos.Entry < 0` → `<= 0`; `record < 0` → `<= 0`.
func TestEntrySeqEdges(t *testing.T) {
	at := func(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }
	for _, tt := range []struct {
		name   string
		pos    marker.Position
		floor  uint64
		want   uint64
		packed bool
	}{
		{"ledger 0, fresh producer", at(0, 12), 0, 12, true},
		{"ledger 0, entry 0", at(0, 0), 0, 0, true},
		{"ledger 0, at the floor", at(0, 12), 12, 12, true},
		{"ledger 0, below the floor", at(0, 12), 13, 13, false},
		{"entry 2^32, fresh producer", at(10, 1<<32), 0, 0, false},
		{"entry 2^32-1, fresh producer", at(10, 1<<32-1), 0, 10<<32 | (1<<32 - 1), true},
		{"negative entry", at(10, -1), 7, 7, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, packed := entrySeq(tt.pos, tt.floor)
			if got != tt.want || packed != tt.packed {
				t.Errorf("entrySeq(%v, %d) = %d, %v; want %d, %v", tt.pos, tt.floor, got, packed, tt.want, tt.packed)
			}
		})
	}
	for _, tt := range []struct {
		name   string
		record int64
		pos    marker.Position
		want   int64
	}{
		{"ledger 0", 0<<32 | 7, at(0, 3), 5},
		{"ledger 0, the record is entry 0", 0, at(0, 0), 1},
		{"ledger 0, a later ledger's entry", 0<<32 | 7, at(1, 3), 0},
		{"negative ledger", 7, at(-1, 3), 0},
		{"ledger 2^31-1", (1<<31-1)<<32 | 9, at(1<<31-1, 0), 10},
	} {
		t.Run("recordReach "+tt.name, func(t *testing.T) {
			if got := recordReach(tt.record, tt.pos); got != tt.want {
				t.Errorf("recordReach(%d, %v) = %d, want %d", tt.record, tt.pos, got, tt.want)
			}
		})
	}
}

// takeover drops the third origins' watermarks and asks run to learn them
// again; without third origins there is nothing to learn.
//
// Fails for: `len(s.machine.Unknown()) == 0` → `!= 0` (gremlins survivor
// sync.go:149: a takeover with third origins never re-read the history,
// and requests went unanswered until the next restart).
func TestSyncTakeover(t *testing.T) {
	for _, tt := range []struct {
		name  string
		third []string
		asked bool
	}{
		{"third origins", []string{"north"}, true},
		{"none", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{third: tt.third})
			r.s.relearn = make(chan struct{}, 1)
			for _, o := range tt.third {
				r.s.machine.Learn(o, pos(4, 4))
			}
			r.s.Takeover()
			if got := len(r.s.relearn) == 1; got != tt.asked {
				t.Errorf("history re-read asked = %v, want %v", got, tt.asked)
			}
			if got := len(r.s.machine.Unknown()); got != len(tt.third) {
				t.Errorf("%d watermarks unknown after the takeover, want %d", got, len(tt.third))
			}
			r.s.Takeover() // a second one while the first is pending does not block
		})
	}
}

// followDue at its bounds: a new snapshot is followed half an interval
// after the last follow, an idle partition every idleFollow.
//
// Fails for the gremlins survivors sync.go:171 (`since > s.interval/2`,
// `s.interval*2`: updates after a new snapshot go out late) and :175
// (`since > idleFollow`).
func TestSyncFollowDueBounds(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tt := range []struct {
		name   string
		since  time.Duration
		every  time.Duration
		newest string // the newest snapshot at the last follow ("": the machine's, none yet)
		want   bool
	}{
		{"new snapshot, half an interval on", 500 * time.Millisecond, idleFollow, "snap-old", true},
		{"new snapshot, just before", 499 * time.Millisecond, idleFollow, "snap-old", false},
		{"idle, idleFollow on", idleFollow, time.Second, "", true},
		{"idle, just before", idleFollow - time.Millisecond, time.Second, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{}) // interval 1 s
			r.s.fl = followState{once: true, at: now.Add(-tt.since), every: tt.every, newestID: tt.newest}
			if got := r.s.followDue(now); got != tt.want {
				t.Errorf("followDue %v after the last follow = %v, want %v", tt.since, got, tt.want)
			}
		})
	}
}

// The outbox holds outboxSize markers: the oldest goes when one more is
// written (gremlins survivor sync.go:213, `>`: one more held).
func TestOutboxBound(t *testing.T) {
	var o outbox
	mk := func(i int) marker.Marker {
		return marker.Marker{Kind: marker.KindSnapshotRequest, SnapshotID: fmt.Sprint(i), From: "east", To: "west", Time: 1}
	}
	for i := range outboxSize + 1 {
		o.put(mk(i))
	}
	if o.take(mk(0), pos(1, 1)) {
		t.Error("the oldest marker still held past outboxSize")
	}
	if !o.take(mk(1), pos(1, 2)) {
		t.Error("the second oldest marker evicted")
	}
}

// A signed copy of the remote's marker delivered again at the same
// position (a new session reads from the cursor) was judged the first
// time: it is neither acted on again nor counted as a replay (gremlins
// survivor sync.go:359, `< 0`).
func TestSyncCopyDeliveredAgain(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	payload, err := marker.Encode(update("west", "east", syncTopic), syncKey)
	if err != nil {
		t.Fatal(err)
	}
	from := marker.Origin{Cluster: "west", At: pos(90, 4), Signed: true}
	for range 2 {
		r.s.MarkerAt(context.Background(), pos(3, 4), payload, from, "geo-sidecar.markers.west-->east")
	}
	if got := counter(r.m.MarkersInvalid, "east", "replayed"); got != 0 {
		t.Errorf("markers_invalid_total{reason=\"replayed\"} = %v, want 0 (delivered again, not replayed)", got)
	}
	if _, queued := r.pending()["billing"]; !queued {
		t.Error("the update is not queued")
	}
}

// A stale copy of the remote's update is counted as such, and not queued
// (gremlins survivor sync.go:370, `reason == ""`).
func TestSyncStaleCopyCounted(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	newer := update("west", "east", syncTopic)
	newer.Subscription = "audit"
	old := update("west", "east", syncTopic)
	old.Time = newer.Time - (2 * maxUpdateAge).Milliseconds() // far behind the writer's newest
	for i, up := range []marker.Marker{newer, old} {
		payload, err := marker.Encode(up, syncKey)
		if err != nil {
			t.Fatal(err)
		}
		from := marker.Origin{Cluster: "west", At: pos(90, int64(4+i)), Signed: true}
		r.s.MarkerAt(context.Background(), pos(3, int64(4+i)), payload, from, "geo-sidecar.markers.west-->east")
	}
	if got := counter(r.m.MarkersInvalid, "east", "stale-update"); got != 1 {
		t.Errorf("markers_invalid_total{reason=\"stale-update\"} = %v, want 1", got)
	}
	if got := r.pending(); len(got) != 1 {
		t.Errorf("queued %v, want audit only", got)
	}
}

// A marker that cannot be written does not stop the ones after it
// (gremlins survivor sync.go:396, `continue` → `break`).
func TestSyncWriteGoesOn(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	r.sink.failNext(1)
	r.s.write(context.Background(), []marker.Marker{request("east", "west", syncTopic), response("east", "west", syncTopic)})
	if got := kindsOf(r.sink.take()); len(got) != 1 || got[0] != marker.KindSnapshotResponse {
		t.Errorf("wrote %v, want the response after the failed request", got)
	}
}

// follow looks at every subscription of the partition, whatever the order
// the map hands them out: the ones it passes over (untracked, moved here
// by a remote's update, nothing to send yet) never end the round.
// Several rounds with many of each, so that the one to update comes
// after some of them in one round at least.
//
// Fails for the gremlins survivors sync.go:534, :541, :548 (`continue` →
// `break`: killed by TestSyncFollowSendsUpdates only when the map's
// order happened to put billing after another subscription).
func TestSyncFollowSeesEverySubscription(t *testing.T) {
	for round := range 5 {
		r := newSyncRig(t, rigConfig{})
		r.s.tracked = func(sub string) bool { return strings.HasPrefix(sub, "t-") }
		cacheSnapshot(t, r, "s1", pos(1, 10), pos(7, 20))
		r.local.md = map[string]marker.Position{"t-go": pos(1, 12)}
		for i := range 8 {
			r.local.md[fmt.Sprintf("untracked-%d", i)] = pos(1, 12)
			r.local.md[fmt.Sprintf("t-waiting-%d", i)] = pos(1, 5) // before the snapshot
			moved := fmt.Sprintf("t-moved-%d", i)
			r.local.md[moved] = pos(1, 12)
			r.applied.set("east", syncTopic, moved, pos(1, 20)) // set by a remote's update: still before it
		}
		if err := r.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.take()); len(got) != 1 || got["t-go"].Remote != pos(7, 20) {
			t.Fatalf("round %d: updates %v, want one, t-go to 7:20", round, got)
		}
	}
}

// An update copied from the same origin as the last one taken for its
// subscription is a replay (gremlins survivor sync.go:694 before main
// ordered updates by origin: `up.Time < last`; now `origin.Compare(last)
// < 0`).
func TestSyncUpdateSameOriginReplayed(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	up := update("west", "east", syncTopic)
	if reason := r.s.enqueueApply(up, pos(90, 4)); reason != "" {
		t.Fatalf("first update refused: %s", reason)
	}
	up.Remote = pos(9, 9)
	if reason := r.s.enqueueApply(up, pos(90, 4)); reason != "replayed" {
		t.Errorf("an update from the same origin refused as %q, want replayed", reason)
	}
	if got := r.pending()["billing"]; got != pos(5, 7) {
		t.Errorf("billing queued at %v, want 5:7", got)
	}
}

// The origin properties a forwarded entry carries: signed under the
// current key, for the target, over the entry's digest; never without a
// key.
//
// Fails for the gremlins survivor entrypipe.go:126 before main's version
// 2 signatures (`len(key) == 0`: entries sent unsigned, so no read-back
// finds them and every session start sends the in-flight window again);
// now origin.go's `!keys.IsZero()` negated.
func TestOriginPropsSigned(t *testing.T) {
	const topic = "persistent://t/ns/x-partition-0"
	id := wire.EntryID(10, 7)
	md, payload := []byte("metadata"), []byte("payload")
	for _, tt := range []struct {
		name string
		keys marker.Keys
	}{{"with a key", marker.NewKeys([]byte("0123456789abcdef"))}, {"without", marker.Keys{}}} {
		t.Run(tt.name, func(t *testing.T) {
			props := originProps(tt.keys, topic, "east", "west", id, md, payload)
			sig, hasSig := (&wire.Metadata{Properties: props}).Property(marker.PropOriginSig)
			if hasSig == tt.keys.IsZero() {
				t.Fatalf("origin properties %v: signature present = %v, want %v", props, hasSig, !tt.keys.IsZero())
			}
			d := marker.OriginDigest(md, payload)
			if hasSig && !marker.VerifyOrigin(tt.keys, topic, "east", "west", "10:7:-1", sig, &d) {
				t.Errorf("signature %q does not verify", sig)
			}
		})
	}
}

// A marker the sync writes (a request, a response, an update) is
// forwarded when the replicator reads it back: send remembers it first.
// Fails for the gremlins survivor sync.go:651 (`mk.Kind == KindSnapshot`:
// nothing this process writes would ever reach the remote).
func TestSyncSentMarkerForwarded(t *testing.T) {
	for i, mk := range []marker.Marker{request("east", "west", syncTopic), response("east", "west", syncTopic), update("east", "west", syncTopic)} {
		r := newSyncRig(t, rigConfig{})
		if err := r.s.send(context.Background(), mk); err != nil {
			t.Fatal(err)
		}
		payload, err := marker.Encode(mk, syncKey)
		if err != nil {
			t.Fatal(err)
		}
		if !r.s.MarkerAt(context.Background(), pos(3, int64(i)), payload, marker.Origin{}, "geo-sidecar.markers.east-->west") {
			t.Errorf("%v written by the sync and read back: not forwarded", mk.Kind)
		}
	}
}

// countStats adds what the machine counted since the last call, and
// observes the round trip only when a snapshot completed meanwhile. The
// machine's counts start at 0 here; a last reading below them stands for
// counts the machine made.
//
// Fails for the gremlins survivors sync.go:483, :484 (`+`: a counter
// decreasing panics) and :485 (`>=`, `<=`: the round trip observed
// without a completion, or not at all).
func TestSyncCountStats(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	r.s.last = snapshot.Stats{Started: -4, Completed: -1, TimedOut: -2, Unanswered: -3}
	r.s.countStats()
	r.s.countStats() // nothing new, twice
	r.s.countStats()
	for name, c := range map[string]struct {
		v    *prometheus.CounterVec
		want float64
	}{
		"started": {r.m.SnapshotsStarted, 4}, "completed": {r.m.SnapshotsCompleted, 1},
		"timed out": {r.m.SnapshotsTimedOut, 2}, "unanswered": {r.m.SnapshotsUnanswered, 3},
	} {
		if got := counter(c.v, "east", "west"); got != c.want {
			t.Errorf("snapshots %s = %v, want %v", name, got, c.want)
		}
	}
	var m dto.Metric
	if err := r.m.SnapshotRTT.WithLabelValues("east", "west").(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("round trips observed %d times, want once (one snapshot completed)", got)
	}
}

// The entry the sync saw last, delivered again, follows it (gremlins
// survivor entrypipe.go:417, `< 0`: a redelivery of the last entry was
// taken for a takeover, and the third origins' watermarks re-learned).
func TestEntryContinuesSameEntry(t *testing.T) {
	rig := newSyncRig(t, rigConfig{third: []string{"north"}, fresh: true})
	p := &entryPartition{sync: rig.s, lastSeen: pos(10, 4), hasSeen: true}
	if !p.continues(pos(10, 4)) {
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
		{"the next entry", []marker.Position{pos(10, 5)}, []int{startNext}},
		{"a later ledger's first entry", []marker.Position{pos(11, 0)}, []int{startNext}},
		{"acknowledged", []marker.Position{pos(10, 4), pos(10, 0), pos(9, 0)}, []int{startAcknowledged, startAcknowledged, startAcknowledged}},
		{"a later entry", []marker.Position{pos(10, 7)}, []int{startAhead}},
		{"a later ledger's later entry", []marker.Position{pos(11, 3)}, []int{startAhead}},
		{"the same later entry, again and again", []marker.Position{pos(10, 7), pos(10, 7), pos(10, 7), pos(10, 7)},
			[]int{startAhead, startAhead, startAhead, startNext}},
		{"different later entries", []marker.Position{pos(10, 7), pos(10, 7), pos(10, 8), pos(10, 8), pos(10, 7)},
			[]int{startAhead, startAhead, startAhead, startAhead, startAhead}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &entryPartition{log: zap.NewNop()}
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
