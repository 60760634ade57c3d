package subsync

// The sync's own goroutine (Run): the start-up re-read (rebuild.go), the
// apply queue's worker (apply.go, route.go), and the loop that ticks the
// snapshot machine, writes what it returns and follows the tracked
// subscriptions (follow.go) when the pacer says (schedule.go).

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// Run ticks the snapshot machine, follows the tracked subscriptions and
// applies received updates until ctx is done. It returns after the apply
// worker it started ended: an update being applied when ctx ends is
// finished (or cut by ctx) first.
func (s *Sync) Run(ctx context.Context, linkUp func() bool) {
	defer s.Writer.Close()
	defer s.Metrics.DropLag(s.lagKey())
	if s.Release != nil {
		defer s.Release()
	}
	if s.Servlet != nil {
		defer s.Servlet.Register(s.Topic, s.pace.nudge)()
	}
	// First of the deferred calls to run: an update being applied uses the
	// admin clients, the pollers and the metrics released above.
	defer s.stopApplying()
	s.linkUp = linkUp
	s.rebuild(ctx, s.LayoutAtStart)
	s.startApplying(ctx)
	// While the machine has work (data since the last request, or a
	// request pending), it is ticked four times per interval, so a request
	// goes out as soon as the interval has passed rather than up to a
	// whole tick later. Otherwise run sleeps until the next follow is due
	// or poke wakes it: 1,000 idle partitions ticked four times a second
	// in both directions cost a tenth of a core (e2e/bench, subs row).
	// The pipe feeds the sync from its session's start, rebuild or not,
	// and a response or a completed snapshot is written from there: an
	// instance made a standby meanwhile lets the producer go now
	// (passive starts false). Soak, seed 1382347120672031276 with
	// broker restarts: east-a, active for 3 s after its restart, wrote
	// responses before its 3.6 s re-read ended, then kept the producer as
	// a standby; every marker of east-b, the active one, was refused
	// with ProducerBusy until the run ended.
	s.setActive(s.active())
	tick := max(s.Interval/4, 10*time.Millisecond)
	t := time.NewTimer(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.relearn:
			s.rebuild(ctx, s.currentLayout(ctx))
			continue
		case <-s.pace.wake:
		case <-t.C:
		}
		s.pace.sleeping.Store(false)
		s.setActive(s.active())
		s.tick(ctx)
		s.countStats()
		s.entries.sample() // for a reading another partition's follow asks for (count.go)
		if s.followDue(time.Now()) {
			if err := s.follow(ctx); err != nil && ctx.Err() == nil {
				s.pace.retry(s.Interval) // try again soon
				s.Log.Debug("following subscriptions failed", zap.Error(err))
			}
		}
		t.Reset(s.sleepFor(tick))
	}
}

// tick ticks the snapshot machine and writes what it returns. A request
// only where a tracked subscription can use the snapshot
// (snapshotUseful), from the active instance, with the link to the remote
// up; the data waits in the machine.
func (s *Sync) tick(ctx context.Context) {
	up := s.linkUp != nil && s.linkUp()
	s.write(ctx, s.Machine.Tick(up && !s.useless.Load() && s.active()))
}

// active reports Config.Active, true without it.
func (s *Sync) active() bool { return s.Active == nil || s.Active() }

// setActive records whether this instance's cursor is the partition's
// active consumer. Stopping being it, the marker producer is closed: its
// name is one per partition and direction, so while a standby instance
// (HA) kept the one it had opened to send updates (which the active
// instance does not forward: not written there), the active instance
// could write no marker at all, its snapshots stalled and no update went
// out (soak, seed 1382347120672031276: ProducerBusy for minutes after a
// takeover). Becoming it, the next follow runs at once: the updates held
// meanwhile go out.
//
// The loop looks at Config.Active when it wakes; ActiveChanged wakes it,
// since a resting partition's loop sleeps until its next follow (up to
// idleFollow): looked at only then, a standby kept the marker producer
// for minutes after an unload (the wire producer reconnects by itself).
func (s *Sync) setActive(active bool) {
	if wasPassive := s.passive.Swap(!active); wasPassive == active {
		if active {
			s.pace.nudge()
		} else {
			s.Writer.Close()
		}
	}
}

func (s *Sync) countStats() {
	st := s.Machine.Stats()
	pair := []string{s.Local, s.Remote}
	s.Metrics.SnapshotsStarted.WithLabelValues(pair...).Add(float64(st.Started - s.last.Started))
	s.Metrics.SnapshotsCompleted.WithLabelValues(pair...).Add(float64(st.Completed - s.last.Completed))
	s.Metrics.SnapshotsTimedOut.WithLabelValues(pair...).Add(float64(st.TimedOut - s.last.TimedOut))
	s.Metrics.SnapshotsUnanswered.WithLabelValues(pair...).Add(float64(st.Unanswered - s.last.Unanswered))
	if st.Completed > s.last.Completed {
		s.Metrics.SnapshotRTT.WithLabelValues(pair...).Observe(st.LastRTT.Seconds())
	}
	s.last = st
}

// currentLayout reads the partition's layout now; nil if it cannot.
func (s *Sync) currentLayout(ctx context.Context) *cluster.Layout {
	if s.LayoutNow == nil {
		return nil
	}
	l, err := s.LayoutNow(ctx)
	if err != nil {
		s.Log.Debug("partition layout unknown; the re-read starts at the oldest entry", zap.Error(err))
		return nil
	}
	return l
}

// startApplying lets the queue start apply workers with ctx (Run's), and
// starts one for updates that came before.
func (s *Sync) startApplying(ctx context.Context) { s.queue.start(ctx, s.apply, s.applyAcked) }

// stopApplying ends the apply side as Run returns: no worker starts after
// it, and it waits for the one running.
func (s *Sync) stopApplying() { s.queue.stop() }

// ActiveChanged wakes Run's loop, whatever it sleeps for, to look at
// Config.Active again (setActive). Safe for concurrent use; it never
// waits (the entry pipe calls it from the consumer's callback).
func (s *Sync) ActiveChanged() { s.pace.wakeNow() }
