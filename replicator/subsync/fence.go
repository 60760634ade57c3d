package subsync

// The echo fence: where updates from the remotes put the subscriptions of
// this cluster (Applied), so that follow does not send a position an
// update set back as consumed here (echo.go: Sync.movedByUpdate).

import (
	"math"
	"sync"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// settle records in the fence what an update whose Apply returned res
// did (Applied): a refusal sent nothing that moves the subscription; a
// reset or creation positioned it exactly after res.UpTo (the admin API
// answered); a protocol move that read back a position may still see
// acknowledgements land after that reading, up to its target; and an
// update that failed (a read-back timed out, a connection cut, the stop)
// may have moved it as far as it aimed, unless it failed reading the
// state before any move (the admin route without fresh, no reading
// returned).
func settle(a *Applied, begun applying, res subscription.Result, fresh bool) {
	switch {
	case res.Outcome == subscription.RefusedConsumers, res.Outcome == subscription.RefusedType,
		res.Outcome == subscription.RefusedBackwards:
		a.end(begun, false, marker.Position{})
	case res.Outcome == subscription.Failed && res.Route == subscription.RouteAdmin && res.Read == nil && !fresh:
		a.end(begun, false, marker.Position{})
	case res.Moved && res.Route == subscription.RouteAdmin:
		a.end(begun, true, res.UpTo)
	case res.Moved && res.UpTo.Compare(begun.upTo) > 0:
		a.end(begun, true, res.UpTo)
	case res.Moved:
		a.end(begun, true, begun.upTo)
	default:
		a.endUnsure(begun)
	}
}

// fenceAll is a position past every other: recorded in Applied, every
// position counts as put there by the sidecar.
var fenceAll = marker.Position{Ledger: math.MaxInt64, Entry: math.MaxInt64, Batch: -1}

// Applied remembers, per (cluster, partition, subscription), the highest
// mark-delete position the subscription can have while it is still where
// updates put it: the fence below which a position read is an update's,
// not consumers' here (Sync.movedByUpdate). Safe for concurrent use; one
// is shared by every sync of the process, so the updates of every remote
// (and the creations of the other direction) raise the same fence.
//
// The fence only rises. A fence too low lets a position an update set be
// sent on as consumed here (to the remote it came from, or to a third
// cluster), which can move a subscription there past messages nobody
// consumed: a loss after a failover. A fence too high only holds back the
// updates of consumers here until they pass it: more delivered again
// after a failover, never less. So an update whose outcome is not known
// (the move's read-back timed out, a step's timeout cut the connection,
// a Shared move stopped part-way, the stop ended it) raises it as far as
// it aimed; only one known not to have moved the subscription (a refusal:
// nothing was sent that moves it) leaves it where it was; and of two
// remotes' updates the higher stands, whichever ended last. One record
// goes down: a creation on the remote whose reach is not known counts
// every position as the sidecar's (fenceAll) until the next update that
// moves the subscription says where it is (createOnRemote).
type Applied struct {
	mu  sync.Mutex
	m   map[string]*fence
	seq uint64
}

// fence is one subscription's record in Applied.
type fence struct {
	// upTo is the highest position a finished update may have left the
	// subscription at (has: one did). unknown: it is fenceAll from a
	// creation whose reach is not known (createOnRemote), which the next
	// update that moves the subscription settles.
	upTo    marker.Position
	has     bool
	unknown bool
	// moved is the highest position a finished update (not a creation)
	// may have left the subscription at (hasMoved: one did): where an
	// update may have put it, while upTo also covers where a creation
	// could have shown it for a moment (Applied.beyond).
	moved    marker.Position
	hasMoved bool
	// pending are the updates being applied (begin without end), the
	// furthest each can put the subscription.
	pending map[uint64]marker.Position
	// began is when the last update that moved the subscription, or may
	// have, began: a follow takes a change of a standby copy's stats since
	// then for that update's (Sync.ourMove).
	began time.Time
}

// reach is the fence the record stands for: the highest of what finished
// and what is being applied.
func (f *fence) reach() (marker.Position, bool) {
	p, ok := f.upTo, f.has
	for _, q := range f.pending {
		if !ok || q.Compare(p) > 0 {
			p, ok = q, true
		}
	}
	return p, ok
}

// raise settles an update that moved the subscription, or may have, as
// far as upTo, begun at `at`; replace: it is known to have moved it, which
// settles an unknown fence.
func (f *fence) raise(upTo marker.Position, at time.Time, replace bool) {
	upTo.Batch = -1
	switch {
	case !f.has, replace && f.unknown, upTo.Compare(f.upTo) > 0:
		f.upTo, f.has = upTo, true
		f.unknown = upTo == fenceAll
	}
	if at.After(f.began) {
		f.began = at
	}
}

func (a *Applied) key(cluster, topic, sub string) string {
	return cluster + "\x00" + topic + "\x00" + sub
}

// of returns the record of key, made if missing (a.mu held).
func (a *Applied) of(key string) *fence {
	if a.m == nil {
		a.m = map[string]*fence{}
	}
	f := a.m[key]
	if f == nil {
		f = &fence{}
		a.m[key] = f
	}
	return f
}

// set records an update that positioned the subscription at at's entry
// (reset-cursor, create): its mark-delete position is the entry before.
func (a *Applied) set(cluster, topic, sub string, at marker.Position) {
	a.setUpTo(cluster, topic, sub, marker.Position{Ledger: at.Ledger, Entry: at.Entry - 1, Batch: -1})
}

// setUpTo records an update that left the subscription's mark-delete
// position at upTo (entry granular): a protocol move's target.
func (a *Applied) setUpTo(cluster, topic, sub string, upTo marker.Position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.of(a.key(cluster, topic, sub)).raise(upTo, time.Time{}, true)
}

// applying is an update being applied (Applied.begin), or a creation
// (Applied.beginCreate).
type applying struct {
	key    string
	id     uint64
	upTo   marker.Position // the furthest it can put the subscription
	at     time.Time
	create bool
}

// begin records, before an update is applied, the furthest it can put the
// subscription (upTo), so that a position read while the update lands
// counts as the update's.
func (a *Applied) begin(cluster, topic, sub string, upTo marker.Position) applying {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.key(cluster, topic, sub)
	f := a.of(k)
	if f.pending == nil {
		f.pending = map[uint64]marker.Position{}
	}
	a.seq++
	upTo.Batch = -1
	f.pending[a.seq] = upTo
	return applying{key: k, id: a.seq, upTo: upTo, at: time.Now()}
}

// beginCreate is begin for a creation of the subscription (createOnRemote):
// until it ends, every position counts as put there by the sidecar.
func (a *Applied) beginCreate(cluster, topic, sub string) applying {
	ap := a.begin(cluster, topic, sub, fenceAll)
	ap.create = true
	return ap
}

// settled raises the record by a finished update or creation ap that
// moved the subscription, or may have, as far as upTo.
func (f *fence) settled(ap applying, upTo marker.Position, replace bool) {
	f.raise(upTo, ap.at, replace)
	if ap.create {
		return
	}
	upTo.Batch = -1
	if !f.hasMoved || upTo.Compare(f.moved) > 0 {
		f.moved, f.hasMoved = upTo, true
	}
}

// end settles what begin recorded for an update whose outcome is known:
// moved, it left the subscription at upTo at the furthest, which raises
// the fence (and settles an unknown one); not moved, the fence stays what
// the other updates made it.
func (a *Applied) end(ap applying, moved bool, upTo marker.Position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.of(ap.key)
	delete(f.pending, ap.id)
	if moved {
		f.settled(ap, upTo, true)
	}
	a.drop(ap.key, f)
}

// endUnsure settles what begin recorded for an update that may have moved
// the subscription, as far as begin said: the fence rises to that.
func (a *Applied) endUnsure(ap applying) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.of(ap.key)
	delete(f.pending, ap.id)
	f.settled(ap, ap.upTo, false)
	a.drop(ap.key, f)
}

// drop forgets an empty record, and the pending map of one with none
// (a.mu held): a record per tracked subscription and partition stays.
func (a *Applied) drop(key string, f *fence) {
	if len(f.pending) == 0 {
		f.pending = nil
	}
	if !f.has && f.pending == nil {
		delete(a.m, key)
	}
}

// movedAfter reports whether an update that began after t moved the
// subscription, or may have (the last one that did).
func (a *Applied) movedAfter(cluster, topic, sub string, t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.m[a.key(cluster, topic, sub)]
	return f != nil && f.began.After(t)
}

// beyond reports whether an update, finished or being applied (or a
// creation being applied), may have put the subscription past md's entry:
// further than a reading that showed md. Unlike the fence, it leaves out
// where a finished creation could have shown the subscription (the
// partition's newest entry, for a moment before the creation's own
// reset).
func (a *Applied) beyond(cluster, topic, sub string, md marker.Position) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.m[a.key(cluster, topic, sub)]
	if f == nil {
		return false
	}
	md.Batch = -1
	if f.hasMoved && f.moved.Compare(md) > 0 {
		return true
	}
	for _, p := range f.pending {
		if p.Compare(md) > 0 {
			return true
		}
	}
	return false
}

// get returns the fence of the subscription: the highest position it can
// have while still where updates put it (ok false: no update did, nor is
// one being applied).
func (a *Applied) get(cluster, topic, sub string) (marker.Position, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.m[a.key(cluster, topic, sub)]
	if f == nil {
		return marker.Position{}, false
	}
	return f.reach()
}
