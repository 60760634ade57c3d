package cluster

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// threeLedgers: ledger 3 holds entries 0-9, ledger 5 0-3, ledger 9 0-5.
func threeLedgers() *Layout {
	return &Layout{Ledgers: []LedgerSpan{{3, 10}, {5, 4}, {9, 6}}}
}

func TestLayoutMove(t *testing.T) {
	l := threeLedgers()
	tests := []struct {
		name string
		from marker.Position
		n    int64
		want marker.Position
	}{
		{"within a ledger", pos(3, 2), 5, pos(3, 7)},
		{"back within a ledger", pos(9, 5), -5, pos(9, 0)},
		{"back across one ledger", pos(9, 1), -3, pos(5, 2)},
		{"back across two ledgers", pos(9, 0), -6, pos(3, 8)},
		{"back past the first entry", pos(5, 1), -100, pos(3, 0)},
		{"forward across ledgers", pos(3, 8), 4, pos(5, 2)},
		{"forward past the last entry", pos(5, 1), 100, pos(9, 5)},
		{"mark-delete before a ledger's first entry", pos(5, -1), -1, pos(3, 8)},
		{"mark-delete before a ledger's first entry, forward", pos(5, -1), 1, pos(5, 0)},
		{"ledger deleted since (older)", pos(1, 7), 2, pos(3, 2)},
		{"ledger newer than the layout", pos(12, 0), -1, pos(9, 5)},
		{"zero", pos(5, 3), 0, pos(5, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.Move(tt.from, tt.n); got != tt.want {
				t.Errorf("move(%v, %d) = %v, want %v", tt.from, tt.n, got, tt.want)
			}
		})
	}
	empty := &Layout{}
	if got := empty.Move(pos(1, 1), -3); got != Earliest {
		t.Errorf("empty layout: move = %v, want earliest", got)
	}
}

// pos is an entry position (no batch).
func pos(ledger, entry int64) marker.Position {
	return marker.Position{Ledger: ledger, Entry: entry, Batch: -1}
}
