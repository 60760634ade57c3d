package subsync

// The start-up re-read of a partition's history, the sync's side
// (history.go says which entries it reads, and why, and holds the reader
// and the gate): the snapshot markers read go back into the machine's
// cache, and this sidecar's own responses teach the third origins'
// watermarks.

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// rebuild refills the snapshot cache after a start by re-reading this
// pair's snapshot markers, and teaches the machine the third origins'
// watermarks when the cursor did not start fresh
// (snapshot.Machine.Learn): from the responses this sidecar wrote for the
// remote before it stopped, which name every third origin (NoneSeen for
// one that never published), signed under the marker key. Without them a
// restarted sidecar could not answer requests until each third origin
// published again, and one that never publishes on a partition kept that
// pair's subscriptions out of step for good.
//
// What it reads is bounded (see the top of history.go) when the
// partition's layout at start is known; otherwise it reads from the
// oldest entry. Partitions with neither a tracked subscription nor an
// unknown watermark are not read.
func (s *Sync) rebuild(ctx context.Context, layout *cluster.Layout) {
	var at []marker.Position
	if layout != nil {
		for name, md := range layout.MarkDeletes {
			if s.Tracked(name) {
				at = append(at, md)
			}
		}
	}
	tracked := len(at) > 0 || slices.ContainsFunc(s.CursorsAtStart, s.Tracked)
	unknown := s.Machine.Unknown()
	if !tracked && len(unknown) == 0 {
		return
	}
	r := historyRead{s: s, learn: len(unknown) > 0, ticked: time.Now()}
	if layout == nil || len(layout.Ledgers) == 0 {
		r.read(ctx, entrySpan{from: cluster.Earliest, through: marker.Position{Ledger: 1<<63 - 1}})
		r.done(unknown, "whole")
		return
	}
	n := max(s.HistoryEntries, 1)
	plan := planHistory(layout, at, n)
	suffix := plan.tail.from
	if !r.read(ctx, plan.tail) {
		r.done(unknown, "tail")
		return
	}
	// Further back while a watermark is unknown, doubling the step.
	for step := n; len(s.Machine.Unknown()) > 0 && suffix.Compare(layout.First()) > 0; step *= 2 {
		from := layout.Move(suffix, -step)
		if !r.read(ctx, entrySpan{from: from, through: layout.Move(suffix, -1)}) {
			r.done(unknown, "suffix")
			return
		}
		suffix = from
	}
	r.learn = false // not a suffix: a watermark here may not be the newest
	for _, w := range plan.windows {
		if w.from.Compare(suffix) >= 0 {
			continue
		}
		if w.through.Compare(suffix) >= 0 {
			w.through = layout.Move(suffix, -1)
		}
		if !r.read(ctx, w) {
			break
		}
	}
	r.done(unknown, "bounded")
}

// historyRead is one rebuild's reading state.
type historyRead struct {
	s       *Sync
	learn   bool // learn third-origin watermarks from what is read
	entries int  // entries read
	snaps   int  // snapshot markers cached
	resps   int  // own responses learned from
	// ticked is when the re-read last ticked the machine, over all its
	// windows (each window is a read of its own, often short).
	ticked time.Time
}

// read feeds the entries of w to the machine and reports whether the
// rebuild may go on (false: the reader failed or ctx ended).
func (r *historyRead) read(ctx context.Context, w entrySpan) bool {
	s := r.s
	rd, err := s.History.Open(ctx, w.from)
	if err != nil {
		if ctx.Err() == nil {
			s.Log.Warn("cannot re-read the partition's markers; subscriptions sync from new snapshots", zap.Error(err))
		}
		return false
	}
	defer rd.Close()
	lastEntry := marker.Position{Ledger: -2}
	for ctx.Err() == nil {
		// The machine goes on meanwhile: a re-read of 10,000 entries took
		// 10-11 s under load (soak), and a process killed again within
		// it had taken no snapshot at all since its start, so the
		// positions its applications consumed meanwhile were never
		// covered (an Exclusive copy 1,850 entries behind at the end).
		// Requests need nothing the re-read teaches; answering waits
		// for the watermarks as before (Unknown).
		if time.Since(r.ticked) >= s.Interval/4 {
			s.tick(ctx)
			r.ticked = time.Now()
		}
		rctx, cancel := context.WithTimeout(ctx, historyIdle)
		e, ok, err := rd.Next(rctx)
		cancel()
		if err != nil {
			return false
		}
		if !ok {
			break
		}
		entry := marker.Position{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry, Batch: -1}
		if entry.Compare(w.through) > 0 {
			break
		}
		if entry != lastEntry {
			r.entries++
			lastEntry = entry
		}
		r.message(e)
	}
	return ctx.Err() == nil
}

// message feeds one entry read from the history to the machine.
func (r *historyRead) message(e HistoryEntry) {
	s := r.s
	k, isMarker := e.Kind, e.Marker
	if !isMarker {
		// Data teaches nothing here, copies neither: anyone who can
		// write here could name a third origin's watermark far ahead in
		// an entry's origin properties, so that a snapshot dated by it
		// would move a remote subscription past messages not copied
		// there yet. Only this sidecar's own signed responses and, live,
		// signed copies teach watermarks; one learned too low dates a
		// snapshot early, which costs duplicates, not messages.
		return
	}
	if k != marker.KindSnapshot && (k != marker.KindSnapshotResponse || !r.learn) {
		return
	}
	mk, err := s.Keys.Decode(e.Payload)
	if err != nil || mk.Topic != s.Topic || mk.From != s.Local || mk.To != s.Remote {
		return
	}
	pos := e.Pos
	if k == marker.KindSnapshot {
		s.Machine.Marker(pos, mk)
		r.snaps++
		return
	}
	for c, p := range mk.Watermarks {
		s.Machine.Learn(c, p)
	}
	r.resps++
}

func (r *historyRead) done(unknownBefore []string, how string) {
	s := r.s
	s.Metrics.HistoryEntriesRead.WithLabelValues(s.Local).Add(float64(r.entries))
	s.Log.Debug("partition history re-read", zap.String("read", how), zap.Int("entries", r.entries),
		zap.Int("snapshot_markers", r.snaps), zap.Int("own_responses", r.resps),
		zap.Strings("watermarks_unknown_before", unknownBefore),
		zap.Strings("watermarks_unknown_after", s.Machine.Unknown()))
}
