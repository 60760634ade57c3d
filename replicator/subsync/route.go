package subsync

// Applying one update, the apply queue's worker's job (apply.go): the
// servlet route where the brokers' positions servlet can take it
// (servletmove.go: nothing read first), else the route from what is known
// of the subscription (target.go), read again when due; a reset without
// reading the subscription first where the standby rule allows
// (standby.go); the protocol mover (mover.go); where
// the update put the subscription recorded in the echo fence (fence.go);
// a change of route or refusal logged once.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// apply applies one update to sub: the route from what is known of it
// (target.go), without reading the subscription first where standby.go
// allows, the outcome counted by route, where it put sub recorded for echo
// suppression (movedByUpdate), and a change of route or refusal logged
// once.
func (s *Sync) apply(ctx context.Context, sub string, at marker.Position) {
	now := time.Now()
	movers := subscription.Movers{Protocol: s.mover()}
	var (
		tg   *target
		t    subscription.Target
		st   SubStat
		read bool
	)
	if s.Servlet != nil && s.servletCanMove(ctx) {
		// The servlet route needs nothing read first: it moves any type,
		// attached or not, and refuses backwards itself. Should it not
		// serve this one, Apply's admin route reads the state.
		tg = s.knownTarget(sub)
		movers.Servlet = servletMover{s: s.Servlet, cursor: s.Cursor}
		t = subscription.Target{Servlet: true, Protocol: s.Moves != nil}
	} else {
		tg = s.targetOf(ctx, sub, now)
		st, read = s.standbyReading(ctx, tg, sub, at, now)
		t = tg.t
		// Not fresh when an update (another remote's, or one of ours
		// whose outcome is not known) may have moved the subscription
		// past the position tg knows: a reset cannot change the reading's
		// timestamp (standby.go), so the reading would not show it, and
		// the reset would move the subscription back.
		t.Fresh = read && fresh(tg, st) && !s.Applied.beyond(s.Local, s.Topic, sub, tg.t.MarkDelete)
	}
	// Recorded before the move lands: follow, running meanwhile, may read
	// the position it sets before Apply returns, and would send it back.
	begun := s.Applied.begin(s.Local, s.Topic, sub, subscription.ProtocolTarget(at))
	res, err := subscription.Apply(ctx, s.SubAdmin, movers, t, s.Topic, sub, at)
	settle(s.Applied, begun, res, t.Fresh)
	now = time.Now()
	s.noteResult(tg, res, now)
	tg.noteMove(res, st, read, now)
	s.Log.Debug("subscription update received", zap.String("subscription", sub), zap.Stringer("to", at),
		zap.String("route", string(res.Route)), zap.String("outcome", string(res.Outcome)))
	s.Metrics.UpdatesApplied.WithLabelValues(s.Local, string(res.Route), string(res.Outcome)).Inc()
	changed := res.Route != tg.lastRoute || res.Outcome != tg.lastOutcome
	tg.lastRoute, tg.lastOutcome = res.Route, res.Outcome
	fields := []zap.Field{zap.String("subscription", sub), zap.Stringer("type", tg.t.Type), zap.Int("consumers", tg.t.Consumers)}
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopping: every update in flight fails with the context (1,358
		// warnings at once when 10,000 topics stopped). The next start
		// follows again; nothing to say.
		s.Log.Debug("applying a subscription update ended by the stop", zap.String("subscription", sub), zap.Error(err))
	case err != nil:
		s.Log.Warn("applying a subscription update failed", zap.String("subscription", sub), zap.String("route", string(res.Route)), zap.Error(err))
	case !changed:
	case res.Outcome == subscription.RefusedType:
		s.Log.Info("subscription update not applied: its type cannot be moved with consumers attached (reset-cursor would disconnect them)",
			append(fields, zap.Bool("refused_by_broker", res.Route == subscription.RouteProtocol))...)
	case res.Route == subscription.RouteAdmin && res.Outcome == subscription.Applied:
		s.Log.Info("subscription update applied with reset-cursor: its type is not one the protocol route serves with nobody attached", fields...)
	case res.Route == subscription.RouteServlet && res.Outcome == subscription.Applied:
		// The expected route where the servlet runs: one line per
		// partition at info would be 10,000 at the start of a large
		// deployment.
		s.Log.Debug("subscription update applied by the brokers' positions servlet", zap.String("subscription", sub))
	case res.Outcome == subscription.RefusedConsumers:
		s.Log.Debug("subscription update not applied: consumers attached", fields...)
	}
}

// servletCanMove reports whether the servlet route can take an update of
// this partition, polling the brokers first when no poll has shown which
// broker owns it: polls are made for follows, and a standby cluster's
// follows (nothing consumed there) run every few minutes, which left its
// updates to reset-cursor until then (381 of them in a 200-topic bench
// run). The poll is shared with every partition of the cluster and made
// at most every Every.
func (s *Sync) servletCanMove(ctx context.Context) bool {
	if s.Servlet.CanMove(s.Topic, s.Cursor) {
		return true
	}
	s.Servlet.Positions(ctx, s.Topic, s.Cursor, s.Interval, time.Time{})
	return s.Servlet.CanMove(s.Topic, s.Cursor)
}

// knownTarget is what is known of sub, not read again (the servlet
// route needs no reading).
func (s *Sync) knownTarget(sub string) *target {
	if s.targets == nil {
		s.targets = targets{}
	}
	tg := s.targets[sub]
	if tg == nil {
		tg = &target{}
		s.targets[sub] = tg
	}
	return tg
}

// targetOf is what is known of sub before applying an update at now,
// read again when due.
func (s *Sync) targetOf(ctx context.Context, sub string, now time.Time) *target {
	if s.targets == nil {
		s.targets = targets{}
	}
	tg := s.targets[sub]
	if tg == nil {
		tg = &target{}
		s.targets[sub] = tg
	}
	switch {
	case !tg.due(now):
	case s.SubStates == nil:
		// Nothing to read it with: forget it, so that the admin route
		// reads the subscription itself.
		*tg = target{lastRoute: tg.lastRoute, lastOutcome: tg.lastOutcome}
	default:
		if err := s.refreshTargets(ctx, now); err != nil && ctx.Err() == nil {
			s.Log.Debug("reading the subscriptions' states failed; the admin route reads its own", zap.Error(err))
		}
		tg = s.targets[sub]
	}
	tg.t.Protocol = s.Moves != nil
	return tg
}

// refresh reads the partition's subscriptions (one stats call) and, for
// a tracked one whose type is not known here (nobody attached since the
// topic loaded, or created by the sidecar), the remote's (one more): the
// type its applications use in the other region is the one they bring
// here when they fail over. A type read before is kept when the reading
// has none (the broker forgets it when the topic is reloaded). The
// mark-delete position is not read: it comes from the moves' read-back,
// and is forgotten here (an operator may have reset it).
func (s *Sync) refreshTargets(ctx context.Context, now time.Time) error {
	if s.SubStates == nil {
		return errors.New("no subscription states reader")
	}
	st, err := s.SubStates.States(ctx, s.Topic)
	if err != nil {
		for _, tg := range s.targets {
			tg.retry, tg.retryAt = true, now.Add(refusedRefresh)
		}
		return fmt.Errorf("subscription states: %w", err)
	}
	var remote map[string]subscription.State
	remoteRead := false
	for sub := range s.targets {
		if _, ok := st[sub]; !ok {
			st[sub] = subscription.State{} // gone
		}
	}
	for sub, cur := range st {
		if !s.Tracked(sub) {
			continue
		}
		tg := s.targets[sub]
		if tg == nil {
			tg = &target{}
			s.targets[sub] = tg
		}
		if cur.Type == tg.t.Type && cur.Mode == subscription.ModeUnknown {
			cur.Mode = tg.t.Mode // a reading without it: the mode known before stands
		}
		if cur.Type == subscription.TypeUnknown && tg.t.Type != subscription.TypeUnknown {
			cur.Type, cur.Mode, cur.AllowOutOfOrder = tg.t.Type, tg.t.Mode, tg.t.AllowOutOfOrder
		}
		if cur.Type == subscription.TypeUnknown && cur.Consumers == 0 && s.RemoteStates != nil {
			if !remoteRead {
				remoteRead = true
				if remote, err = s.RemoteStates.States(ctx, s.Topic); err != nil {
					s.Log.Debug("reading the remote's subscription states failed", zap.Error(err))
				}
			}
			// Only a type the remote's applications use now: attached.
			if r, ok := remote[sub]; ok && r.Consumers > 0 && r.Type != subscription.KeyShared {
				cur.Type, cur.AllowOutOfOrder = r.Type, r.AllowOutOfOrder
			}
		}
		tg.t = subscription.Target{State: cur, Protocol: s.Moves != nil}
		tg.readAt, tg.retry = now, false
	}
	return nil
}

// noteResult updates what is known of sub after Apply returned res at
// now.
func (s *Sync) noteResult(tg *target, res subscription.Result, now time.Time) {
	if res.Read != nil {
		st := *res.Read
		if st.Type == subscription.TypeUnknown {
			st.Type, st.Mode, st.AllowOutOfOrder = tg.t.Type, tg.t.Mode, tg.t.AllowOutOfOrder
		}
		tg.t.State, tg.t.Busy = st, false
		tg.readAt, tg.retry = now, false
	}
	if res.MarkDeleteKnown {
		tg.t.MarkDelete, tg.t.MarkDeleteKnown = res.MarkDelete, true
	}
	switch {
	case res.Outcome == subscription.Created:
		tg.t.Exists = true
	case res.Outcome == subscription.RefusedType && res.Route == subscription.RouteProtocol:
		tg.t.Busy = true
		fallthrough
	case res.Outcome == subscription.RefusedType, res.Outcome == subscription.Failed:
		if !tg.retry {
			tg.retry, tg.retryAt = true, now.Add(refusedRefresh)
		}
	}
	// A Key_Shared mode is never learned from a move the broker admitted:
	// a move attaches to Key_Shared only when AUTO_SPLIT is known already
	// (subscription.Decide). Attaching to find out made the dispatcher
	// AUTO_SPLIT where a STICKY application's consumers were all gone for
	// a moment (a topic unload), and locked them out for good.
}

// mover is the sync's protocol mover, built on first use; nil without a
// MoveClient.
func (s *Sync) mover() subscription.Mover {
	if s.Moves == nil {
		return nil
	}
	if s.wm == nil {
		s.wm = &wireMover{f: s.Moves, name: s.FollowName, log: s.Log,
			layout: func(ctx context.Context) (*cluster.Layout, error) {
				if s.LayoutNow == nil {
					return nil, errors.New("layout unknown")
				}
				return s.LayoutNow(ctx)
			}}
	}
	return s.wm
}
