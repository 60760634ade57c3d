package subsync

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// TestFollowConfirmsNewPositions: a position that would send an update is
// acted on only when the subscription was there or before it at the
// previous read; a new one, or one behind the previous read, waits for a
// read an interval later (confirm.go). The first case is the loss
// TestDrillThreeClustersNorthDown caught: a subscription created by the
// admin API read at the partition's end, before the broker reset it to
// the earliest message.
func TestFollowConfirmsNewPositions(t *testing.T) {
	p := subsynctest.Pos
	tests := []struct {
		name   string
		before map[string]marker.Position // read by an earlier follow; nil: none
		reads  []marker.Position          // billing at each follow, an interval apart
		want   []marker.Position          // the update's remote position after each (zero: none)
	}{
		{"created at the end, then reset to the earliest message", nil,
			[]marker.Position{p(1, 12), p(1, -1), p(1, -1)}, []marker.Position{{}, {}, {}}},
		{"new and really there", nil,
			[]marker.Position{p(1, 12), p(1, 12)}, []marker.Position{{}, p(7, 20)}},
		{"new, consumed on by the confirming read", nil,
			[]marker.Position{p(1, 12), p(1, 31)}, []marker.Position{{}, p(7, 40)}},
		{"new, then further back: that waits in turn", nil,
			[]marker.Position{p(1, 31), p(1, 12), p(1, 12)}, []marker.Position{{}, {}, p(7, 20)}},
		{"known and moved forward: at once", map[string]marker.Position{"billing": p(1, 5)},
			[]marker.Position{p(1, 12)}, []marker.Position{p(7, 20)}},
		{"known and moved back: confirmed first", map[string]marker.Position{"billing": p(1, 33)},
			[]marker.Position{p(1, 12), p(1, 12)}, []marker.Position{{}, p(7, 20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSyncRig(t, rigConfig{})
				cacheSnapshot(t, r, "s1", p(1, 10), p(7, 20))
				cacheSnapshot(t, r, "s2", p(1, 30), p(7, 40))
				if tt.before != nil {
					r.readBefore(tt.before)
				}
				for i, md := range tt.reads {
					if i > 0 {
						time.Sleep(r.s.Interval)
						if !r.s.followDue(time.Now()) {
							t.Fatalf("follow %d: not due an interval after a position waited", i)
						}
					}
					r.local.SetMD("billing", md)
					if err := r.s.follow(context.Background()); err != nil {
						t.Fatal(err)
					}
					if got := updatesWritten(r.sink.Take())["billing"].Remote; got != tt.want[i] {
						t.Errorf("follow %d (billing at %s): update to %v, want %v", i, md, got, tt.want[i])
					}
				}
			})
		})
	}
}

// TestFollowConfirmationWaitsAnInterval: a follow sooner than an interval
// after a position waited (another snapshot, data) reads again but does
// not confirm it.
func TestFollowConfirmationWaitsAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := subsynctest.Pos
		r := newSyncRig(t, rigConfig{})
		cacheSnapshot(t, r, "s1", p(1, 10), p(7, 20))
		r.local.SetMD("billing", p(1, 12))
		for i, wait := range []time.Duration{0, r.s.Interval / 2} {
			time.Sleep(wait)
			if err := r.s.follow(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := updatesWritten(r.sink.Take()); len(got) != 0 {
				t.Fatalf("follow %d: updates %v before the confirming read", i, got)
			}
		}
		time.Sleep(r.s.Interval / 2)
		if err := r.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take())["billing"].Remote; got != p(7, 20) {
			t.Errorf("update after the interval to %v, want 7:20", got)
		}
	})
}

// fencedSubAdmin is a remote's subscription admin for createOnRemote:
// Create runs during before creating, LastEntry answers last.
type fencedSubAdmin struct {
	*fakeSubAdmin
	during    func()
	createErr error
	last      marker.Position
	lastErr   error
}

func (a *fencedSubAdmin) Create(ctx context.Context, topic, sub string, at marker.Position) error {
	a.during()
	if a.createErr != nil {
		return a.createErr
	}
	return a.fakeSubAdmin.Create(ctx, topic, sub, at)
}

func (a *fencedSubAdmin) LastEntry(context.Context, string) (marker.Position, error) {
	return a.last, a.lastErr
}

// TestCreateOnRemoteFenced: while the sidecar creates a subscription on a
// cluster, and after, up to that cluster's newest entry then, the
// position the other direction's follow reads there is not taken for
// its consumers' (the broker shows the new subscription at the end for a
// moment). Consumers moving past it are followed again; a failed
// creation leaves no fence; without the newest entry the fence stays.
func TestCreateOnRemoteFenced(t *testing.T) {
	p := subsynctest.Pos
	tests := []struct {
		name      string
		createErr error
		lastErr   error
		after     []marker.Position // billing on east after the creation, read in turn
		want      []bool            // whether each sends an update
	}{
		{"fenced up to the newest entry", nil, nil, []marker.Position{p(1, 12), p(1, 30), p(1, 31)}, []bool{false, false, true}},
		{"newest entry unknown: fenced", nil, errAdmin, []marker.Position{p(1, 31)}, []bool{false}},
		{"creation failed: no fence", errAdmin, nil, []marker.Position{p(1, 31)}, []bool{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{}) // east→west: follows east
			cacheSnapshot(t, r, "s1", p(1, 10), p(7, 20))
			cacheSnapshot(t, r, "s2", p(1, 30), p(7, 40))
			r.readBefore(map[string]marker.Position{"billing": p(1, 5)})
			follow := func() bool {
				t.Helper()
				if err := r.s.follow(context.Background()); err != nil {
					t.Fatal(err)
				}
				_, sent := updatesWritten(r.sink.Take())["billing"]
				return sent
			}
			remote := &fencedSubAdmin{fakeSubAdmin: &fakeSubAdmin{}, createErr: tt.createErr, last: p(1, 30), lastErr: tt.lastErr}
			remote.during = func() {
				// The broker shows it at the end while creating it.
				r.local.SetMD("billing", p(1, 29))
				if follow() {
					t.Error("an update was sent from a position read while the subscription was being created")
				}
			}
			// west→east, creating billing on east, where r follows.
			creator := &Sync{Config: Config{Local: "west", Remote: "east", Topic: syncTopic, Applied: r.applied,
				RemoteSubs: remote, Metrics: r.m, Log: zaptest.NewLogger(t)}}
			creator.createOnRemote(context.Background(), "billing")
			for i, md := range tt.after {
				r.local.SetMD("billing", md)
				if got := follow(); got != tt.want[i] {
					t.Errorf("billing at %s after the creation: update sent %v, want %v", md, got, tt.want[i])
				}
			}
		})
	}
}

// TestFollowConfirmationReadsPositions: with stats readings, the follow
// that confirms a waiting position reads the positions, although the
// reading shows nothing moved (which would otherwise keep the last ones):
// a kept position confirms nothing.
func TestFollowConfirmationReadsPositions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := subsynctest.Pos
		r, st := movedRig(t)
		cacheSnapshot(t, r, "s1", p(1, 10), p(7, 20))
		st.set(syncTopic, "billing", SubStat{Backlog: 0, MarkDeleteAdvanced: 100})
		r.local.SetMD("billing", p(1, 12))
		if err := r.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) != 0 {
			t.Fatalf("updates %v from a first read", got)
		}
		reads := r.local.MDCalls
		time.Sleep(r.s.Interval)
		if err := r.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r.local.MDCalls != reads+1 {
			t.Errorf("the confirming follow read positions %d times, want once", r.local.MDCalls-reads)
		}
		if got := updatesWritten(r.sink.Take())["billing"].Remote; got != p(7, 20) {
			t.Errorf("update after the confirming read to %v, want 7:20", got)
		}
	})
}
