package subsync

// The admin path of a follow (sidecar.positions: admin, and any partition
// the positions servlet does not report): the tracked subscriptions'
// positions, read (LocalAdmin.MarkDeletes) only for a partition whose
// shared stats reading shows a tracked subscription moved (moved.go), or
// proven from that reading (reached; count.go says how), every admin
// request in the cluster's budget at the follow's priority (adminrate.go),
// and the heuristics that spare reads: resting, kept positions and the
// rule that keeps them from passing an operator's rewind (keptMaySend),
// "our move" (a change an update of ours explains). follow.go calls
// positions when the servlet gave none.

import (
	"context"
	"maps"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// positions returns the partition's mark-delete positions: read again
// (LocalAdmin.MarkDeletes) when the shared stats reading shows a tracked
// subscription moved, else the last ones read. It sets fl.reading to the
// partition's part of the reading.
func (s *Sync) positions(ctx context.Context, prio float64) (map[string]marker.Position, error) {
	f := &s.fl
	f.reading, f.freshRead = nil, false
	// Every way that does not end with the reading ends with one read of
	// the positions, at the end.
	var r *Reading
	var subs map[string]SubStat
	ok := false // the reading has the partition
	if s.Stats != nil && len(f.unconfirmed) == 0 {
		// (Else: without readings, or a position awaits its confirming
		// read, confirm.go, which only a read now can be.)
		s.entries.sample() // before the reading is sent (count.go)
		var err error
		if r, err = s.Stats.Read(ctx, f.maxAge, prio); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			s.Log.Debug("stats reading failed; reading positions", zap.Error(err))
		} else {
			subs, ok = r.Partitions[s.Topic]
		}
	}
	if ok {
		f.reading = subs
		if s.still(subs) && s.samePositions(subs) {
			// Consumed to the end (or copies updates put in place that
			// nobody consumes). With no snapshot to pass, whatever data
			// came, a position read could send no update (the positions
			// would pass the same newest snapshot, whose update went out
			// when they were read); with nothing moved and no data since
			// they were read (data could hide a reset forward), they are
			// the positions now, and the follow plans the newest
			// snapshot's update with them. Either way the reading stands
			// for a read: the partition may rest (resting). Backlog 0
			// shows that nothing moved them back either (a rewind grows
			// the backlog; a standby copy's kept position sends no
			// update): keptMaySend has nothing to add here.
			switch couldUpdate, moved := s.couldUpdate(), s.moved(subs); {
			case !moved && !f.dataSinceRead:
				if newest, ok := s.Machine.Newest(); ok {
					f.readNewest = newest.ID
				}
				fallthrough
			case !couldUpdate:
				f.seen, f.seenAt, f.dataSinceRead = s.trackedOf(subs), r.At, false
				return f.mds, nil
			}
		}
		moved, ours := s.movedBy(subs)
		if (!moved || !s.couldUpdate()) && !s.keptMaySend(subs) {
			// Kept: a move not read yet stays a move (seen is not
			// changed) for when a snapshot could use it. A change our
			// update explains is no move: the reading is the base the
			// next one is judged against.
			if !moved && ours {
				f.seen, f.seenAt = s.trackedOf(subs), r.At
			}
			return f.mds, nil
		}
		mds, ok, notYet := s.reachedUnlessDue(r, subs)
		if ok {
			return mds, nil
		}
		if r2, ok := s.readingAfterCompletion(ctx, r, prio); ok {
			if subs2, ok := r2.Partitions[s.Topic]; ok {
				f.reading = subs2
				if mds, ok, notYet = s.reachedUnlessDue(r2, subs2); ok {
					return mds, nil
				}
			}
		}
		if notYet && s.justCompleted() && s.mayWait() && !s.keptWouldSend() {
			// The consumers have not passed the snapshot yet: a position
			// read would only show it. Follow again shortly (their
			// acknowledgements come in batches, every 100 ms with
			// pulsar-client-go's defaults) and ask the reading again.
			s.pace.soon = s.pace.at.Add(s.Interval / 5)
			return f.mds, nil
		}
	}
	mds, err := s.readPositionsNow(ctx, prio)
	if err != nil {
		return nil, err
	}
	if ok {
		f.seen, f.seenAt = s.trackedOf(subs), r.At
	}
	return mds, nil
}

// keptMaySend reports whether the positions kept from the last read
// would send an update that subs, the partition's reading now, does not
// show them still entitled to: a position kept may drive an update only
// when the reading shows that nothing moved it backwards since it was
// read. An operator's rewind (reset-cursor to an earlier position, with
// the application stopped) changes neither
// lastMarkDeleteAdvancedTimestamp nor shrinks the backlog: it grows it,
// as new data does. A kept position past the rewind then sent the update
// of a snapshot that completed after the read (a data path draining a
// backlog completes them late), and the remote's copy was moved past
// messages the operator wanted delivered again: after a failover they
// were not. So a kept position that would send is trusted only when the
// reading shows its subscription's timestamp unchanged and its backlog
// not grown since the read (seen); otherwise the follow proves or reads
// the positions. It costs a read only where a kept position would send,
// a snapshot completing behind it after it was read; new data alone,
// with no such snapshot, costs nothing.
func (s *Sync) keptMaySend(subs map[string]SubStat) bool {
	f := &s.fl
	for name, md := range f.mds {
		if !s.keptSends(name, md) {
			continue
		}
		st, ok := subs[name]
		old, seen := f.seen[name]
		if !ok || !seen || st.MarkDeleteAdvanced != old.MarkDeleteAdvanced || st.Backlog > old.Backlog {
			return true
		}
	}
	return false
}

// keptWouldSend reports whether a position kept from the last read would
// send an update (keptSends) now.
func (s *Sync) keptWouldSend() bool {
	for name, md := range s.fl.mds {
		if s.keptSends(name, md) {
			return true
		}
	}
	return false
}

// keptSends reports whether md, sub's position kept from the last read,
// would send an update now: tracked, not where a remote's update put it
// (follow sends none from there), and past a snapshot whose update has
// not gone out.
func (s *Sync) keptSends(sub string, md marker.Position) bool {
	if !s.Tracked(sub) || s.movedByUpdate(sub, md) {
		return false
	}
	_, would := s.Planner.Peek(sub, md, s.Machine)
	return would
}

// mayWait reports whether this follow may still put its position read
// off for consumers not past a snapshot that just completed: for at most
// an interval in a row. Where a snapshot completes every interval and the
// consumers stay more entries behind than come in a second, every
// reading finds them short of the newest one, just completed: waiting
// for them to pass it sent no update at all, not even for the snapshots
// they had passed (a consumer a dozen entries behind at five a second
// was never followed). A read after the wait sends those.
func (s *Sync) mayWait() bool {
	f := &s.fl
	if f.waitingSince.IsZero() {
		f.waitingSince = s.pace.at
	}
	return s.pace.at.Sub(f.waitingSince) < s.Interval
}

// readPositionsNow reads the positions (readPositions) and records that
// this follow read them: when, at which newest snapshot, with no data
// since and no reading behind them (positions sets seen when it has one).
func (s *Sync) readPositionsNow(ctx context.Context, prio float64) (map[string]marker.Position, error) {
	f := &s.fl
	mds, err := s.readPositions(ctx, prio)
	if err != nil {
		return nil, err
	}
	if s.Servlet != nil {
		// The names found, in the servlet's scope for the next polls.
		var names []string
		for name := range mds {
			if s.Tracked(name) {
				names = append(names, name)
			}
		}
		s.Servlet.Watch(TopicNamespace(s.Topic), names...)
	}
	f.waitingSince = time.Time{}
	f.freshRead = true
	f.seen, f.readAt, f.dataSinceRead = nil, s.pace.at, false
	f.readNewest = ""
	if newest, ok := s.Machine.Newest(); ok {
		f.readNewest = newest.ID
	}
	return mds, nil
}

// samePositions reports whether the tracked subscriptions of a reading
// are those whose positions were last read (none created or gone since).
func (s *Sync) samePositions(subs map[string]SubStat) bool {
	n := 0
	for name := range subs {
		if !s.Tracked(name) {
			continue
		}
		if _, ok := s.fl.mds[name]; !ok {
			return false
		}
		n++
	}
	for name := range s.fl.mds {
		if s.Tracked(name) {
			n--
		}
	}
	return n == 0
}

// trackedOf is the tracked subscriptions' part of a reading.
func (s *Sync) trackedOf(subs map[string]SubStat) map[string]SubStat {
	out := map[string]SubStat{}
	for name, st := range subs {
		if s.Tracked(name) {
			out[name] = st
		}
	}
	return out
}

// resting reports whether nothing here can move a tracked subscription
// until data comes, which the entry pipe would report (DataAt): at the
// last reading each one was consumed to the end (backlog 0) or sat where
// a remote's update put it with nobody attached; no data came and no
// snapshot completed since positions were read (or a reading stood for a
// read); none of them is behind the newest snapshot by consumers' doing.
// A resting partition asks
// nothing: its follow returns at once (the lag gauges keep their
// values). It looks at readings made for someone else (Poller.Latest;
// the pairs' backlog gauges read a quiet topic every quietRefresh): one
// that shows a move, or a consumer attached to a copy updates put in
// place, ends the rest; one that shows nothing renews it. Without one
// for restMax it follows as an idle partition. At 1,000 partitions with
// subscriptions, the idle follows' own readings were 3 to 5 admin
// requests a second per cluster (e2e/bench, subs row).
func (s *Sync) resting(changed bool) bool {
	why := s.restless(changed)
	if why != "" && s.fl.mds != nil {
		if ce := s.Log.Check(zap.DebugLevel, "partition not resting"); ce != nil {
			ce.Write(zap.String("why", why))
		}
	}
	return why == ""
}

// restless says why the partition cannot rest now ("" when it can): see
// resting. A newer reading that shows nothing moved renews the rest
// (seenAt moves to it).
func (s *Sync) restless(changed bool) string {
	f := &s.fl
	switch {
	case s.Stats == nil:
		return "no stats readings"
	case changed:
		return "a newer snapshot since the last follow"
	case f.dataSinceRead:
		return "data since positions were read"
	case f.mds == nil || f.seen == nil:
		return "positions not read yet"
	case len(f.unconfirmed) > 0:
		return "a position awaits its confirming read"
	case !s.still(f.seen):
		return "backlog at the last reading"
	}
	newest, ok := s.Machine.Newest()
	if ok && newest.ID != f.readNewest {
		return "a snapshot completed since positions were read"
	}
	for name, md := range f.mds {
		if ok && s.Tracked(name) && md.Compare(newest.Local) < 0 && !s.movedByUpdate(name, md) {
			return "a position behind the newest snapshot"
		}
	}
	if r := s.Stats.Latest(); r != nil && r.At.After(f.seenAt) {
		subs, ok := r.Partitions[s.Topic]
		moved, ours := s.movedBy(subs)
		switch {
		case !ok:
			return "the partition missing from a newer reading"
		case moved:
			return "a newer reading shows a move"
		case !s.still(subs):
			return "a newer reading shows backlog"
		}
		if ours {
			f.seen = s.trackedOf(subs)
		}
		f.seenAt = r.At
	}
	if time.Since(f.seenAt) >= restMax {
		return "no reading for restMax"
	}
	return ""
}

// still reports whether a reading's tracked subscriptions are all at
// rest: consumed to the end, or where a remote's update put them (the
// positions last read) with no consumer attached.
func (s *Sync) still(subs map[string]SubStat) bool {
	for name, st := range subs {
		if !s.Tracked(name) || st.Backlog == 0 {
			continue
		}
		if md, ok := s.fl.mds[name]; ok && st.Consumers == 0 && s.movedByUpdate(name, md) {
			continue
		}
		return false
	}
	return true
}

// readingAfterCompletion is a new stats reading when r, the follow's,
// was sent before the newest snapshot completed (it cannot prove that
// snapshot reached): one request for the topic, shared with the other
// partitions' follows, instead of a position read for this one.
func (s *Sync) readingAfterCompletion(ctx context.Context, r *Reading, prio float64) (*Reading, bool) {
	newest, ok := s.Machine.Newest()
	if !ok {
		return nil, false
	}
	done, ok := s.entries.completedAt(newest.Local)
	if !ok || r.At.After(done) {
		return nil, false
	}
	s.entries.sample()
	r2, err := s.Stats.Read(ctx, time.Since(done), s.aged(prio))
	if err != nil {
		return nil, false
	}
	return r2, true
}

// justCompleted reports whether the newest snapshot completed here less
// than a snapshot interval ago.
func (s *Sync) justCompleted() bool {
	newest, ok := s.Machine.Newest()
	if !ok {
		return false
	}
	done, ok := s.entries.completedAt(newest.Local)
	return ok && time.Since(done) < s.Interval
}

// reachedUnlessDue is reached's positions (no position read), with what
// they prove noted as a read would (seen, readNewest; not readAt: the
// periodic read stays due, and is not replaced).
func (s *Sync) reachedUnlessDue(r *Reading, subs map[string]SubStat) (map[string]marker.Position, bool, bool) {
	f := &s.fl
	if f.seen == nil || (f.dataSinceRead && s.pace.at.Sub(f.readAt) >= idleFollow) {
		return nil, false, false
	}
	mds, ok, notYet := s.reached(r, subs)
	if !ok {
		return nil, false, notYet
	}
	newest, _ := s.Machine.Newest()
	f.readNewest = newest.ID
	f.seen, f.seenAt = s.trackedOf(subs), r.At
	f.waitingSince = time.Time{}
	s.Metrics.PositionsProven.WithLabelValues(s.Local).Inc()
	return mds, true, false
}

// reached returns the partition's positions with every tracked
// subscription of subs (its line in reading r) raised to the newest
// snapshot's local position, when r proves each one at or past it (see
// the top of count.go); ok is false when one is not proven, or is new, gone, or still
// where a remote's update put it (a position read decides those).
// notYet is set when the only thing missing is a backlog at most L: the
// consumers have not acknowledged past a yet, as far as r shows.
func (s *Sync) reached(r *Reading, subs map[string]SubStat) (mds map[string]marker.Position, ok, notYet bool) {
	f := &s.fl
	newest, ok := s.Machine.Newest()
	if !ok || f.mds == nil {
		return nil, false, false
	}
	l, ok := s.entries.after(newest.Local, r.At)
	if !ok {
		return nil, false, false
	}
	a := newest.Local
	a.Batch = -1
	out := maps.Clone(f.mds)
	n := 0
	for name, st := range subs {
		if !s.Tracked(name) {
			continue
		}
		n++
		old, had := f.mds[name]
		switch {
		case !had || st.Ranges != 0 || s.movedByUpdate(name, a):
			return nil, false, false
		case st.Backlog > l:
			notYet = true
		case old.Compare(a) < 0:
			out[name] = a
		}
	}
	for name := range f.mds {
		if _, ok := subs[name]; !ok && s.Tracked(name) {
			return nil, false, false // gone
		}
	}
	if notYet || n == 0 {
		return nil, false, notYet
	}
	return out, true, false
}

// after returns how many entries after a were read before sent, the time
// a reading was sent; ok is false when unknown (no completion recorded
// at a, no sample that old). It is the count's (count.go), and stands
// here beside reached, its one caller.
func (c *entryCount) after(a marker.Position, sent time.Time) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a.Batch = -1
	at, ok := c.at[a]
	if !ok {
		return 0, false
	}
	for i := len(c.samples) - 1; i >= 0; i-- {
		if s := c.samples[i]; !s.t.After(sent) {
			if s.n < at.n {
				return 0, false // sampled before a was read
			}
			return s.n - at.n, true
		}
	}
	return 0, false
}

// moved reports whether subs, the partition's stats now, may hide a move
// of a tracked subscription since positions were last read: a
// subscription new or gone, its lastMarkDeleteAdvancedTimestamp changed
// (acknowledgements, expiry; 0 after a reload), its backlog smaller (a
// reset forward, skip or clear-backlog, which leave the timestamp); or
// idleFollow passed since the last read with data in between (what the
// stats cannot show: a reset forward hidden by new data; without data a
// reset forward shrinks the backlog). A change an update applied here
// explains (ourMove) is not a move.
func (s *Sync) moved(subs map[string]SubStat) bool {
	moved, _ := s.movedBy(subs)
	return moved
}

// movedBy is moved, and whether ourMove explained a change.
func (s *Sync) movedBy(subs map[string]SubStat) (moved, ours bool) {
	f := &s.fl
	if f.mds == nil || f.seen == nil || (f.dataSinceRead && s.pace.at.Sub(f.readAt) >= idleFollow) {
		return true, false
	}
	n := 0
	for name, st := range subs {
		if !s.Tracked(name) {
			continue
		}
		n++
		old, ok := f.seen[name]
		switch {
		case !ok:
			return true, false
		case st.MarkDeleteAdvanced == old.MarkDeleteAdvanced && st.Backlog >= old.Backlog:
		case s.ourMove(name, old, st):
			ours = true
		default:
			return true, false
		}
	}
	return n != len(f.seen), ours
}

// ourMove reports whether the change of a tracked subscription's stats
// from old (the reading at seenAt) to st is an update's that this
// process applied here: its position was last read where an update put
// it, no application consumer was attached at either reading, and an
// update that began after the older reading moved it. The copy a standby
// region keeps moves only by updates; each protocol move changes its
// timestamp (acknowledgements) and each reset its backlog, and reading
// its position after every one of them was most of the standby
// cluster's admin requests (issue 23's side-by-side bench: 55 to 77
// internal-stats calls on west in 80 s, 40 partitions). What this cannot
// see: an application that attached, acknowledged and left between two
// readings while updates moved the copy, or expiry. Such a move is read
// at the next change not explained so, or at the periodic read
// (idleFollow with data); until then the other region is not told, which
// can only deliver more again after a failover, never skip a message.
func (s *Sync) ourMove(name string, old, st SubStat) bool {
	md, ok := s.fl.mds[name]
	return ok && st.Consumers == 0 && old.Consumers == 0 && st.MarkDeleteAdvanced != 0 &&
		s.movedByUpdate(name, md) && s.Applied.movedAfter(s.Local, s.Topic, name, s.fl.seenAt)
}

// couldUpdate reports whether positions read now could send an update or
// tell more than the last ones: a snapshot completed since they were
// read, or one of them had not reached the newest snapshot (or idleFollow
// passed). A subscription acknowledging steadily moves its timestamp at
// every reading, but between two snapshots no new position can pass one.
func (s *Sync) couldUpdate() bool {
	f := &s.fl
	newest, ok := s.Machine.Newest()
	switch {
	case f.mds == nil || (f.dataSinceRead && s.pace.at.Sub(f.readAt) >= idleFollow):
		return true
	case !ok:
		return false
	case newest.ID != f.readNewest:
		return true
	}
	for name, md := range f.mds {
		if s.Tracked(name) && md.Compare(newest.Local) < 0 {
			return true
		}
	}
	return false
}

// readPositions reads the mark-delete positions, in the budget.
func (s *Sync) readPositions(ctx context.Context, prio float64) (map[string]marker.Position, error) {
	if err := s.AdminRate.Take(ctx, s.aged(prio)); err != nil {
		return nil, err
	}
	return s.LocalAdmin.MarkDeletes(ctx, s.Topic)
}
