package subscription_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

func pos(ledger, entry int64, batch int32) marker.Position {
	return marker.Position{Ledger: ledger, Entry: entry, Batch: batch}
}

// fakeCache is a stand-in for snapshot.Machine's cache: snapshots in
// completion order; Covering returns the newest whose Local entry is at or
// before md's.
type fakeCache []snapshot.Snapshot

func (c fakeCache) Covering(md marker.Position) (snapshot.Snapshot, bool) {
	for i := len(c) - 1; i >= 0; i-- {
		l := c[i].Local
		if l.Ledger < md.Ledger || l.Ledger == md.Ledger && l.Entry <= md.Entry {
			return c[i], true
		}
	}
	return snapshot.Snapshot{}, false
}

var _ subscription.Covering = (*snapshot.Machine)(nil)

func TestPlanner(t *testing.T) {
	s1 := snapshot.Snapshot{ID: "s1", Local: pos(1, 10, -1), Remote: pos(7, 100, -1)}
	s2 := snapshot.Snapshot{ID: "s2", Local: pos(1, 20, -1), Remote: pos(7, 200, -1)}
	s3 := snapshot.Snapshot{ID: "s3", Local: pos(2, 0, -1), Remote: pos(8, 0, -1)}
	// sameRemote completes later than s2 but names the same remote
	// position (nothing new on the remote in between).
	sameRemote := snapshot.Snapshot{ID: "s2b", Local: pos(1, 25, -1), Remote: pos(7, 200, -1)}
	all := fakeCache{s1, s2, s3}

	type step struct {
		forget string          // Forget this subscription instead of Next
		sub    string          // subscription for Next
		md     marker.Position // its local mark-delete position
		cache  fakeCache       // nil: all
		want   string          // snapshot ID expected, "" for none
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"empty cache", []step{
			{sub: "a", md: pos(9, 9, -1), cache: fakeCache{}, want: ""},
		}},
		{"nothing covered yet", []step{
			{sub: "a", md: pos(1, 9, -1), want: ""},
			{sub: "a", md: pos(0, 99, -1), want: ""},
		}},
		{"first covered snapshot", []step{
			{sub: "a", md: pos(1, 10, -1), want: "s1"},
		}},
		{"covered at entry granularity", []step{
			{sub: "a", md: pos(1, 10, 3), want: "s1"},
		}},
		{"same snapshot again", []step{
			{sub: "a", md: pos(1, 10, -1), want: "s1"},
			{sub: "a", md: pos(1, 10, -1), want: ""},
			{sub: "a", md: pos(1, 15, -1), want: ""},
		}},
		{"newer snapshots", []step{
			{sub: "a", md: pos(1, 12, -1), want: "s1"},
			{sub: "a", md: pos(1, 20, -1), want: "s2"},
			{sub: "a", md: pos(1, 21, -1), want: ""},
			{sub: "a", md: pos(3, 0, -1), want: "s3"},
		}},
		{"skips to the newest covered", []step{
			{sub: "a", md: pos(5, 0, -1), want: "s3"},
			{sub: "a", md: pos(6, 0, -1), want: ""},
		}},
		{"newer snapshot with the same remote position", []step{
			{sub: "a", md: pos(1, 30, -1), cache: fakeCache{s1, s2}, want: "s2"},
			{sub: "a", md: pos(1, 30, -1), cache: fakeCache{s1, s2, sameRemote}, want: ""},
		}},
		{"md moves backwards", []step{
			{sub: "a", md: pos(1, 20, -1), want: "s2"},
			{sub: "a", md: pos(1, 10, -1), want: ""},
			{sub: "a", md: pos(1, 5, -1), want: ""},
			{sub: "a", md: pos(1, 20, -1), want: ""},
			{sub: "a", md: pos(2, 0, -1), want: "s3"},
		}},
		{"subscriptions are independent", []step{
			{sub: "a", md: pos(1, 20, -1), want: "s2"},
			{sub: "b", md: pos(1, 10, -1), want: "s1"},
			{sub: "b", md: pos(1, 20, -1), want: "s2"},
			{sub: "a", md: pos(1, 20, -1), want: ""},
			{sub: "c", md: pos(1, 0, -1), want: ""},
			{sub: "c", md: pos(2, 0, -1), want: "s3"},
			{sub: "b", md: pos(1, 20, -1), want: ""},
		}},
		{"forget", []step{
			{sub: "a", md: pos(1, 20, -1), want: "s2"},
			{sub: "b", md: pos(1, 20, -1), want: "s2"},
			{forget: "a"},
			{sub: "a", md: pos(1, 20, -1), want: "s2"},
			{sub: "a", md: pos(1, 20, -1), want: ""},
			{sub: "b", md: pos(1, 20, -1), want: ""},
			{forget: "a"},
			{sub: "a", md: pos(1, 10, -1), want: "s1"},
		}},
		{"forget unknown", []step{
			{forget: "nope"},
			{sub: "a", md: pos(1, 10, -1), want: "s1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := subscription.NewPlanner()
			for i, st := range tt.steps {
				if st.forget != "" {
					p.Forget(st.forget)
					continue
				}
				cache := st.cache
				if cache == nil {
					cache = all
				}
				got, ok := p.Next(st.sub, st.md, cache)
				if ok != (st.want != "") || ok && got.ID != st.want {
					t.Fatalf("step %d: Next(%q, %s) = %q, %v; want %q", i, st.sub, st.md, got.ID, ok, st.want)
				}
				if ok {
					if w := cache[slices.IndexFunc(cache, func(s snapshot.Snapshot) bool { return s.ID == st.want })]; got != w {
						t.Fatalf("step %d: Next returned %+v, want %+v", i, got, w)
					}
				}
			}
		})
	}
}

func TestPlannerZeroValue(t *testing.T) {
	var p subscription.Planner
	p.Forget("a")
	s := snapshot.Snapshot{ID: "s1", Local: pos(1, 1, -1), Remote: pos(2, 2, -1)}
	if got, ok := p.Next("a", pos(1, 1, -1), fakeCache{s}); !ok || got.ID != "s1" {
		t.Fatalf("Next = %q, %v; want s1", got.ID, ok)
	}
	if _, ok := p.Next("a", pos(1, 1, -1), fakeCache{s}); ok {
		t.Fatal("Next returned the same snapshot twice")
	}
}

type call struct {
	op  string // "state", "create", "reset"
	at  marker.Position
	top string
	sub string
}

// fakeAdmin records the calls made and answers with st and the errors.
type fakeAdmin struct {
	st                            subscription.State
	stateErr, createErr, resetErr error
	calls                         []call
}

func (f *fakeAdmin) State(ctx context.Context, topic, sub string) (subscription.State, error) {
	f.calls = append(f.calls, call{op: "state", top: topic, sub: sub})
	return f.st, f.stateErr
}

func (f *fakeAdmin) Create(ctx context.Context, topic, sub string, at marker.Position) error {
	f.calls = append(f.calls, call{op: "create", at: at, top: topic, sub: sub})
	return f.createErr
}

func (f *fakeAdmin) Reset(ctx context.Context, topic, sub string, at marker.Position) error {
	f.calls = append(f.calls, call{op: "reset", at: at, top: topic, sub: sub})
	return f.resetErr
}

func TestApply(t *testing.T) {
	const topic, sub = "persistent://t/n/orders-partition-3", "billing"
	errBoom := errors.New("boom")
	exists := func(md marker.Position, consumers int) subscription.State {
		return subscription.State{Exists: true, MarkDelete: md, Consumers: consumers}
	}
	state := call{op: "state", top: topic, sub: sub}
	create := func(at marker.Position) call { return call{op: "create", at: at, top: topic, sub: sub} }
	reset := func(at marker.Position) call { return call{op: "reset", at: at, top: topic, sub: sub} }

	tests := []struct {
		name      string
		admin     fakeAdmin
		to        marker.Position
		want      subscription.Outcome
		wantErr   error // errors.Is target; nil for no error
		wantCalls []call
	}{
		{
			name:      "missing: created at the entry",
			admin:     fakeAdmin{st: subscription.State{}},
			to:        pos(5, 7, -1),
			want:      subscription.Created,
			wantCalls: []call{state, create(pos(5, 7, -1))},
		},
		{
			name:      "missing, to inside a batch: created at the whole entry",
			admin:     fakeAdmin{st: subscription.State{}},
			to:        pos(5, 7, 3),
			want:      subscription.Created,
			wantCalls: []call{state, create(pos(5, 7, -1))},
		},
		{
			name:      "consumers attached: refused, no reset",
			admin:     fakeAdmin{st: exists(pos(5, 1, -1), 1)},
			to:        pos(5, 7, -1),
			want:      subscription.RefusedConsumers,
			wantCalls: []call{state},
		},
		{
			name:      "consumers attached and backwards: consumers first",
			admin:     fakeAdmin{st: exists(pos(5, 9, -1), 3)},
			to:        pos(5, 7, -1),
			want:      subscription.RefusedConsumers,
			wantCalls: []call{state},
		},
		{
			name:      "backwards entry",
			admin:     fakeAdmin{st: exists(pos(5, 9, -1), 0)},
			to:        pos(5, 7, -1),
			want:      subscription.RefusedBackwards,
			wantCalls: []call{state},
		},
		{
			name:      "backwards ledger",
			admin:     fakeAdmin{st: exists(pos(6, 0, -1), 0)},
			to:        pos(5, 700, -1),
			want:      subscription.RefusedBackwards,
			wantCalls: []call{state},
		},
		{
			name:      "equal entry",
			admin:     fakeAdmin{st: exists(pos(5, 7, -1), 0)},
			to:        pos(5, 7, -1),
			want:      subscription.RefusedBackwards,
			wantCalls: []call{state},
		},
		{
			name:      "equal entry, to later in the batch",
			admin:     fakeAdmin{st: exists(pos(5, 7, 0), 0)},
			to:        pos(5, 7, 9),
			want:      subscription.RefusedBackwards,
			wantCalls: []call{state},
		},
		{
			name:      "equal entry, mark-delete batch ignored",
			admin:     fakeAdmin{st: exists(pos(5, 7, 2), 0)},
			to:        pos(5, 7, -1),
			want:      subscription.RefusedBackwards,
			wantCalls: []call{state},
		},
		{
			name:      "forward entry: reset at the entry",
			admin:     fakeAdmin{st: exists(pos(5, 7, -1), 0)},
			to:        pos(5, 8, -1),
			want:      subscription.Applied,
			wantCalls: []call{state, reset(pos(5, 8, -1))},
		},
		{
			name:      "forward ledger",
			admin:     fakeAdmin{st: exists(pos(5, 900, -1), 0)},
			to:        pos(6, 0, -1),
			want:      subscription.Applied,
			wantCalls: []call{state, reset(pos(6, 0, -1))},
		},
		{
			name:      "forward, to inside a batch: reset at the whole entry",
			admin:     fakeAdmin{st: exists(pos(5, 7, -1), 0)},
			to:        pos(5, 20, 4),
			want:      subscription.Applied,
			wantCalls: []call{state, reset(pos(5, 20, -1))},
		},
		{
			name:      "forward, batch 0",
			admin:     fakeAdmin{st: exists(pos(5, 7, 3), 0)},
			to:        pos(5, 8, 0),
			want:      subscription.Applied,
			wantCalls: []call{state, reset(pos(5, 8, -1))},
		},
		{
			name:      "state error",
			admin:     fakeAdmin{stateErr: errBoom},
			to:        pos(5, 8, -1),
			want:      subscription.Failed,
			wantErr:   errBoom,
			wantCalls: []call{state},
		},
		{
			name:      "create error",
			admin:     fakeAdmin{createErr: errBoom},
			to:        pos(5, 8, 2),
			want:      subscription.Failed,
			wantErr:   errBoom,
			wantCalls: []call{state, create(pos(5, 8, -1))},
		},
		{
			name:      "reset error",
			admin:     fakeAdmin{st: exists(pos(5, 7, -1), 0), resetErr: errBoom},
			to:        pos(5, 8, 2),
			want:      subscription.Failed,
			wantErr:   errBoom,
			wantCalls: []call{state, reset(pos(5, 8, -1))},
		},
		{
			name:      "context error passed through",
			admin:     fakeAdmin{stateErr: context.Canceled},
			to:        pos(5, 8, -1),
			want:      subscription.Failed,
			wantErr:   context.Canceled,
			wantCalls: []call{state},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin := tt.admin
			// Nothing known of the subscription: the admin route reads it
			// and decides on that (no protocol mover: the fallback alone).
			res, err := subscription.Apply(context.Background(), &admin, subscription.Movers{}, subscription.Target{}, topic, sub, tt.to)
			got := res.Outcome
			if got != tt.want {
				t.Errorf("Apply = %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("Apply error = %v, want nil", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("Apply error = %v, want one wrapping %v", err, tt.wantErr)
			case err != nil && (!strings.Contains(err.Error(), topic) || !strings.Contains(err.Error(), sub)):
				t.Errorf("Apply error %q does not name topic and subscription", err)
			}
			if !slices.Equal(admin.calls, tt.wantCalls) {
				t.Errorf("calls = %+v\nwant    %+v", admin.calls, tt.wantCalls)
			}
			// Reset or created at an entry, the subscription's mark-delete
			// position is the entry before: at most that is the update's.
			moved := got == subscription.Applied || got == subscription.Created
			wantUpTo := pos(tt.to.Ledger, tt.to.Entry-1, -1)
			if res.Moved != moved || (moved && res.UpTo != wantUpTo) {
				t.Errorf("moved %v up to %v, want %v up to %v", res.Moved, res.UpTo, moved, wantUpTo)
			}
			if res.Route == subscription.RouteProtocol {
				t.Errorf("route protocol without a mover")
			}
		})
	}
}

func TestLag(t *testing.T) {
	tests := []struct {
		local, remote, want int64
	}{
		{0, 0, 0},
		{10, 10, 0},
		{10, 15, 5},
		{0, 42, 42},
		{10, 11, 1},
		{15, 10, 0},
		{15, 14, 0},
		{42, 0, 0},
	}
	for _, tt := range tests {
		if got := subscription.Lag(tt.local, tt.remote); got != tt.want {
			t.Errorf("Lag(%d, %d) = %d, want %d", tt.local, tt.remote, got, tt.want)
		}
	}
}
