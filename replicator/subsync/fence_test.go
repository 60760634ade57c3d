package subsync

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// TestAppliedFenceRaisesOnly: the fence below which a position read is an
// update's (Applied) only rises, across the updates of two remotes (west,
// north) moving the same subscription on east: an update whose outcome is
// unknown raises it to its target, a move that stopped part-way to its
// target too, and of two the higher stands whichever ended last; only a
// refusal, or the admin route failing before any call that moves, leaves
// it where the others put it.
//
// Fails for: settle ending every update as Applied.end(res.Moved,
// res.UpTo) with the record set, not raised (the rule before issue 34):
// the seven cases from "read-back timed out" to "the admin route failed
// resetting" but "one refused beside the other's equal move" fail.
func TestAppliedFenceRaisesOnly(t *testing.T) {
	type step struct {
		begin, end string // the update that begins, or ends
		to         marker.Position
		res        subscription.Result
	}
	failed := subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Failed}
	moved := func(route subscription.Route, upTo marker.Position) subscription.Result {
		return subscription.Result{Route: route, Outcome: subscription.Applied, Moved: true, UpTo: upTo}
	}
	created := func(upTo marker.Position) subscription.Result {
		return subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Created, Moved: true, UpTo: upTo}
	}
	p := subsynctest.Pos
	tests := []struct {
		name   string
		before *marker.Position // recorded before the steps
		steps  []step
		want   *marker.Position // nil: nothing recorded
	}{
		{name: "read-back timed out: the target stands",
			steps: []step{{begin: "west", to: p(1, 20)}, {end: "west", res: failed}},
			want:  ptr(p(1, 20))},
		{name: "read-back timed out after an earlier update: the target stands",
			before: ptr(p(1, 10)),
			steps:  []step{{begin: "west", to: p(1, 20)}, {end: "west", res: failed}},
			want:   ptr(p(1, 20))},
		{name: "a Shared move stopped part-way: the target stands",
			steps: []step{{begin: "west", to: p(1, 20)}, {end: "west", res: moved(subscription.RouteProtocol, p(1, 12))}},
			want:  ptr(p(1, 20))},
		{name: "two remotes, the lower ends last",
			steps: []step{{begin: "west", to: p(1, 30)}, {begin: "north", to: p(1, 20)},
				{end: "west", res: moved(subscription.RouteProtocol, p(1, 30))},
				{end: "north", res: moved(subscription.RouteProtocol, p(1, 20))}},
			want: ptr(p(1, 30))},
		{name: "two remotes, the higher fails after the lower moved",
			steps: []step{{begin: "west", to: p(1, 30)}, {begin: "north", to: p(1, 20)},
				{end: "north", res: moved(subscription.RouteProtocol, p(1, 20))},
				{end: "west", res: failed}},
			want: ptr(p(1, 30))},
		{name: "two remotes, one refused beside the other's equal move",
			steps: []step{{begin: "west", to: p(1, 20)}, {begin: "north", to: p(1, 20)},
				{end: "north", res: moved(subscription.RouteProtocol, p(1, 20))},
				{end: "west", res: subscription.Result{Route: subscription.RouteNone, Outcome: subscription.RefusedConsumers}}},
			want: ptr(p(1, 20))},
		{name: "another remote's reset further stands after a later, lower one",
			steps: []step{{begin: "north", to: p(1, 30)}, {end: "north", res: moved(subscription.RouteAdmin, p(1, 29))},
				{begin: "west", to: p(1, 20)}, {end: "west", res: moved(subscription.RouteAdmin, p(1, 19))}},
			want: ptr(p(1, 29))},
		{name: "a refusal leaves it",
			before: ptr(p(1, 15)),
			steps: []step{{begin: "west", to: p(1, 40)},
				{end: "west", res: subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.RefusedType}}},
			want: ptr(p(1, 15))},
		{name: "the admin route failed reading the state: nothing moved",
			steps: []step{{begin: "west", to: p(1, 40)},
				{end: "west", res: subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Failed}}},
			want: nil},
		{name: "the admin route failed resetting: the target stands",
			steps: []step{{begin: "west", to: p(1, 40)},
				{end: "west", res: subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Failed, Read: &subscription.State{Exists: true}}}},
			want: ptr(p(1, 40))},
		{name: "a reset lands exactly",
			steps: []step{{begin: "west", to: p(1, 20)}, {end: "west", res: moved(subscription.RouteAdmin, p(1, 19))}},
			want:  ptr(p(1, 19))},
		// createOnRemote's record when the remote's newest entry could not
		// be read: every position counts as the sidecar's until an update
		// says where the subscription is.
		{name: "a creation of unknown reach, then a move",
			steps: []step{{begin: "create", to: fenceAll}, {end: "create", res: created(fenceAll)},
				{begin: "west", to: p(1, 20)}, {end: "west", res: moved(subscription.RouteProtocol, p(1, 20))}},
			want: ptr(p(1, 20))},
		{name: "a creation of unknown reach, then a failed move",
			steps: []step{{begin: "create", to: fenceAll}, {end: "create", res: created(fenceAll)},
				{begin: "west", to: p(1, 20)}, {end: "west", res: failed}},
			want: ptr(fenceAll)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Applied{}
			if tt.before != nil {
				a.setUpTo("east", syncTopic, "billing", *tt.before)
			}
			begun := map[string]applying{}
			for _, s := range tt.steps {
				if s.begin != "" {
					begun[s.begin] = a.begin("east", syncTopic, "billing", s.to)
					continue
				}
				settle(a, begun[s.end], s.res, false)
			}
			got, ok := a.get("east", syncTopic, "billing")
			switch {
			case tt.want == nil && ok:
				t.Errorf("fence %v, want none", got)
			case tt.want != nil && (!ok || got != *tt.want):
				t.Errorf("fence %v (%v), want %v", got, ok, *tt.want)
			}
		})
	}
}

// TestAppliedBeyond: the fresh path's check (Sync.apply) sees a
// subscription as possibly moved past a reading by an update of any
// remote, finished (moved, or of unknown outcome) or being applied, and
// by a creation being applied; not by a finished creation's reach (the
// remote's newest entry, which the creation showed only for a moment),
// nor by a refusal.
//
// Fails for: beyond reading the fence (Applied.get) instead: a creation's
// reach kept every reset after it from the fresh path
// (TestSubscriptionStandbyExclusive read the subscription before 8 of 9
// resets, want at most 6).
func TestAppliedBeyond(t *testing.T) {
	p := subsynctest.Pos
	md := p(1, 19) // the reading: where our last reset left it
	tests := []struct {
		name string
		do   func(a *Applied)
		want bool
	}{
		{"nothing recorded", func(a *Applied) {}, false},
		{"our reset, where the reading is", func(a *Applied) {
			settle(a, a.begin("east", syncTopic, "billing", p(1, 20)), subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Applied, Moved: true, UpTo: p(1, 19)}, false)
		}, false},
		{"another remote's reset further", func(a *Applied) {
			settle(a, a.begin("east", syncTopic, "billing", p(1, 30)), subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Applied, Moved: true, UpTo: p(1, 29)}, false)
		}, true},
		{"a move further of unknown outcome", func(a *Applied) {
			settle(a, a.begin("east", syncTopic, "billing", p(1, 30)), subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Failed}, false)
		}, true},
		{"a move further being applied", func(a *Applied) { a.begin("east", syncTopic, "billing", p(1, 30)) }, true},
		{"a refused update further", func(a *Applied) {
			settle(a, a.begin("east", syncTopic, "billing", p(1, 30)), subscription.Result{Route: subscription.RouteNone, Outcome: subscription.RefusedConsumers}, false)
		}, false},
		{"a creation being applied", func(a *Applied) { a.beginCreate("east", syncTopic, "billing") }, true},
		{"a creation finished, its reach further", func(a *Applied) {
			a.end(a.beginCreate("east", syncTopic, "billing"), true, p(1, 50))
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Applied{}
			tt.do(a)
			if got := a.beyond("east", syncTopic, "billing", md); got != tt.want {
				t.Errorf("beyond(%v) = %v, want %v", md, got, tt.want)
			}
		})
	}
}
