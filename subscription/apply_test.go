package subscription_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

func TestDecide(t *testing.T) {
	type target = subscription.Target
	type state = subscription.State
	known := func(typ subscription.Type, consumers int) target {
		return target{State: state{Exists: true, Type: typ, Consumers: consumers}, Protocol: true}
	}
	with := func(tg target, f func(*target)) target { f(&tg); return tg }
	protocol := func(typ subscription.Type, ack subscription.Ack, at marker.Position) subscription.Decision {
		return subscription.Decision{Route: subscription.RouteProtocol, Type: typ, Ack: ack, At: at}
	}
	none := func(o subscription.Outcome) subscription.Decision {
		return subscription.Decision{Route: subscription.RouteNone, Outcome: o}
	}
	reset := func(at marker.Position) subscription.Decision {
		return subscription.Decision{Route: subscription.RouteAdmin, At: at}
	}
	to := pos(5, 7, -1)
	tests := []struct {
		name string
		t    target
		to   marker.Position
		want subscription.Decision
	}{
		{"missing: admin create at the entry", target{Protocol: true}, pos(5, 7, 3),
			subscription.Decision{Route: subscription.RouteAdmin, Create: true, At: pos(5, 7, -1)}},
		{"missing, nothing known", target{}, to,
			subscription.Decision{Route: subscription.RouteAdmin, Create: true, At: to}},

		// Consumers attached.
		{"Failover attached: cumulative", known(subscription.Failover, 2), to, protocol(subscription.Failover, subscription.Cumulative, to)},
		{"Shared attached: individual", known(subscription.Shared, 1), to, protocol(subscription.Shared, subscription.Individual, to)},
		{"Key_Shared AUTO_SPLIT attached: individual, out-of-order kept",
			with(known(subscription.KeyShared, 1), func(t *target) { t.Mode, t.AllowOutOfOrder = subscription.AutoSplit, true }), to,
			subscription.Decision{Route: subscription.RouteProtocol, Type: subscription.KeyShared, Ack: subscription.Individual, At: to, AllowOutOfOrder: true}},
		{"Key_Shared mode unknown attached: refused-type (the attach may find them gone, issue 34)",
			known(subscription.KeyShared, 1), to, none(subscription.RefusedType)},
		{"Key_Shared STICKY attached: refused-type",
			with(known(subscription.KeyShared, 1), func(t *target) { t.Mode = subscription.Sticky }), to, none(subscription.RefusedType)},
		{"Exclusive attached: refused-type", known(subscription.Exclusive, 1), to, none(subscription.RefusedType)},
		{"unknown type attached: refused-type", known(subscription.TypeUnknown, 1), to, none(subscription.RefusedType)},
		{"Failover attached, busy: refused-type without an attach",
			with(known(subscription.Failover, 1), func(t *target) { t.Busy = true }), to, none(subscription.RefusedType)},
		{"Failover attached, no protocol mover: consumers-attached",
			with(known(subscription.Failover, 1), func(t *target) { t.Protocol = false }), to, none(subscription.RefusedConsumers)},
		{"Exclusive attached, no protocol mover: consumers-attached",
			with(known(subscription.Exclusive, 1), func(t *target) { t.Protocol = false }), to, none(subscription.RefusedConsumers)},

		// Nobody attached.
		{"Failover, none attached: protocol with the known type", known(subscription.Failover, 0), to, protocol(subscription.Failover, subscription.Cumulative, to)},
		{"Shared, none attached", known(subscription.Shared, 0), to, protocol(subscription.Shared, subscription.Individual, to)},
		{"Key_Shared AUTO_SPLIT, none attached",
			with(known(subscription.KeyShared, 0), func(t *target) { t.Mode = subscription.AutoSplit }), to, protocol(subscription.KeyShared, subscription.Individual, to)},
		{"Key_Shared mode unknown, none attached: reset (a STICKY application could reconnect)",
			known(subscription.KeyShared, 0), to, reset(to)},
		{"Key_Shared STICKY, none attached: reset",
			with(known(subscription.KeyShared, 0), func(t *target) { t.Mode = subscription.Sticky }), to, reset(to)},
		{"Exclusive, none attached: reset", known(subscription.Exclusive, 0), to, reset(to)},
		{"unknown type, none attached: reset", known(subscription.TypeUnknown, 0), to, reset(to)},
		{"Failover, none attached, no protocol mover: reset",
			with(known(subscription.Failover, 0), func(t *target) { t.Protocol = false }), to, reset(to)},
		{"Failover, none attached, busy: reset (read again first)",
			with(known(subscription.Failover, 0), func(t *target) { t.Busy = true }), to, reset(to)},
		{"reset inside a batch: at the whole entry", known(subscription.Exclusive, 0), pos(5, 7, 2), reset(to)},

		// Where the protocol move puts the mark-delete position.
		{"inside a batch: the entry before", known(subscription.Failover, 1), pos(5, 7, 2), protocol(subscription.Failover, subscription.Cumulative, pos(5, 6, -1))},
		{"batch 0 of entry 0: entry -1", known(subscription.Shared, 1), pos(5, 0, 0), protocol(subscription.Shared, subscription.Individual, pos(5, -1, -1))},

		// Forward only, when the mark-delete position is known.
		{"protocol, md before the target", with(known(subscription.Failover, 1), func(t *target) { t.MarkDelete, t.MarkDeleteKnown = pos(5, 6, -1), true }),
			to, protocol(subscription.Failover, subscription.Cumulative, to)},
		{"protocol, md at the target: not-forward", with(known(subscription.Failover, 1), func(t *target) { t.MarkDelete, t.MarkDeleteKnown = to, true }),
			to, none(subscription.RefusedBackwards)},
		{"protocol, md after the target: not-forward", with(known(subscription.Shared, 1), func(t *target) { t.MarkDelete, t.MarkDeleteKnown = pos(6, 0, -1), true }),
			to, none(subscription.RefusedBackwards)},
		{"protocol, md at the target, not known: the broker decides", with(known(subscription.Failover, 1), func(t *target) { t.MarkDelete = to }),
			to, protocol(subscription.Failover, subscription.Cumulative, to)},
		{"reset, md at the entry: not-forward", with(known(subscription.Exclusive, 0), func(t *target) { t.MarkDelete, t.MarkDeleteKnown = to, true }),
			to, none(subscription.RefusedBackwards)},
		{"reset, md just before the entry", with(known(subscription.Exclusive, 0), func(t *target) { t.MarkDelete, t.MarkDeleteKnown = pos(5, 6, -1), true }),
			to, reset(to)},
		{"refusal before not-forward", with(known(subscription.Exclusive, 1), func(t *target) { t.MarkDelete, t.MarkDeleteKnown = pos(9, 0, -1), true }),
			to, none(subscription.RefusedType)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := subscription.Decide(tt.t, tt.to); got != tt.want {
				t.Errorf("Decide = %+v\nwant     %+v", got, tt.want)
			}
		})
	}
}

// fakeMover records the moves asked and answers with moved and err.
type fakeMover struct {
	moved subscription.Moved
	err   error
	asked []subscription.Decision
}

func (f *fakeMover) Move(_ context.Context, _, _ string, d subscription.Decision) (subscription.Moved, error) {
	f.asked = append(f.asked, d)
	return f.moved, f.err
}

func TestApplyRoutes(t *testing.T) {
	const topic, sub = "persistent://t/n/orders-partition-3", "billing"
	errBoom := errors.New("boom")
	failover := subscription.Target{State: subscription.State{Exists: true, Type: subscription.Failover, Consumers: 1}, Protocol: true}
	shared := subscription.Target{State: subscription.State{Exists: true, Type: subscription.Shared, Consumers: 1}, Protocol: true}
	to := pos(5, 7, -1)
	tests := []struct {
		name      string
		t         subscription.Target
		admin     fakeAdmin
		mover     fakeMover
		to        marker.Position
		want      subscription.Result
		wantErr   error
		wantCalls []call
		wantMoves int
	}{
		{name: "Failover attached: moved over the protocol, no admin call", t: failover,
			mover:     fakeMover{moved: subscription.Moved{After: to}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Applied, UpTo: to, Moved: true, MarkDelete: to, MarkDeleteKnown: true},
			wantMoves: 1},
		{name: "Failover: md past the target after the move: applied up to the target", t: failover,
			mover:     fakeMover{moved: subscription.Moved{After: pos(6, 3, -1)}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Applied, UpTo: to, Moved: true, MarkDelete: pos(6, 3, -1), MarkDeleteKnown: true},
			wantMoves: 1},
		{name: "Shared: there before: not-forward, not the update's", t: shared,
			mover:     fakeMover{moved: subscription.Moved{Before: pos(5, 9, -1), After: pos(5, 9, -1), HasBefore: true}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.RefusedBackwards, MarkDelete: pos(5, 9, -1), MarkDeleteKnown: true},
			wantMoves: 1},
		{name: "Shared: part of the way (bounded acks): applied as far as it got", t: shared,
			mover:     fakeMover{moved: subscription.Moved{Before: pos(5, 1, -1), After: pos(5, 4, -1), HasBefore: true}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Applied, UpTo: pos(5, 4, -1), Moved: true, MarkDelete: pos(5, 4, -1), MarkDeleteKnown: true},
			wantMoves: 1},
		{name: "Failover: md short of the target: error", t: failover,
			mover:     fakeMover{moved: subscription.Moved{After: pos(5, 3, -1)}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Failed, MarkDelete: pos(5, 3, -1), MarkDeleteKnown: true},
			wantErr:   errAny,
			wantMoves: 1},
		{name: "busy: refused-type on the protocol route", t: failover,
			mover:     fakeMover{err: fmt.Errorf("wire: %w", subscription.ErrBusy)},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.RefusedType},
			wantMoves: 1},
		{name: "move error", t: failover,
			mover:     fakeMover{err: errBoom},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Failed},
			wantErr:   errBoom,
			wantMoves: 1},
		{name: "Exclusive attached: refused without a call",
			t:    subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive, Consumers: 1}, Protocol: true},
			to:   to,
			want: subscription.Result{Route: subscription.RouteNone, Outcome: subscription.RefusedType}},
		{name: "unknown type, none attached as last known; attached now with Failover: the protocol after the read",
			t:         subscription.Target{State: subscription.State{Exists: true}, Protocol: true},
			admin:     fakeAdmin{st: subscription.State{Exists: true, MarkDelete: pos(5, 1, -1), Consumers: 1, Type: subscription.Failover}},
			mover:     fakeMover{moved: subscription.Moved{After: to}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Applied, UpTo: to, Moved: true, MarkDelete: to, MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}},
			wantMoves: 1},
		{name: "unknown type, none attached as last known; Exclusive attached now: refused, no reset",
			t:         subscription.Target{State: subscription.State{Exists: true}, Protocol: true},
			admin:     fakeAdmin{st: subscription.State{Exists: true, MarkDelete: pos(5, 1, -1), Consumers: 1, Type: subscription.Exclusive}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteNone, Outcome: subscription.RefusedType, MarkDelete: pos(5, 1, -1), MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}}},
		{name: "Exclusive, none attached: reset at the entry",
			t:         subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive}, Protocol: true},
			admin:     fakeAdmin{st: subscription.State{Exists: true, MarkDelete: pos(5, 1, -1), Type: subscription.Exclusive}},
			to:        pos(5, 7, 2),
			want:      subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Applied, UpTo: pos(5, 6, -1), Moved: true, MarkDelete: pos(5, 6, -1), MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}, {op: "reset", at: to, top: topic, sub: sub}}},
		{name: "fresh, Exclusive, none attached, md known: reset without reading",
			t:         subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive, MarkDelete: pos(5, 1, -1)}, MarkDeleteKnown: true, Protocol: true, Fresh: true},
			to:        pos(5, 7, 2),
			want:      subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Applied, UpTo: pos(5, 6, -1), Moved: true, MarkDelete: pos(5, 6, -1), MarkDeleteKnown: true},
			wantCalls: []call{{op: "reset", at: to, top: topic, sub: sub}}},
		{name: "fresh, md known at the entry: not-forward without a call",
			t:    subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive, MarkDelete: to}, MarkDeleteKnown: true, Protocol: true, Fresh: true},
			to:   to,
			want: subscription.Result{Route: subscription.RouteNone, Outcome: subscription.RefusedBackwards}},
		{name: "fresh but md not known: read first",
			t:         subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive}, Protocol: true, Fresh: true},
			admin:     fakeAdmin{st: subscription.State{Exists: true, MarkDelete: pos(5, 1, -1), Type: subscription.Exclusive}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Applied, UpTo: pos(5, 6, -1), Moved: true, MarkDelete: pos(5, 6, -1), MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}, {op: "reset", at: to, top: topic, sub: sub}}},
		{name: "fresh but missing: read, then created",
			t:         subscription.Target{State: subscription.State{Type: subscription.Exclusive}, MarkDeleteKnown: true, Protocol: true, Fresh: true},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Created, UpTo: pos(5, 6, -1), Moved: true, MarkDelete: pos(5, 6, -1), MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}, {op: "create", at: to, top: topic, sub: sub}}},
		{name: "read type None keeps the last known: Failover, none attached, over the protocol",
			t:         subscription.Target{State: subscription.State{Exists: false, Type: subscription.Failover}, Protocol: true},
			admin:     fakeAdmin{st: subscription.State{Exists: true, MarkDelete: pos(5, 1, -1)}},
			mover:     fakeMover{moved: subscription.Moved{After: to}},
			to:        to,
			want:      subscription.Result{Route: subscription.RouteProtocol, Outcome: subscription.Applied, UpTo: to, Moved: true, MarkDelete: to, MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}},
			wantMoves: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin, mover := tt.admin, tt.mover
			res, err := subscription.Apply(context.Background(), &admin, subscription.Movers{Protocol: &mover}, tt.t, topic, sub, tt.to)
			res.Read = nil
			if res != tt.want {
				t.Errorf("Apply = %+v\nwant    %+v", res, tt.want)
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("error %v, want nil", err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(admin.calls, tt.wantCalls) {
				t.Errorf("admin calls %+v, want %+v", admin.calls, tt.wantCalls)
			}
			if len(mover.asked) != tt.wantMoves {
				t.Errorf("%d moves, want %d", len(mover.asked), tt.wantMoves)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestParseType(t *testing.T) {
	for s, want := range map[string]subscription.Type{
		"Exclusive": subscription.Exclusive, "Failover": subscription.Failover, "Shared": subscription.Shared,
		"Key_Shared": subscription.KeyShared, "None": subscription.TypeUnknown, "": subscription.TypeUnknown, "shared": subscription.TypeUnknown,
	} {
		if got := subscription.ParseType(s); got != want {
			t.Errorf("ParseType(%q) = %v, want %v", s, got, want)
		}
		if want != subscription.TypeUnknown && want.String() != s {
			t.Errorf("%v.String() = %q, want %q", want, want.String(), s)
		}
	}
}

// TestApplyServletRoute: with a servlet mover the update goes to it for
// any type, attached or not, and nothing is read first; a servlet that
// cannot serve it (ErrUnavailable) leaves the update to the other routes.
func TestApplyServletRoute(t *testing.T) {
	const topic, sub = "persistent://t/n/orders-partition-3", "billing"
	to := pos(5, 7, -1)
	exclusiveAttached := subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive, Consumers: 1}, Protocol: true, Servlet: true}
	tests := []struct {
		name      string
		t         subscription.Target
		admin     fakeAdmin
		servlet   fakeMover
		want      subscription.Result
		wantErr   bool
		wantCalls []call
	}{
		{name: "Exclusive with a consumer attached: moved by the servlet, no admin call",
			t:       exclusiveAttached,
			servlet: fakeMover{moved: subscription.Moved{After: pos(5, 9, -1)}},
			want:    subscription.Result{Route: subscription.RouteServlet, Outcome: subscription.Applied, UpTo: to, Moved: true, MarkDelete: pos(5, 9, -1), MarkDeleteKnown: true}},
		{name: "a batch position: the entry before it",
			t:       subscription.Target{Servlet: true},
			servlet: fakeMover{moved: subscription.Moved{After: pos(5, 6, -1)}},
			want:    subscription.Result{Route: subscription.RouteServlet, Outcome: subscription.Applied, UpTo: pos(5, 6, -1), Moved: true, MarkDelete: pos(5, 6, -1), MarkDeleteKnown: true}},
		{name: "there already: not-forward, nothing of ours",
			t:       subscription.Target{Servlet: true},
			servlet: fakeMover{moved: subscription.Moved{Before: pos(5, 8, -1), After: pos(5, 8, -1), HasBefore: true}},
			want:    subscription.Result{Route: subscription.RouteServlet, Outcome: subscription.RefusedBackwards, MarkDelete: pos(5, 8, -1), MarkDeleteKnown: true}},
		{name: "a known mark-delete position past the target does not stop it (it may be older than a rewind)",
			t:       subscription.Target{State: subscription.State{Exists: true, MarkDelete: pos(6, 0, -1)}, MarkDeleteKnown: true, Servlet: true},
			servlet: fakeMover{moved: subscription.Moved{After: to}},
			want:    subscription.Result{Route: subscription.RouteServlet, Outcome: subscription.Applied, UpTo: to, Moved: true, MarkDelete: to, MarkDeleteKnown: true}},
		{name: "unavailable (not on that broker): the admin route reads and resets",
			t:         subscription.Target{State: subscription.State{Exists: true, Type: subscription.Exclusive}, Servlet: true},
			servlet:   fakeMover{err: fmt.Errorf("no-subscription: %w", subscription.ErrUnavailable)},
			admin:     fakeAdmin{st: subscription.State{Exists: true, MarkDelete: pos(5, 1, -1), Type: subscription.Exclusive}},
			want:      subscription.Result{Route: subscription.RouteAdmin, Outcome: subscription.Applied, UpTo: pos(5, 6, -1), Moved: true, MarkDelete: pos(5, 6, -1), MarkDeleteKnown: true},
			wantCalls: []call{{op: "state", top: topic, sub: sub}, {op: "reset", at: to, top: topic, sub: sub}}},
		{name: "failed: an error, no other route",
			t:       subscription.Target{Servlet: true},
			servlet: fakeMover{err: errors.New("boom")},
			want:    subscription.Result{Route: subscription.RouteServlet, Outcome: subscription.Failed},
			wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin, servlet := tt.admin, tt.servlet
			at := to
			if tt.name == "a batch position: the entry before it" {
				at = pos(5, 7, 3)
			}
			res, err := subscription.Apply(context.Background(), &admin, subscription.Movers{Servlet: &servlet}, tt.t, topic, sub, at)
			res.Read = nil
			if res != tt.want {
				t.Errorf("Apply = %+v\nwant    %+v", res, tt.want)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("error %v, want one: %t", err, tt.wantErr)
			}
			if !slices.Equal(admin.calls, tt.wantCalls) {
				t.Errorf("admin calls %+v, want %+v", admin.calls, tt.wantCalls)
			}
			if len(servlet.asked) != 1 || servlet.asked[0].Route != subscription.RouteServlet {
				t.Errorf("servlet asked %+v, want one servlet move", servlet.asked)
			}
		})
	}
	// Without a servlet mover the flag is ignored.
	admin := fakeAdmin{st: subscription.State{Exists: true, Consumers: 1, Type: subscription.Exclusive}}
	res, _ := subscription.Apply(context.Background(), &admin, subscription.Movers{}, exclusiveAttached, topic, sub, to)
	if res.Route != subscription.RouteNone || res.Outcome != subscription.RefusedConsumers {
		t.Errorf("no servlet mover: %+v, want consumers-attached", res)
	}
}
