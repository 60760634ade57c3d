package subsync

// What the apply loop knows of each subscription it moves (route.go):
// the state an update's route is decided on, read with States and cached
// so that an update costs no admin call, and of its own last move what
// the standby rule needs (standby.go). Used by the apply loop alone.

import (
	"context"
	"time"

	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// States reads the state of every subscription of a partition in one
// admin call (its stats): Exists, Consumers (the applications', not a
// move's), Type, AllowOutOfOrder; not the mark-delete position.
// Implementations must be safe for concurrent use.
type States interface {
	States(ctx context.Context, topic string) (map[string]subscription.State, error)
}

const (
	// targetRefresh bounds how long the state a route is decided on goes
	// unread while updates arrive: an application that changed its
	// subscription's type, or one gone, is seen within it. At 1,000
	// partitions receiving updates that is 3.3 stats calls a second.
	targetRefresh = 5 * time.Minute
	// refusedRefresh is the least time between two readings of a
	// subscription whose update was refused for its type or failed: an
	// Exclusive subscription consumed on both sides costs one stats call
	// per partition this often, not one per update.
	refusedRefresh = 30 * time.Second
)

// target is what the apply loop knows of one subscription here.
type target struct {
	t      subscription.Target
	readAt time.Time // zero: never read
	// retry: read again at the next update from retryAt on.
	retry   bool
	retryAt time.Time
	// last is the last update's route and outcome, to log a change once.
	lastRoute   subscription.Route
	lastOutcome subscription.Outcome
	// sb is what the standby rules know of our last move (standby.go).
	sb standby
}

// targets are the subscriptions the apply loop moved or read; used by the
// apply loop alone.
type targets map[string]*target

// due reports whether tg is read again before an update at now.
func (tg *target) due(now time.Time) bool {
	switch {
	case tg.readAt.IsZero():
		return true
	case tg.retry:
		return !now.Before(tg.retryAt)
	}
	return now.Sub(tg.readAt) >= targetRefresh
}

// standby is what the apply loop knows of its own last move of a
// subscription, for the rule above (a part of target).
type standby struct {
	// movedAt is when our last move (any route) returned; base is the
	// lastMarkDeleteAdvancedTimestamp of the subscription in a reading
	// sent before that move started (hasBase: there was one).
	movedAt time.Time
	base    int64
	hasBase bool
}

// fresh reports whether tg's state holds now, given st, the reading
// standbyReading returned: nobody attached, and the mark-delete position
// the one our last move left (known, and no acknowledgement or expiry
// moved it since: the timestamp is the one read before that move).
func fresh(tg *target, st SubStat) bool {
	return !tg.sb.movedAt.IsZero() && tg.sb.hasBase && tg.t.MarkDeleteKnown && tg.t.Exists &&
		st.Consumers == 0 && st.MarkDeleteAdvanced == tg.sb.base
}

// noteMove records, after Apply returned res at now, what fresh needs:
// st is the reading consulted before it (ok: there was one).
func (tg *target) noteMove(res subscription.Result, st SubStat, ok bool, now time.Time) {
	if res.Outcome == subscription.Failed {
		// Where it stands is not known (a reset may have landed): read
		// before the next reset.
		tg.sb.movedAt, tg.sb.hasBase = time.Time{}, false
	}
	if !res.Moved {
		return
	}
	tg.sb.movedAt, tg.sb.base, tg.sb.hasBase = now, st.MarkDeleteAdvanced, ok
}
