package subsync

// Sync's glue to the pacer (pace.go), which knows nothing of the snapshot
// machine: when the next follow is due and how long run sleeps meanwhile,
// told the machine's state; when a position awaiting its confirming read
// (confirm.go) has follow run again; and a follow's place in the
// cluster's admin rate (adminrate.go).

import (
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// followDue reports whether follow runs now.
func (s *Sync) followDue(now time.Time) bool {
	newest, _ := s.Machine.Newest()
	return s.pace.due(now, s.Interval, newest.ID, s.Machine.Idle)
}

// followIn is how long until followDue turns true if nothing happens
// meanwhile.
func (s *Sync) followIn(now time.Time) time.Duration {
	newest, _ := s.Machine.Newest()
	return s.pace.in(now, s.Interval, newest.ID, s.Machine.Idle)
}

// sleepFor is how long run waits before its next round: a tick while the
// machine has work, else until the next follow is due. A long sleep is
// announced (sleeping) before the machine is asked again, so data that
// arrives meanwhile either is seen here or pokes run awake.
func (s *Sync) sleepFor(tick time.Duration) time.Duration {
	if s.machineBusy() {
		return tick
	}
	d := s.followIn(time.Now())
	if d <= tick {
		return tick
	}
	if !s.Machine.Idle() {
		// Data waits for a subscription that can use a snapshot; only
		// the next follow can tell, so data need not wake run.
		return d
	}
	if !s.pace.sleep(s.machineBusy) {
		return tick
	}
	return d
}

// machineBusy reports whether the snapshot machine wants ticks: a request
// pending, or data to cover and a subscription that can use a snapshot.
func (s *Sync) machineBusy() bool {
	return !s.Machine.Idle() && (!s.useless.Load() || s.Machine.Pending())
}

// priority is the follow's place in the cluster's budget: the redelivery
// a failover would cost now, as far as known without a request (the last
// lag measured plus the entries read here since the last follow).
func (s *Sync) priority() float64 {
	return s.lags.largest + float64(s.pace.dataCount.Swap(0))
}

// aged is prio for a request of the follow under way made after its
// first: raised by what the budget's ageing gave the follow for its wait
// so far, so that it keeps its place in the queue instead of going to the
// back. Under traffic on 1,000 topics a follow's position read queued
// again behind every follow due meanwhile: two rounds of the budget per
// follow instead of one.
func (s *Sync) aged(prio float64) float64 {
	return prio + agePerSecond*time.Since(s.pace.at).Seconds()
}

// settleUnconfirmed drops the waiting positions of subscriptions gone
// from mds, and has follow run again when the confirming read is due.
func (s *Sync) settleUnconfirmed(mds map[string]marker.Position) {
	f := &s.fl
	var due time.Time
	for sub, p := range f.unconfirmed {
		if _, ok := mds[sub]; !ok || !s.Tracked(sub) {
			delete(f.unconfirmed, sub)
			continue
		}
		if at := p.at.Add(s.Interval); due.IsZero() || at.Before(due) {
			due = at
		}
	}
	s.pace.by(due)
}
