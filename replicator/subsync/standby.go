package subsync

// What an update costs where the protocol route cannot serve it (an
// Exclusive, STICKY or unknown type with nobody attached here: a standby
// region's copy, docs/replicated-subscriptions.md, Which route): the
// admin route's reset-cursor, and nothing more where that is safe.
//
// The admin route reads the subscription's stats and internal stats
// before each reset, to see nobody attached and where it is. The topic's
// shared stats reading (moved.go's Poller, one request per topic shared
// by its partitions and the follows) says the first, when sent after our
// last move and a moment ago; our last move says the second, when the
// reading shows no acknowledgement or expiry since
// (lastMarkDeleteAdvancedTimestamp unchanged): the reset then goes
// without reading first (fresh), one request per update instead of three.
//
// This does not apply to the protocol route (no admin call) or to a
// refusal. Resets are not coalesced beyond what the apply loop does (the
// newest pending update per subscription): holding them for 2 s halved
// the resets of the subsvs bench's Exclusive row (190 to 110) and doubled
// the excess a failover would deliver again (149 to 297 entries); for one
// snapshot interval it saved none (191) and still added 40 % (209).
// Updates come about once an interval, so a hold trades requests for
// redelivery one for one.
//
// The reading is standbyReading, here; what the rule keeps of our last
// move (standby, noteMove) and its check (fresh) belong to the target,
// what the apply loop knows of the subscription (target.go).

import (
	"context"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// freshAge bounds how old the reading may be that lets a reset go without
// reading the subscription first: a consumer that attached after it would
// be disconnected by the reset (and reconnect), as one attaching between
// the admin route's own reading and its reset would. The follows of an
// active topic read it every half interval.
const freshAge = time.Second

// standbyReading is sub's line in the topic's shared stats reading, when
// the update to `at` would take the admin route: sent after our last
// move and less than freshAge ago (a new one is read, within the budget,
// if the last is older). ok is false without one (no poller, the
// protocol route, a failed reading, sub not in it).
func (s *Sync) standbyReading(ctx context.Context, tg *target, sub string, at marker.Position, now time.Time) (SubStat, bool) {
	if s.Stats == nil {
		return SubStat{}, false
	}
	if d := subscription.Decide(tg.t, at); d.Route != subscription.RouteAdmin || d.Create {
		return SubStat{}, false
	}
	age := freshAge
	if !tg.sb.movedAt.IsZero() {
		age = min(age, now.Sub(tg.sb.movedAt))
	}
	// Priority 0 in the budget: the follows' own readings (the most
	// behind first) go before, and one of them usually serves this.
	r, err := s.Stats.Read(ctx, age, 0)
	if err != nil {
		return SubStat{}, false
	}
	st, ok := r.Partitions[s.Topic][sub]
	if !ok || (!tg.sb.movedAt.IsZero() && !r.At.After(tg.sb.movedAt)) {
		return SubStat{}, false
	}
	return st, true
}
