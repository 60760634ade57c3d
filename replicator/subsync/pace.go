package subsync

// Pacing: when follow runs and how long run sleeps. Follow is the sync's
// only periodic admin call, paced by activity: a partition whose tracked
// subscriptions have passed the newest snapshot and that receives nothing
// costs no admin call but one every idleFollow. The pacer knows nothing
// of the snapshot machine: the sync tells it the newest snapshot and
// whether the machine is idle (schedule.go: followDue, sleepFor).

import (
	"sync/atomic"
	"time"
)

const (
	// behindFollow bounds the pause between two follows while a tracked
	// subscription has not passed the newest snapshot and nothing moves
	// (an update then goes out at most this late: more redelivered after
	// a failover, never lost).
	behindFollow = 30 * time.Second
	// idleFollow is how often an idle partition is followed anyway, to
	// see subscriptions created or reset there.
	idleFollow = 5 * time.Minute
	// staleBehind: a subscription behind the newest snapshot whose
	// position has not moved for this long has nobody consuming it (a
	// standby region's copy, say); it is then followed every idleFollow
	// like an idle one. At 30 s each, 1,000 such partitions cost 100
	// admin requests a second (e2e/bench, subs row).
	staleBehind = 5 * time.Minute
	// restMax bounds a rest (resting) without a reading that confirms
	// it: a resting partition is followed as an idle one after this long
	// when no reading made elsewhere came.
	restMax = time.Hour
	// lagRefresh is how often the lag gauges are read again when nothing
	// moved on the partition (no data, no position, no snapshot): the two
	// backlog calls of each idle follow were two thirds of its admin cost.
	// Only a consumer on the remote moving the copy goes unseen that long.
	lagRefresh = time.Hour
)

// pacer is when follow last ran and when it runs next, and the wake-up
// of run's sleep. The schedule (once to soon) is used by run alone; data,
// the counters and the wake-up are safe for concurrent use (the entry
// path feeds them).
type pacer struct {
	once     bool
	at       time.Time     // when the last follow began
	every    time.Duration // interval/2, doubled while nothing changes, up to behindFollow (idleFollow once stale)
	movedAt  time.Time     // last follow that saw a change
	newestID string        // the newest snapshot at the last follow
	behind   bool          // a tracked subscription had not passed the newest snapshot
	// soon, if set, is when follow runs again at the latest: the
	// consumers had not passed a snapshot that just completed (adminpath.go),
	// or a position awaits its confirming read (confirm.go).
	soon time.Time

	// dataSeen is set by data: the partition had traffic since the last
	// follow; dataCount counts the entries since then, for the follow's
	// priority in the budget.
	dataSeen  atomic.Bool
	dataCount atomic.Int64
	// wake ends run's sleep on an idle partition (poke); sleeping is set
	// while run sleeps longer than a tick.
	wake     chan struct{}
	sleeping atomic.Bool
	// nudged is set by the positions servlet's follower when a poll saw
	// a tracked subscription of the partition change (Sync.nudge): the
	// next follow is due at once.
	nudged atomic.Bool
	// cheap: the last follow took its positions from the servlet's
	// shared poll, not from an admin request of its own, so a new
	// snapshot is followed at once instead of half an interval after the
	// last follow (that wait spaced admin requests; a poll is spaced by
	// the servlet follower itself).
	cheap bool
}

// due reports whether follow runs at now, the newest snapshot being
// newest and idle telling whether the snapshot machine has nothing to do.
func (p *pacer) due(now time.Time, interval time.Duration, newest string, idle func() bool) bool {
	if !p.once {
		return true
	}
	since := now.Sub(p.at)
	switch {
	case p.nudged.Load():
		return true
	case !p.soon.IsZero() && !now.Before(p.soon):
		return true
	case since < min(p.every, interval/2) && newest == p.newestID:
		return false
	case newest != p.newestID:
		return p.cheap || since >= interval/2
	case since < p.every:
		return false
	}
	// Data waiting for a subscription that can use a snapshot
	// (snapshotUseful) is followed like new data.
	return p.behind || p.dataSeen.Load() || !idle() || since >= idleFollow
}

// in is how long until due turns true if nothing happens meanwhile (no
// data, no new snapshot: those poke run).
func (p *pacer) in(now time.Time, interval time.Duration, newest string, idle func() bool) time.Duration {
	if !p.once || p.nudged.Load() {
		return 0
	}
	d := p.at.Add(idleFollow).Sub(now)
	switch {
	case newest != p.newestID && p.cheap:
		return 0
	case newest != p.newestID:
		d = p.at.Add(interval / 2).Sub(now)
	case p.behind || p.dataSeen.Load() || !idle():
		d = p.at.Add(p.every).Sub(now)
	}
	if !p.soon.IsZero() {
		d = min(d, p.soon.Sub(now))
	}
	return d
}

// begin starts a follow at now, newest being the newest snapshot: it
// reports whether that snapshot is new since the last follow (or there
// was none), and when the last follow began.
func (p *pacer) begin(now time.Time, newest string) (changed bool, prev time.Time) {
	changed = !p.once || newest != p.newestID
	prev = p.at
	p.nudged.Store(false)
	p.once, p.at, p.newestID, p.soon = true, now, newest, time.Time{}
	return changed, prev
}

// retry has the next follow come soon: this one failed.
func (p *pacer) retry(interval time.Duration) { p.every = interval / 2 }

// rest has the next follow come after idleFollow: nothing can have moved.
func (p *pacer) rest() { p.every = idleFollow }

// paced sets the pause before the next follow after one that read
// positions: half an interval after a change, else doubled, up to
// behindFollow, or idleFollow once nothing moved for staleBehind.
func (p *pacer) paced(changed bool, interval time.Duration) {
	switch {
	case changed:
		p.every, p.movedAt = interval/2, p.at
	case p.at.Sub(p.movedAt) >= staleBehind:
		p.every = min(max(p.every, interval/2)*2, idleFollow)
	default:
		p.every = min(max(p.every, interval/2)*2, behindFollow)
	}
}

// by has the next follow come at t at the latest (zero: no bound).
func (p *pacer) by(t time.Time) {
	if !t.IsZero() && (p.soon.IsZero() || t.Before(p.soon)) {
		p.soon = t
	}
}

// data notes an entry read from the partition.
func (p *pacer) data() {
	p.dataSeen.Store(true)
	p.dataCount.Add(1)
}

// nudge has the next follow come at once, waking run if it sleeps.
func (p *pacer) nudge() {
	p.nudged.Store(true)
	p.poke()
}

// poke wakes run if it sleeps: the machine has something to do (data
// came, or a marker changed its state).
func (p *pacer) poke() {
	if p.sleeping.Load() && p.sleeping.CompareAndSwap(true, false) {
		p.wakeNow()
	}
}

// wakeNow wakes run whatever it sleeps for, without waiting.
func (p *pacer) wakeNow() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// sleep announces a long sleep, unless busy (asked after the announcement)
// says the machine has work: data that arrives meanwhile either is seen by
// busy or pokes run awake. It reports whether run sleeps long.
func (p *pacer) sleep(busy func() bool) bool {
	p.sleeping.Store(true)
	if busy() {
		p.sleeping.Store(false)
		return false
	}
	return true
}
