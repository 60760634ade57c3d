package subsync

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

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
	r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 1), Type: subscription.Exclusive})
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
				r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 9), Consumers: 1, Type: subscription.Exclusive})
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
				r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 30), Type: subscription.Exclusive})
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
				if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 4:10:-1"}) {
					t.Fatalf("first update: admin calls %v, want the reset after a reading", got)
				}
				if n := r.subs.StateReads(); n != 1 {
					t.Fatalf("first update: %d readings of the subscription, want 1", n)
				}
				time.Sleep(r.s.Interval)
				if tt.between != nil {
					tt.between(r, stats)
				}
				readings := stats.count()
				r.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
				if n := r.subs.StateReads() - 1; n != tt.wantReads {
					t.Errorf("second update: %d readings of the subscription, want %d", n, tt.wantReads)
				}
				if got := r.subs.TakeCalls(); !slices.Equal(got, tt.wantCalls) {
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
		r.subs.TakeCalls()
		time.Sleep(r.s.Interval - freshAge/2)
		// A follow reads the topic meanwhile.
		if _, err := r.s.Stats.Read(ctx, 0, 0); err != nil {
			t.Fatal(err)
		}
		readings, reads := stats.count(), r.subs.StateReads()
		time.Sleep(freshAge / 2)
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
		if n := stats.count() - readings; n != 0 {
			t.Errorf("%d new stats readings, want none (the follow's serves)", n)
		}
		if n := r.subs.StateReads() - reads; n != 0 {
			t.Errorf("%d readings of the subscription, want none", n)
		}
		if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 4:20:-1"}) {
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
		r.subs.ResetErr = errAdmin
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
		r.subs.ResetErr = nil
		reads := r.subs.StateReads()
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 30))
		if n := r.subs.StateReads() - reads; n != 1 {
			t.Errorf("%d readings after a failed reset, want 1", n)
		}
		if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 4:10:-1", "reset billing 4:20:-1", "reset billing 4:30:-1"}) {
			t.Errorf("admin calls %v", got)
		}
	})
}

// TestStandbyReadingBeforeTheMove: a reading sent before our last reset,
// however young, does not let the next reset go unread: a consumer may
// have attached since (here half a second after the reset).
func TestStandbyReadingBeforeTheMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, stats := standbyRig(t)
		ctx := context.Background()
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 10)) // reads the topic's stats, then resets
		r.subs.TakeCalls()
		time.Sleep(freshAge / 4)
		stats.set(syncTopic, "billing", SubStat{MarkDeleteAdvanced: 7, Consumers: 1})
		r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 9), Consumers: 1, Type: subscription.Exclusive})
		time.Sleep(freshAge / 4)
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
		if got := r.subs.TakeCalls(); len(got) > 0 {
			t.Errorf("admin calls %v: a reading from before the reset let a consumer be disconnected", got)
		}
	})
}
