package subsync

import (
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

func pos(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }

func rng(fl, fe, tl, te int64) marker.Range { return marker.Range{From: pos(fl, fe), To: pos(tl, te)} }

// positionsIn lists ledger l's entries from..through.
func positionsIn(l, from, through int64) []marker.Position {
	var out []marker.Position
	for e := from; e <= through; e++ {
		out = append(out, pos(l, e))
	}
	return out
}

// copyMapOf is the map of a partition here (ledger 3) holding copies of
// the remote's ledger 5: entries 5:0..5:9 at 3:10..3:19, an entry of its
// own at 3:20 (a marker of this side's: not a copy), 5:10..5:14 at
// 3:21..3:25, and 5:15 onwards never copied (5:15..5:19 were the
// remote's markers, which are not forwarded as data), then 5:20 at 3:26.
func copyMapOf() *copyMap {
	var m copyMap
	for i := range int64(10) {
		m.add(pos(3, 10+i), pos(5, i))
	}
	for i := range int64(5) {
		m.add(pos(3, 21+i), pos(5, 10+i))
	}
	m.add(pos(3, 26), pos(5, 20))
	return &m
}

// TestCopyMapLookup: a list of the remote's acknowledged ranges becomes
// exactly the copies here of the entries in them (after From, up to and
// including To), in this partition's order; entries never copied are not
// acknowledged; a range reaching before the first copy the map holds
// drops the whole list, as does one longer than the bound.
func TestCopyMapLookup(t *testing.T) {
	tests := []struct {
		name  string
		acked []marker.Range
		md    *marker.Position // the remote's mark-delete position; nil: 4:0, before every range
		max   int
		want  []marker.Position
		why   string
	}{
		{"one range in a run", []marker.Range{rng(5, 2, 5, 4)}, nil, 100, []marker.Position{pos(3, 13), pos(3, 14)}, ""},
		{"From is not acknowledged", []marker.Range{rng(5, 3, 5, 4)}, nil, 100, []marker.Position{pos(3, 14)}, ""},
		{"across two runs", []marker.Range{rng(5, 8, 5, 11)}, nil, 100, []marker.Position{pos(3, 19), pos(3, 21), pos(3, 22)}, ""},
		{"holes: every other entry", []marker.Range{rng(5, 0, 5, 1), rng(5, 2, 5, 3), rng(5, 12, 5, 13)}, nil, 100,
			[]marker.Position{pos(3, 11), pos(3, 13), pos(3, 24)}, ""},
		{"from the entry before the first copy", []marker.Range{rng(5, -1, 5, 1)}, nil, 100, []marker.Position{pos(3, 10), pos(3, 11)}, ""},
		{"entries never copied are left out", []marker.Range{rng(5, 13, 5, 19)}, nil, 100, []marker.Position{pos(3, 25)}, ""},
		{"past the last copy", []marker.Range{rng(5, 14, 5, 19)}, nil, 100, nil, holesNone},
		{"into a later ledger", []marker.Range{rng(5, 19, 6, 3)}, nil, 100, []marker.Position{pos(3, 26)}, ""},
		{"everything", []marker.Range{rng(5, -1, 9, 0)}, nil, 100, append(positionsIn(3, 10, 19), positionsIn(3, 21, 26)...), ""},
		{"reaches before the first copy", []marker.Range{rng(5, -2, 5, 1)}, nil, 100, nil, holesNotCovered},
		{"from an earlier ledger", []marker.Range{rng(4, 7, 5, 1)}, nil, 100, nil, holesNotCovered},
		{"one range of several reaches before", []marker.Range{rng(4, 7, 4, 9), rng(5, 2, 5, 4)}, nil, 100, nil, holesNotCovered},
		{"at the bound", []marker.Range{rng(5, 2, 5, 4)}, nil, 2, []marker.Position{pos(3, 13), pos(3, 14)}, ""},
		{"past the bound", []marker.Range{rng(5, 2, 5, 5)}, nil, 2, nil, holesTooMany},
		// Up to the remote's mark-delete position every entry was
		// consumed there: the copies held are enough, from wherever.
		{"up to the mark-delete position, from the start", []marker.Range{{From: marker.NoneSeen, To: pos(5, 3)}, rng(5, 4, 5, 6)}, ptr(pos(5, 3)), 100,
			[]marker.Position{pos(3, 10), pos(3, 11), pos(3, 12), pos(3, 13), pos(3, 15), pos(3, 16)}, ""},
		{"up to the mark-delete position, from an earlier ledger", []marker.Range{rng(4, 7, 5, 1)}, ptr(pos(5, 1)), 100,
			[]marker.Position{pos(3, 10), pos(3, 11)}, ""},
		{"up to the mark-delete position, the last ones within the bound", []marker.Range{{From: marker.NoneSeen, To: pos(5, 3)}, rng(5, 4, 5, 5)}, ptr(pos(5, 3)), 3,
			[]marker.Position{pos(3, 12), pos(3, 13), pos(3, 15)}, ""},
		{"up to the mark-delete position, none within the bound", []marker.Range{{From: marker.NoneSeen, To: pos(5, 3)}, rng(5, 4, 5, 6)}, ptr(pos(5, 3)), 2,
			[]marker.Position{pos(3, 15), pos(3, 16)}, ""},
		{"past the mark-delete position, past the bound", []marker.Range{{From: marker.NoneSeen, To: pos(5, 3)}, rng(5, 4, 5, 7)}, ptr(pos(5, 3)), 2, nil, holesTooMany},
		{"past the mark-delete position, before the copies", []marker.Range{{From: marker.NoneSeen, To: pos(5, 3)}, rng(4, 4, 5, 7)}, ptr(pos(5, 3)), 100, nil, holesNotCovered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := pos(4, 0)
			if tt.md != nil {
				md = *tt.md
			}
			got, why := copyMapOf().lookup(tt.acked, md, tt.max)
			if why != tt.why || !slices.Equal(got, tt.want) {
				t.Errorf("lookup(%v) = %v, %q; want %v, %q", tt.acked, got, why, tt.want, tt.why)
			}
		})
	}
}

// TestCopyMapAdd: what the map keeps of the entries fed to it.
func TestCopyMapAdd(t *testing.T) {
	var m copyMap
	if _, why := m.lookup([]marker.Range{rng(5, 0, 5, 1)}, pos(4, 0), 10); why != holesNotCovered {
		t.Errorf("an empty map: %q, want %q", why, holesNotCovered)
	}
	m.add(pos(3, 10), pos(5, 0))
	m.add(pos(3, 11), marker.Position{Ledger: 5, Entry: 1, Batch: 2}) // a batch's position: its entry
	m.add(pos(3, 11), pos(5, 1))                                      // read again (a new session)
	m.add(pos(3, 12), pos(5, 1))                                      // a copy stored twice, or published again
	m.add(pos(3, 13), pos(5, 0))                                      // an older copy published again
	m.add(pos(3, 14), pos(5, 2))
	got, why := m.lookup([]marker.Range{rng(5, -1, 5, 2)}, pos(4, 0), 10)
	if want := []marker.Position{pos(3, 10), pos(3, 11), pos(3, 14)}; why != "" || !slices.Equal(got, want) {
		t.Errorf("lookup = %v, %q; want %v (the first copy of each entry only)", got, why, want)
	}
	if len(m.runs) != 2 {
		t.Errorf("%d runs, want 2 (3:10..3:11, then 3:14)", len(m.runs))
	}

	// After a takeover the copies read before are forgotten: what was
	// read meanwhile by another instance is not known.
	m.reset()
	m.add(pos(3, 40), pos(5, 30))
	if _, why := m.lookup([]marker.Range{rng(5, 1, 5, 2)}, pos(4, 0), 10); why != holesNotCovered {
		t.Errorf("after a reset, a range before the next copy: %q, want %q", why, holesNotCovered)
	}
}

// TestCopyMapBounded: beyond maxCopyRuns the oldest run goes, and the map
// then covers from the next one.
func TestCopyMapBounded(t *testing.T) {
	var m copyMap
	for i := range int64(maxCopyRuns + 1) {
		m.add(pos(3, 2*i), pos(5, i)) // an entry of this side's between each copy
	}
	if len(m.runs) != maxCopyRuns {
		t.Fatalf("%d runs, want %d", len(m.runs), maxCopyRuns)
	}
	if _, why := m.lookup([]marker.Range{rng(5, -1, 5, 0)}, pos(4, 0), 10); why != holesNotCovered {
		t.Errorf("the dropped run: %q, want %q", why, holesNotCovered)
	}
	got, why := m.lookup([]marker.Range{rng(5, 0, 5, 2)}, pos(4, 0), 10)
	if want := []marker.Position{pos(3, 2), pos(3, 4)}; why != "" || !slices.Equal(got, want) {
		t.Errorf("lookup = %v, %q; want %v", got, why, want)
	}
}
