package cluster

import (
	"slices"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Layout is where a partition's entries are, from its internal
// stats.
type Layout struct {
	Ledgers []LedgerSpan // oldest first; empty ledgers left out
	// Writing is the ledger being written (the newest, even if empty); -1
	// when the partition has none.
	Writing int64
	// MarkDeletes is each cursor's mark-delete position (entry granular);
	// Cursors lists every cursor, with or without a readable position.
	MarkDeletes map[string]marker.Position
	Cursors     []string
}

// LedgerSpan is one ledger and how many entries it holds.
type LedgerSpan struct{ ID, Entries int64 }

// First is the partition's oldest entry; Earliest when it holds none.
func (l *Layout) First() marker.Position {
	if len(l.Ledgers) == 0 {
		return Earliest
	}
	return marker.Position{Ledger: l.Ledgers[0].ID, Entry: 0, Batch: -1}
}

// Start is the entry a cursor created now at the Earliest position reads
// first: the oldest entry, or the first one the ledger being written will
// hold when the partition holds none (Earliest when it has no ledger).
func (l *Layout) Start() marker.Position {
	if len(l.Ledgers) == 0 && l.Writing >= 0 {
		return marker.Position{Ledger: l.Writing, Entry: 0, Batch: -1}
	}
	return l.First()
}

// Last is the partition's newest entry; Earliest when it holds none.
func (l *Layout) Last() marker.Position {
	if len(l.Ledgers) == 0 {
		return Earliest
	}
	s := l.Ledgers[len(l.Ledgers)-1]
	return marker.Position{Ledger: s.ID, Entry: s.Entries - 1, Batch: -1}
}

// Earliest is the reader's "oldest retained entry".
var Earliest = marker.Position{Ledger: -1, Entry: -1, Batch: -1}

// Move returns the entry n entries after p (before it for a negative n),
// clamped to the partition's first and last entries. A position in a
// ledger the layout does not list (deleted since, or a mark-delete
// position before the first ledger) counts as the first entry.
func (l *Layout) Move(p marker.Position, n int64) marker.Position {
	i := slices.IndexFunc(l.Ledgers, func(s LedgerSpan) bool { return s.ID == p.Ledger })
	if i < 0 {
		if len(l.Ledgers) > 0 && p.Ledger > l.Ledgers[len(l.Ledgers)-1].ID {
			return l.Last()
		}
		p, i = l.First(), 0
		if len(l.Ledgers) == 0 {
			return p
		}
	}
	e := p.Entry + n
	for e < 0 && i > 0 {
		i--
		e += l.Ledgers[i].Entries
	}
	for e >= l.Ledgers[i].Entries && i < len(l.Ledgers)-1 {
		e -= l.Ledgers[i].Entries
		i++
	}
	switch {
	case e < 0:
		return l.First()
	case e >= l.Ledgers[i].Entries:
		return l.Last()
	}
	return marker.Position{Ledger: l.Ledgers[i].ID, Entry: e, Batch: -1}
}
