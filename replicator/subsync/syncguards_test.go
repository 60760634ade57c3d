package subsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// Tests of the subscription sync's guards that a hand mutation audit of
// the data path found untested; each names the mutation it fails for.

// A copy of the remote's marker counts only with a signed origin naming
// the remote itself: in an aggregate topology (west→east and north→east)
// north's signed copy of a marker claiming to come from west proves
// nothing about west.
//
// Fails for: the `from.Cluster != s.Remote` check removed from markerAt.
func TestSyncSignedCopyFromTheRemote(t *testing.T) {
	tests := []struct {
		name    string
		from    marker.Origin
		applied bool
	}{
		{"signed, from the remote", marker.Origin{Cluster: "west", At: subsynctest.Pos(90, 4), Signed: true}, true},
		{"unsigned, from the remote", marker.Origin{Cluster: "west", At: subsynctest.Pos(90, 4)}, false},
		{"signed, from a third cluster", marker.Origin{Cluster: "north", At: subsynctest.Pos(90, 4), Signed: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			payload, err := marker.Encode(update("west", "east", syncTopic), syncKey)
			if err != nil {
				t.Fatal(err)
			}
			if r.s.MarkerAt(context.Background(), subsynctest.Pos(3, 4), payload, tt.from, "geo-sidecar.markers.west-->east") {
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
			if got := metricstest.Counter(r.m.MarkersInvalid, "east", "unsigned-copy"); got != want {
				t.Errorf("markers_invalid_total{reason=\"unsigned-copy\"} = %v, want %v", got, want)
			}
		})
	}
}

// takeover drops the third origins' watermarks and asks run to learn them
// again; without third origins there is nothing to learn.
//
// Fails for: `len(s.Machine.Unknown()) == 0` → `!= 0` (gremlins survivor
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
				r.s.Machine.Learn(o, subsynctest.Pos(4, 4))
			}
			r.s.Takeover()
			if got := len(r.s.relearn) == 1; got != tt.asked {
				t.Errorf("history re-read asked = %v, want %v", got, tt.asked)
			}
			if got := len(r.s.Machine.Unknown()); got != len(tt.third) {
				t.Errorf("%d watermarks unknown after the takeover, want %d", got, len(tt.third))
			}
			r.s.Takeover() // a second one while the first is pending does not block
		})
	}
}

// followDue at its bounds: a new snapshot is followed half an interval
// after the last follow, an idle partition every idleFollow.
//
// Fails for the gremlins survivors sync.go:171 (`since > s.Interval/2`,
// `s.Interval*2`: updates after a new snapshot go out late) and :175
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
			r.s.pace.once, r.s.pace.at, r.s.pace.every, r.s.pace.newestID = true, now.Add(-tt.since), tt.every, tt.newest
			if got := r.s.followDue(now); got != tt.want {
				t.Errorf("followDue %v after the last follow = %v, want %v", tt.since, got, tt.want)
			}
		})
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
	from := marker.Origin{Cluster: "west", At: subsynctest.Pos(90, 4), Signed: true}
	for range 2 {
		r.s.MarkerAt(context.Background(), subsynctest.Pos(3, 4), payload, from, "geo-sidecar.markers.west-->east")
	}
	if got := metricstest.Counter(r.m.MarkersInvalid, "east", "replayed"); got != 0 {
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
		from := marker.Origin{Cluster: "west", At: subsynctest.Pos(90, int64(4+i)), Signed: true}
		r.s.MarkerAt(context.Background(), subsynctest.Pos(3, int64(4+i)), payload, from, "geo-sidecar.markers.west-->east")
	}
	if got := metricstest.Counter(r.m.MarkersInvalid, "east", "stale-update"); got != 1 {
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
	r.sink.FailNext(1)
	r.s.write(context.Background(), []marker.Marker{subsynctest.Request("east", "west", syncTopic), response("east", "west", syncTopic)})
	if got := subsynctest.KindsOf(r.sink.Take()); len(got) != 1 || got[0] != marker.KindSnapshotResponse {
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
		r.s.Tracked = func(sub string) bool { return strings.HasPrefix(sub, "t-") }
		cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
		r.local.MD = map[string]marker.Position{"t-go": subsynctest.Pos(1, 12)}
		for i := range 8 {
			r.local.MD[fmt.Sprintf("untracked-%d", i)] = subsynctest.Pos(1, 12)
			r.local.MD[fmt.Sprintf("t-waiting-%d", i)] = subsynctest.Pos(1, 5) // before the snapshot
			moved := fmt.Sprintf("t-moved-%d", i)
			r.local.MD[moved] = subsynctest.Pos(1, 12)
			r.applied.set("east", syncTopic, moved, subsynctest.Pos(1, 20)) // set by a remote's update: still before it
		}
		r.readBefore(r.local.MD)
		if err := r.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) != 1 || got["t-go"].Remote != subsynctest.Pos(7, 20) {
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
	if reason := r.s.enqueueApply(up, subsynctest.Pos(90, 4)); reason != "" {
		t.Fatalf("first update refused: %s", reason)
	}
	up.Remote = subsynctest.Pos(9, 9)
	if reason := r.s.enqueueApply(up, subsynctest.Pos(90, 4)); reason != "replayed" {
		t.Errorf("an update from the same origin refused as %q, want replayed", reason)
	}
	if got := r.pending()["billing"]; got != subsynctest.Pos(5, 7) {
		t.Errorf("billing queued at %v, want 5:7", got)
	}
}

// A marker the sync writes (a request, a response, an update) is
// forwarded when the replicator reads it back: send remembers it first.
// Fails for the gremlins survivor sync.go:651 (`mk.Kind == KindSnapshot`:
// nothing this process writes would ever reach the remote).
func TestSyncSentMarkerForwarded(t *testing.T) {
	for i, mk := range []marker.Marker{subsynctest.Request("east", "west", syncTopic), response("east", "west", syncTopic), update("east", "west", syncTopic)} {
		r := newSyncRig(t, rigConfig{})
		if err := r.s.send(context.Background(), mk); err != nil {
			t.Fatal(err)
		}
		payload, err := marker.Encode(mk, syncKey)
		if err != nil {
			t.Fatal(err)
		}
		if !r.s.MarkerAt(context.Background(), subsynctest.Pos(3, int64(i)), payload, marker.Origin{}, "geo-sidecar.markers.east-->west") {
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
		if got := metricstest.Counter(c.v, "east", "west"); got != c.want {
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

// Run returns only after the apply worker it started ended: an update
// being applied when the stop came (an admin call in flight) finishes
// before Run returns, so nothing moves a subscription after the sync
// stopped.
//
// Fails for: `defer s.stopApplying()` removed from Run (Run returned
// while the reset was still in flight).
func TestSyncRunWaitsForApplyWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 3)})
		log := &eventLog{}
		blocking := &blockingSubAdmin{fakeSubAdmin: r.subs, release: make(chan struct{}), log: log}
		r.s.SubAdmin = blocking
		up := update("west", "east", syncTopic)
		up.Remote = subsynctest.Pos(1, 10)
		if reason := r.s.enqueueApply(up, subsynctest.Pos(90, 2)); reason != "" {
			t.Fatalf("update refused: %s", reason)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.s.Run(ctx, func() bool { return true })
			log.add("run returned")
		}()
		synctest.Wait() // the worker is in the reset
		if got := log.events(); !slices.Equal(got, []string{"reset began"}) {
			t.Fatalf("events before the stop: %v, want the reset begun", got)
		}
		cancel()
		synctest.Wait() // Run ended, or waits for the worker
		select {
		case <-done:
			t.Error("Run returned while an update was being applied")
		default:
		}
		close(blocking.release)
		<-done
		want := []string{"reset began", "reset returned", "run returned"}
		if got := log.events(); !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
	})
}
