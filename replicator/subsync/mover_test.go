package subsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// fakeMoveClient is a MoveClient that records the moves and answers each with
// the mark-delete position at the target (or md when set), or err.
type fakeMoveClient struct {
	mu    sync.Mutex
	moves []wire.Move
	err   []error // per move, in order; then nil
	md    *wire.MessageID
	// during runs inside each move, as the broker has taken it.
	during func(m wire.Move)
}

func (f *fakeMoveClient) MoveSubscription(_ context.Context, m wire.Move) (wire.MoveResult, error) {
	if f.during != nil {
		f.during(m)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves = append(f.moves, m)
	var err error
	if len(f.err) > 0 {
		err, f.err = f.err[0], f.err[1:]
	}
	target := m.To
	if target.BatchIndex >= 0 {
		target = wire.EntryID(target.Ledger, target.Entry-1)
	}
	res := wire.MoveResult{Target: target, MarkDelete: target}
	if f.md != nil {
		res.MarkDelete = *f.md
	}
	return res, err
}

func (f *fakeMoveClient) take() []wire.Move {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.moves
	f.moves = nil
	return out
}

// fakeStates is a States reader that counts its calls.
type fakeStates struct {
	mu    sync.Mutex
	st    map[string]subscription.State
	calls int
}

func (f *fakeStates) States(_ context.Context, topic string) (map[string]subscription.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if topic != syncTopic {
		return nil, fmt.Errorf("unexpected topic %q", topic)
	}
	out := map[string]subscription.State{}
	for k, v := range f.st {
		out[k] = v
	}
	return out, nil
}

func (f *fakeStates) set(sub string, st subscription.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st == nil {
		f.st = map[string]subscription.State{}
	}
	f.st[sub] = st
}

func (f *fakeStates) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// protocolRig is a sync rig with a protocol mover and states readers.
func protocolRig(t *testing.T) (*syncRig, *fakeMoveClient, *fakeStates, *fakeStates) {
	r := newSyncRig(t, rigConfig{})
	f, local, remote := &fakeMoveClient{}, &fakeStates{}, &fakeStates{}
	r.s.Moves, r.s.FollowName, r.s.SubStates, r.s.RemoteStates = f, "geo-sidecar.follow-test", local, remote
	return r, f, local, remote
}

func appliedCount(r *syncRig, route subscription.Route, o subscription.Outcome) float64 {
	return metricstest.Counter(r.m.UpdatesApplied, "east", string(route), string(o))
}

// TestSyncApplyOverProtocol: with consumers attached here, a Failover
// subscription follows over the protocol (a cumulative move to the
// update's target), a Shared one with individual acks; the state the
// route rests on is read once for many updates, the position the move set
// is recorded, and no admin call is made.
func TestSyncApplyOverProtocol(t *testing.T) {
	tests := []struct {
		name     string
		typ      subscription.Type
		wireType wire.SubType
	}{
		{"Failover", subscription.Failover, wire.Failover},
		{"Shared", subscription.Shared, wire.Shared},
		{"Key_Shared AUTO_SPLIT", subscription.KeyShared, wire.KeyShared},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, f, local, remote := protocolRig(t)
			st := subscription.State{Exists: true, Consumers: 2, Type: tt.typ}
			if tt.typ == subscription.KeyShared {
				st.Mode, st.AllowOutOfOrder = subscription.AutoSplit, true
			}
			local.set("billing", st)
			ctx := context.Background()
			for i := range 10 {
				r.s.apply(ctx, "billing", subsynctest.Pos(4, int64(10+i)))
			}
			r.s.apply(ctx, "billing", marker.Position{Ledger: 4, Entry: 30, Batch: 2}) // inside a batch: the entry before
			moves := f.take()
			if len(moves) != 11 {
				t.Fatalf("%d moves, want 11", len(moves))
			}
			for i, m := range moves {
				want := wire.EntryID(4, uint64(10+i))
				if i == 10 {
					want = wire.EntryID(4, 29)
				}
				if m.Type != tt.wireType || m.To != want || m.Topic != syncTopic || m.Subscription != "billing" ||
					m.ConsumerName != "geo-sidecar.follow-test" || m.KeySharedAllowOutOfOrder != (tt.typ == subscription.KeyShared) {
					t.Errorf("move %d: %+v, want type %v to %v", i, m, tt.wireType, want)
				}
			}
			if got := r.subs.TakeCalls(); len(got) > 0 {
				t.Errorf("admin calls %v, want none", got)
			}
			if n := local.count(); n != 1 {
				t.Errorf("%d state readings for 11 updates, want 1", n)
			}
			if n := remote.count(); n != 0 {
				t.Errorf("%d readings of the remote, want none (the type is known here)", n)
			}
			if got := appliedCount(r, subscription.RouteProtocol, subscription.Applied); got != 11 {
				t.Errorf("protocol/applied = %v, want 11", got)
			}
			if upTo, ok := r.applied.get("east", syncTopic, "billing"); !ok || upTo != subsynctest.Pos(4, 29) {
				t.Errorf("recorded %v %v, want up to 4:29", upTo, ok)
			}
		})
	}
}

// TestSyncApplyRefusals: an Exclusive subscription with a consumer
// attached is refused without an attach or an admin call; a move the
// broker refuses counts as refused-type, and the next updates are refused
// without an attach until the state is read again, at most every
// refusedRefresh.
func TestSyncApplyRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, f, local, _ := protocolRig(t)
		ctx := context.Background()
		local.set("billing", subscription.State{Exists: true, Consumers: 1, Type: subscription.Exclusive})
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 10))
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 11))
		if n := len(f.take()); n != 0 {
			t.Errorf("%d moves of an Exclusive subscription with a consumer attached", n)
		}
		if got := appliedCount(r, subscription.RouteNone, subscription.RefusedType); got != 2 {
			t.Errorf("none/refused-type = %v, want 2", got)
		}
		if got := r.subs.TakeCalls(); len(got) > 0 {
			t.Errorf("admin calls %v", got)
		}

		// Failover, but the broker refuses the move's consumer (say an
		// application attached with another type since).
		local.set("audit", subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover})
		time.Sleep(refusedRefresh) // billing's refusal is due for a reading: audit is read with it
		r.s.apply(ctx, "billing", subsynctest.Pos(4, 12))
		reads := local.count()
		f.err = []error{fmt.Errorf("move: %w", wire.ErrSubscriptionBusy)}
		r.s.apply(ctx, "audit", subsynctest.Pos(4, 10))
		r.s.apply(ctx, "audit", subsynctest.Pos(4, 11))
		if n := len(f.take()); n != 1 {
			t.Errorf("%d moves, want the refused one only", n)
		}
		if got := appliedCount(r, subscription.RouteProtocol, subscription.RefusedType); got != 1 {
			t.Errorf("protocol/refused-type = %v, want 1", got)
		}
		if got := appliedCount(r, subscription.RouteNone, subscription.RefusedType); got != 4 {
			t.Errorf("none/refused-type = %v, want 4 (billing 3, audit 1)", got)
		}
		if n := local.count(); n != reads {
			t.Errorf("read again at once after a refusal: %d readings, want %d", n, reads)
		}
		time.Sleep(refusedRefresh)
		r.s.apply(ctx, "audit", subsynctest.Pos(4, 12))
		if n := local.count(); n != reads+1 {
			t.Errorf("%d readings after refusedRefresh, want %d", n, reads+1)
		}
		if n := len(f.take()); n != 1 {
			t.Errorf("%d moves after the state was read again, want 1", n)
		}
	})
}

// TestSyncApplyStandby: nobody attached here and no type ever seen (the
// sidecar created the subscription): the type the remote's applications
// use serves the move; with none attached there either, reset-cursor.
func TestSyncApplyStandby(t *testing.T) {
	tests := []struct {
		name      string
		remote    *subscription.State
		wantMoves int
		wantCalls []string
	}{
		{"remote Failover attached: protocol", &subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover}, 1, nil},
		{"remote Shared attached: protocol", &subscription.State{Exists: true, Consumers: 3, Type: subscription.Shared}, 1, nil},
		{"remote Exclusive attached: reset", &subscription.State{Exists: true, Consumers: 1, Type: subscription.Exclusive}, 0, []string{"reset billing 4:10:-1"}},
		{"remote none attached: reset", &subscription.State{Exists: true, Type: subscription.Failover}, 0, []string{"reset billing 4:10:-1"}},
		{"remote missing: reset", nil, 0, []string{"reset billing 4:10:-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, f, local, remote := protocolRig(t)
			local.set("billing", subscription.State{Exists: true})
			r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(4, 1)})
			if tt.remote != nil {
				remote.set("billing", *tt.remote)
			}
			r.s.apply(context.Background(), "billing", subsynctest.Pos(4, 10))
			if n := len(f.take()); n != tt.wantMoves {
				t.Errorf("%d moves, want %d", n, tt.wantMoves)
			}
			if got := r.subs.TakeCalls(); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("admin calls %v, want %v", got, tt.wantCalls)
			}
		})
	}
}

// TestSyncProtocolMoveNotEchoed: a protocol move leaves the mark-delete
// position at the update's target itself (not before it, as reset-cursor
// does); follow must take that position as set by the update, and not
// send it back, although a snapshot covers it. Consumers here moving past
// it resume updates.
func TestSyncProtocolMoveNotEchoed(t *testing.T) {
	r, _, local, _ := protocolRig(t)
	ctx := context.Background()
	local.set("billing", subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover})
	cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
	r.s.apply(ctx, "billing", subsynctest.Pos(1, 15))
	r.local.SetMD("billing", subsynctest.Pos(1, 15)) // where the move put it
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.sink.Take(); len(got) > 0 {
		t.Errorf("the position set by the protocol move was echoed: %v", subsynctest.KindsOf(got))
	}
	r.local.SetMD("billing", subsynctest.Pos(1, 16))
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := updatesWritten(r.sink.Take()); got["billing"].Remote != subsynctest.Pos(7, 20) {
		t.Errorf("updates after consuming past it = %v, want billing to 7:20", got)
	}
}

// TestWireMoverLedgers: a Shared move whose ledgers are not listed reads
// the partition's layout and moves again; the list is kept for the next.
func TestWireMoverLedgers(t *testing.T) {
	f := &fakeMoveClient{err: []error{fmt.Errorf("move: %w", wire.ErrLedgersUnknown)}}
	layouts := 0
	w := &wireMover{f: f, name: "n", log: nil, layout: func(context.Context) (*cluster.Layout, error) {
		layouts++
		return &cluster.Layout{Ledgers: []cluster.LedgerSpan{{ID: 3, Entries: 5}, {ID: 4, Entries: 9}}}, nil
	}}
	d := subscription.Decision{Route: subscription.RouteProtocol, Type: subscription.Shared, Ack: subscription.Individual, At: subsynctest.Pos(4, 2)}
	mv, err := w.Move(context.Background(), syncTopic, "billing", d)
	if err != nil {
		t.Fatal(err)
	}
	if mv.After != subsynctest.Pos(4, 2) {
		t.Errorf("after %v, want 4:2", mv.After)
	}
	moves := f.take()
	want := []wire.Ledger{{ID: 3, Entries: 5}, {ID: 4, Entries: 9}}
	if len(moves) != 2 || moves[0].Ledgers != nil || !slices.Equal(moves[1].Ledgers, want) {
		t.Errorf("moves %+v, want one without ledgers, then one with %v", moves, want)
	}
	if _, err := w.Move(context.Background(), syncTopic, "billing", d); err != nil {
		t.Fatal(err)
	}
	if moves := f.take(); len(moves) != 1 || !slices.Equal(moves[0].Ledgers, want) || layouts != 1 {
		t.Errorf("next move %+v after %d layout readings, want the kept list and 1", moves, layouts)
	}
	// Busy is subscription's ErrBusy.
	f.err = []error{fmt.Errorf("move: %w", wire.ErrSubscriptionBusy)}
	if _, err := w.Move(context.Background(), syncTopic, "billing", d); !errors.Is(err, subscription.ErrBusy) {
		t.Errorf("busy move: %v, want ErrBusy", err)
	}
}

func TestWireTo(t *testing.T) {
	for _, tt := range []struct {
		p    marker.Position
		want wire.MessageID
	}{
		{subsynctest.Pos(4, 7), wire.EntryID(4, 7)},
		{subsynctest.Pos(4, 0), wire.EntryID(4, 0)},
		{subsynctest.Pos(4, -1), wire.MessageID{Ledger: 4, Entry: 0, Partition: -1, BatchIndex: 0}},
	} {
		got := wireTo(tt.p)
		if got != tt.want {
			t.Errorf("wireTo(%v) = %+v, want %+v", tt.p, got, tt.want)
		}
		// What the move aims at is p itself.
		target := got
		if target.BatchIndex >= 0 {
			target = wire.EntryID(got.Ledger, got.Entry-1)
		}
		if wirePosition(target) != tt.p {
			t.Errorf("wireTo(%v) aims at %v", tt.p, wirePosition(target))
		}
	}
}

// TestSyncPositionReadWhileMoveLands: follow runs beside the apply loop; a
// position it reads after the broker took the move and before Apply
// returned is the update's, not consumers' here (an e2e run echoed one
// update so, recorded after the move). A move that failed may have taken:
// the record keeps its target.
func TestSyncPositionReadWhileMoveLands(t *testing.T) {
	r, f, local, _ := protocolRig(t)
	ctx := context.Background()
	local.set("billing", subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover})
	cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
	f.during = func(m wire.Move) {
		r.local.SetMD("billing", wirePosition(m.To)) // the broker moved it
		if err := r.s.follow(ctx); err != nil {
			t.Error(err)
		}
	}
	r.s.apply(ctx, "billing", subsynctest.Pos(1, 15))
	if got := r.sink.Take(); len(got) > 0 {
		t.Errorf("the position read while the move landed was echoed: %v", subsynctest.KindsOf(got))
	}

	// A failed move may have landed (the connection was lost after the
	// acknowledgement): the record rises to its target (issue 34, item 5;
	// it was restored before).
	f.during = nil
	f.err = []error{errors.New("connection lost")}
	r.s.apply(ctx, "billing", subsynctest.Pos(1, 40))
	if upTo, ok := r.applied.get("east", syncTopic, "billing"); !ok || upTo != subsynctest.Pos(1, 40) {
		t.Errorf("after a failed move the record is %v %v, want its target 1:40", upTo, ok)
	}
	local.set("audit", subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover})
	f.err = []error{errors.New("connection lost")}
	r.s.apply(ctx, "audit", subsynctest.Pos(1, 40))
	if upTo, ok := r.applied.get("east", syncTopic, "audit"); !ok || upTo != subsynctest.Pos(1, 40) {
		t.Errorf("after a failed first move the record is %v %v, want its target 1:40", upTo, ok)
	}
}

// TestApplyEndedByStopIsQuiet: an update whose reads fail because the
// sidecar is stopping is not a warning (10,000 topics stopping logged
// 1,358 at once); the same failure while running is.
func TestApplyEndedByStopIsQuiet(t *testing.T) {
	for _, tt := range []struct {
		name     string
		stopping bool
		warns    int
	}{
		{"running", false, 1},
		{"stopping", true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			core, logs := observer.New(zap.InfoLevel)
			r.s.Log = zap.New(core)
			r.subs.StateErr = fmt.Errorf("reading subscription: %w", context.Canceled)
			ctx, cancel := context.WithCancel(context.Background())
			if tt.stopping {
				cancel()
			} else {
				defer cancel()
			}
			r.s.apply(ctx, "billing", subsynctest.Pos(4, 10))
			if n := logs.FilterMessage("applying a subscription update failed").Len(); n != tt.warns {
				t.Fatalf("%d warnings, want %d: %v", n, tt.warns, logs.All())
			}
		})
	}
}

// TestSyncApplyKeySharedModeUnknown: a move attaches to a Key_Shared
// subscription only when AUTO_SPLIT is known (issue 34, item 4). The
// stats never carry the mode; with the applications' consumers attached
// as far as a reading (up to targetRefresh old) shows, an attach as
// AUTO_SPLIT relied on the broker refusing it beside STICKY consumers.
// When those were all gone for a moment (a topic unload) it was the only
// consumer, the dispatcher became AUTO_SPLIT, and the application's
// reconnecting consumers were refused for good. Unknown or STICKY: no
// attach; refused (counted, logged) while consumers are attached, the
// admin route's reset where none are.
func TestSyncApplyKeySharedModeUnknown(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mode      subscription.KeySharedMode
		consumers int
		moves     int
		route     subscription.Route
		outcome   subscription.Outcome
		reset     bool
	}{
		{"mode unknown, consumers attached: refused, no attach", subscription.ModeUnknown, 2, 0, subscription.RouteNone, subscription.RefusedType, false},
		{"STICKY, consumers attached: refused, no attach", subscription.Sticky, 2, 0, subscription.RouteNone, subscription.RefusedType, false},
		{"mode unknown, none attached: reset", subscription.ModeUnknown, 0, 0, subscription.RouteAdmin, subscription.Applied, true},
		{"AUTO_SPLIT known, consumers attached: the protocol", subscription.AutoSplit, 2, 1, subscription.RouteProtocol, subscription.Applied, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, f, local, _ := protocolRig(t)
			st := subscription.State{Exists: true, Consumers: tt.consumers, Type: subscription.KeyShared, Mode: tt.mode,
				MarkDelete: subsynctest.Pos(4, 1)}
			local.set("billing", st)
			r.subs.Set("billing", st)
			r.s.apply(context.Background(), "billing", subsynctest.Pos(4, 10))
			if moves := f.take(); len(moves) != tt.moves {
				t.Errorf("%d attaches (%+v), want %d", len(moves), moves, tt.moves)
			}
			if got := appliedCount(r, tt.route, tt.outcome); got != 1 {
				t.Errorf("%s/%s = %v, want 1", tt.route, tt.outcome, got)
			}
			calls := r.subs.TakeCalls()
			reset := false
			for _, c := range calls {
				if strings.HasPrefix(c, "reset ") {
					reset = true
				}
			}
			if reset != tt.reset {
				t.Errorf("admin calls %v: reset %v, want %v", calls, reset, tt.reset)
			}
		})
	}
}
