package subsync

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// standbyRig is a protocol rig whose subscription billing is an
// Exclusive standby copy here (nobody attached, the remote's application
// Exclusive: the admin route), with the topic's shared stats reading.
func standbyRig(t *testing.T) (*syncRig, *fakeStats) {
	r, _, local, remote := protocolRig(t)
	local.set("billing", subscription.State{Exists: true})
	remote.set("billing", subscription.State{Exists: true, Consumers: 1, Type: subscription.Exclusive})
	r.subs.set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 1), Type: subscription.Exclusive})
	stats := &fakeStats{}
	stats.set(syncTopic, "billing", SubStat{MarkDeleteAdvanced: 7})
	r.s.Stats = NewPoller(stats, syncTopic, false, nil)
	return r, stats
}

// TestStandbyResetWithoutReading: once a reset of ours put the standby
// copy where it is, the next reset goes without reading the subscription
// (one request, not three) when the topic's stats reading, sent after
// that reset and less than freshAge ago, shows nobody attached and no
// acknowledgement since; otherwise the subscription is read first, as
// before.
func TestStandbyResetWithoutReading(t *testing.T) {
	tests := []struct {
		name string
		// between runs after the first reset, before the second update.
		between   func(r *syncRig, stats *fakeStats)
		wantReads int // State calls for the second update
		wantCalls []string
	}{
		{name: "nobody attached, nothing moved: reset at once",
			wantCalls: []string{"reset billing 4:20:-1"}},
		{name: "a consumer attached: read, refused, no reset",
			between: func(r *syncRig, stats *fakeStats) {
				stats.set(syncTopic, "billing", SubStat{MarkDeleteAdvanced: 7, Consumers: 1})
				r.subs.set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 9), Consumers: 1, Type: subscription.Exclusive})
			},
			wantReads: 1},
		{name: "acknowledged since (the timestamp moved): read first",
			between: func(r *syncRig, stats *fakeStats) {
				stats.set(syncTopic, "billing", SubStat{MarkDeleteAdvanced: 8})
			},
			wantReads: 1, wantCalls: []string{"reset billing 4:20:-1"}},
		{name: "acknowledged past the update since: read, not moved back",
			between: func(r *syncRig, stats *fakeStats) {
				stats.set(syncTopic, "billing", SubStat{MarkDeleteAdvanced: 8})
				r.subs.set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 30), Type: subscription.Exclusive})
			},
			wantReads: 1},
		{name: "no stats reading: read first",
			between: func(r *syncRig, stats *fakeStats) {
				stats.mu.Lock()
				stats.err = errAdmin
				stats.mu.Unlock()
			},
			wantReads: 1, wantCalls: []string{"reset billing 4:20:-1"}},
		{name: "gone from the reading: read first",
			between: func(r *syncRig, stats *fakeStats) {
				stats.drop(syncTopic, "billing")
			},
			wantReads: 1, wantCalls: []string{"reset billing 4:20:-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, stats := standbyRig(t)
				ctx := context.Background()
				r.s.apply(ctx, "billing", subsynctest.Pos(4, 10))
				if got := r.subs.takeCalls(); !slices.Equal(got, []string{"reset billing 4:10:-1"}) {
					t.Fatalf("first update: admin calls %v, want the reset after a reading", got)
				}
				if n := r.subs.stateReads(); n != 1 {
					t.Fatalf("first update: %d readings of the subscription, want 1", n)
				}
				time.Sleep(r.s.Interval)
				if tt.between != nil {
					tt.between(r, stats)
				}
				readings := stats.count()
				if _, held := r.s.apply(ctx, "billing", subsynctest.Pos(4, 20)); held {
					t.Fatal("held after an interval")
				}
				if n := r.subs.stateReads() - 1; n != tt.wantReads {
					t.Errorf("second update: %d readings of the subscription, want %d", n, tt.wantReads)
				}
				if got := r.subs.takeCalls(); !slices.Equal(got, tt.wantCalls) {
					t.Errorf("second update: admin calls %v, want %v", got, tt.wantCalls)
				}
				// The reading before the first reset is older than it: a new
				// one was asked for.
				if n := stats.count() - readings; n != 1 {
					t.Errorf("%d stats readings for the second update, want 1 (the first predates the reset)", n)
				}
			})
		})
	}
}

// TestStandbyReadingAfterTheMove: a stats reading sent before our last
// reset cannot show that nobody attached since; one sent after it, still
// young, serves without a new request.
func TestStandbyReadingAfterTheMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, stats := standbyRig(t)
		ctx := context.Background()
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 10))
		r.subs.takeCalls()
		time.Sleep(r.s.Interval - freshAge/2)
		// A follow reads the topic meanwhile.
		if _, err := r.s.Stats.Read(ctx, 0, 0); err != nil {
			t.Fatal(err)
		}
		readings, reads := stats.count(), r.subs.stateReads()
		time.Sleep(freshAge / 2)
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
		if n := stats.count() - readings; n != 0 {
			t.Errorf("%d new stats readings, want none (the follow's serves)", n)
		}
		if n := r.subs.stateReads() - reads; n != 0 {
			t.Errorf("%d readings of the subscription, want none", n)
		}
		if got := r.subs.takeCalls(); !slices.Equal(got, []string{"reset billing 4:20:-1"}) {
			t.Errorf("admin calls %v", got)
		}
	})
}

// TestStandbyAfterFailure: a reset that failed leaves the position
// unknown (it may have landed): the next reset reads first.
func TestStandbyAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := standbyRig(t)
		ctx := context.Background()
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 10))
		time.Sleep(r.s.Interval)
		r.subs.resetErr = errAdmin
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
		r.subs.resetErr = nil
		reads := r.subs.stateReads()
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 30))
		if n := r.subs.stateReads() - reads; n != 1 {
			t.Errorf("%d readings after a failed reset, want 1", n)
		}
		if got := r.subs.takeCalls(); !slices.Equal(got, []string{"reset billing 4:10:-1", "reset billing 4:20:-1", "reset billing 4:30:-1"}) {
			t.Errorf("admin calls %v", got)
		}
	})
}

// enqueue feeds an update to `at` for sub as read from the remote, its
// origin the n-th.
func enqueue(t *testing.T, r *syncRig, sub string, at marker.Position, n int64) {
	t.Helper()
	up := marker.Marker{Kind: marker.KindUpdate, From: "west", To: "east", Topic: syncTopic, Subscription: sub,
		Remote: at, Time: time.Now().UnixMilli()}
	if reason := r.s.enqueueApply(up, subsynctest.Pos(90, n)); reason != "" {
		t.Fatalf("update refused: %s", reason)
	}
}

// TestStandbyHold: updates that would reset a standby copy less than a
// snapshot interval after our last reset wait, the newest replacing older
// ones, and the newest is applied when the time is up (the tail ends in
// step); a copy moved over the protocol is never held.
func TestStandbyHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := standbyRig(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go r.s.applyLoop(ctx)
		enqueue(t, r, "billing", subsynctest.Pos(4, 10), 1)
		synctest.Wait()
		if got := r.subs.takeCalls(); !slices.Equal(got, []string{"reset billing 4:10:-1"}) {
			t.Fatalf("first update: %v", got)
		}
		time.Sleep(r.s.Interval / 4)
		enqueue(t, r, "billing", subsynctest.Pos(4, 11), 2)
		synctest.Wait()
		time.Sleep(r.s.Interval / 4)
		enqueue(t, r, "billing", subsynctest.Pos(4, 12), 3)
		synctest.Wait()
		if got := r.subs.takeCalls(); len(got) > 0 {
			t.Errorf("reset within an interval of the last: %v", got)
		}
		if got := r.pending(); got["billing"] != subsynctest.Pos(4, 12) {
			t.Errorf("pending %v, want billing's newest update (4:12)", got)
		}
		time.Sleep(r.s.Interval / 2)
		synctest.Wait()
		if got := r.subs.takeCalls(); !slices.Equal(got, []string{"reset billing 4:12:-1"}) {
			t.Errorf("when the time is up: %v, want the newest update applied", got)
		}
		if got := r.pending(); len(got) > 0 {
			t.Errorf("still pending: %v", got)
		}

		// Failover applications on the remote: the protocol route,
		// every update at once.
		f := r.s.Follow.(*fakeFollower)
		r.s.RemoteStates.(*fakeStates).set("audit", subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover})
		r.s.SubStates.(*fakeStates).set("audit", subscription.State{Exists: true})
		r.subs.set("audit", subscription.State{Exists: true})
		time.Sleep(targetRefresh) // read again, with audit
		for i := range int64(3) {
			enqueue(t, r, "audit", subsynctest.Pos(4, 10+i), 10+i)
			synctest.Wait()
			time.Sleep(r.s.Interval / 4)
		}
		if n := len(f.take()); n != 3 {
			t.Errorf("%d protocol moves for 3 updates, want 3", n)
		}
	})
}
