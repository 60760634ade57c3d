package subsync

// Where the remote's entries were copied to here, as far as this sync saw
// the copies itself: the map that turns an acked marker's ranges (entries
// of the remote's partition its subscription acknowledged one by one:
// marker.KindAcked) into the entries of this partition to acknowledge
// (holes.go). Used by the feeding goroutine alone (DataAt, MarkerAt,
// Takeover).
//
// What proves a copy: the entry path hands DataAt the origin of every
// entry it reads whose origin properties carry a valid signature for this
// partition, this cluster as the target, the origin position and the
// digest of the entry's own bytes (entryrule.Origin). An entry this map
// names for a remote position is the remote entry's copy byte for byte;
// anything else (an unsigned copy, a third origin's, this cluster's own
// entries, a copy published again) is never in it.
//
// What makes a lookup exact: the pipe copies the remote's partition in
// order, so the copies of the remote's entries stand here in the order
// of their origins, and an acked marker, written into the remote's
// partition after the entries it names, is read here after their
// copies. So once the map has seen a copy of origin s0, it has seen every
// copy of an origin after s0 that stands before the marker, unless this
// sync stopped reading in between (Takeover: another instance may have
// read some; the map then starts again). A range reaching before s0 (the
// first origin kept) is not known entry by entry, and the list it is in
// is dropped whole (lookup); but for a range at or before the remote's
// mark-delete position, whose entries were all consumed there (the
// update's business), the copies held are acknowledged as far as they go.

import (
	"github.com/geo-sidecar/geo-sidecar/marker"
)

// maxCopyRuns bounds the runs kept (56 bytes each, 14 KB): copies of
// consecutive remote entries that stand consecutively here are one run;
// this partition's own entries (its markers, its applications' data)
// between copies start a new one. At a snapshot a second, 256 runs hold
// about four minutes of one-way traffic, whatever its rate; holes older
// than that fall back to the update alone.
const maxCopyRuns = 256

// copyRun is n copies: the remote's entries src, src+1, … (one ledger)
// at dst, dst+1, … here (one ledger).
type copyRun struct {
	src, dst marker.Position
	n        int64
}

// copyMap holds the runs of copies read since the map (re)started, the
// oldest dropped beyond maxCopyRuns.
type copyMap struct {
	runs []copyRun // in reading order: src and dst both increasing
}

// add records that the entry at dst here is a signed copy of the remote's
// entry at src. An entry read again (a new session re-reads from the
// cursor), or a copy whose origin is not after the last one recorded (a
// copy stored twice, or published again), is left out.
func (m *copyMap) add(dst, src marker.Position) {
	dst.Batch, src.Batch = -1, -1
	if k := len(m.runs); k > 0 {
		r := &m.runs[k-1]
		lastSrc := marker.Position{Ledger: r.src.Ledger, Entry: r.src.Entry + r.n - 1, Batch: -1}
		lastDst := marker.Position{Ledger: r.dst.Ledger, Entry: r.dst.Entry + r.n - 1, Batch: -1}
		if dst.Compare(lastDst) <= 0 || src.Compare(lastSrc) <= 0 {
			return
		}
		if src.Ledger == lastSrc.Ledger && src.Entry == lastSrc.Entry+1 && dst.Ledger == lastDst.Ledger && dst.Entry == lastDst.Entry+1 {
			r.n++
			return
		}
	}
	if len(m.runs) == maxCopyRuns {
		// The oldest run goes, and what the map knows exactly starts at
		// the next one.
		copy(m.runs, m.runs[1:])
		m.runs = m.runs[:len(m.runs)-1]
	}
	m.runs = append(m.runs, copyRun{src: src, dst: dst, n: 1})
}

// reset forgets every copy: what was read next to them may not have been
// read by this sync (Takeover).
func (m *copyMap) reset() { m.runs = m.runs[:0] }

// Why a lookup gives no list; bounded metric label values.
const (
	holesNotCovered = "not-covered" // a range reaches before the copies seen
	holesTooMany    = "too-many"    // more than limit entries to acknowledge past the mark-delete position
	holesNone       = "no-copies"   // no copy here of any entry named
)

// lookup returns the entries here that are copies of the remote's
// entries in acked (its ranges, in order), in this partition's order, or
// why there is none: a range past md (the remote subscription's
// mark-delete position, the marker's Local) reaches before the oldest
// origin the map holds (its entries' copies are not all known: the list
// is dropped, exact or nothing), or those ranges alone name more than
// limit entries. A range at or before md (entries consumed up to the
// mark-delete position, which the update carries on its own) needs no
// such proof: every entry in it was consumed there, so acknowledging the
// copies held here of some of them is right as far as it goes; of those,
// the last ones, nearest md, fill what limit leaves.
func (m *copyMap) lookup(acked []marker.Range, md marker.Position, limit int) ([]marker.Position, string) {
	if len(m.runs) == 0 {
		return nil, holesNotCovered
	}
	since := m.runs[0].src
	for _, r := range acked {
		if r.To.Compare(md) <= 0 {
			continue
		}
		// The range's entries are those after r.From: all at or after
		// since when r.From is, or is the entry just before it.
		from := r.From
		if from.Compare(since) < 0 && (from.Ledger != since.Ledger || from.Entry != since.Entry-1) {
			return nil, holesNotCovered
		}
	}
	// Count first (nothing allocated from the lengths), then emit.
	var below, past int64
	m.each(acked, func(k int, _ copyRun, lo, hi int64) {
		if acked[k].To.Compare(md) <= 0 {
			below += hi - lo + 1
		} else {
			past += hi - lo + 1
		}
	})
	if past > int64(limit) {
		return nil, holesTooMany
	}
	skip := max(0, below-(int64(limit)-past)) // the earliest entries below md left out
	out := make([]marker.Position, 0, below-skip+past)
	m.each(acked, func(k int, run copyRun, lo, hi int64) {
		if acked[k].To.Compare(md) <= 0 && skip > 0 {
			n := min(skip, hi-lo+1)
			lo, skip = lo+n, skip-n
		}
		for e := lo; e <= hi; e++ {
			out = append(out, marker.Position{Ledger: run.dst.Ledger, Entry: run.dst.Entry + e - run.src.Entry, Batch: -1})
		}
	})
	if len(out) == 0 {
		return nil, holesNone
	}
	return out, ""
}

// each calls f with every run's entries in a range of acked (the k-th),
// as the first and last entry of the run's ledger there, in this
// partition's order.
func (m *copyMap) each(acked []marker.Range, f func(k int, run copyRun, lo, hi int64)) {
	j := 0 // the first range that may reach a run at or after this one
	for _, run := range m.runs {
		first := run.src
		last := marker.Position{Ledger: run.src.Ledger, Entry: run.src.Entry + run.n - 1, Batch: -1}
		for j < len(acked) && acked[j].To.Compare(first) < 0 {
			j++
		}
		for k := j; k < len(acked) && acked[k].From.Compare(last) < 0; k++ {
			if lo, hi, ok := within(run, acked[k]); ok {
				f(k, run, lo, hi)
			}
		}
	}
}

// within returns the remote entries of run in r (after r.From, up to and
// including r.To), as the first and last entry of run's ledger.
func within(run copyRun, r marker.Range) (lo, hi int64, ok bool) {
	l := run.src.Ledger
	lo, hi = run.src.Entry, run.src.Entry+run.n-1
	switch {
	case r.From.Ledger > l:
		return 0, 0, false
	case r.From.Ledger == l:
		lo = max(lo, r.From.Entry+1)
	}
	switch {
	case r.To.Ledger < l:
		return 0, 0, false
	case r.To.Ledger == l:
		hi = min(hi, r.To.Entry)
	}
	return lo, hi, lo <= hi
}
