package entrypath

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// fakeTail is a remote partition for scanTail (tailReader): ledgers of
// entries, each a copy (or not) of an origin.
type fakeTail struct {
	ledgerIDs []int64
	entries   [][]entryCopy
	// Counters: calls and entries read.
	reads, readEntries, lists int
	failRead                  bool
}

// fakeSig marks the pair's own copies in the fakes, and fakeOurs accepts
// them, in place of bySignature (which needs keys and digests: see
// TestWireEndpointsCopiedSince): these tests judge the walk back.
const fakeSig = "ours"

func fakeOurs(e entryCopy) bool { return len(e.origins) > 0 && e.origins[0].sig == fakeSig }

func (f *fakeTail) last(context.Context) (marker.Position, bool, error) {
	for i := len(f.ledgerIDs) - 1; i >= 0; i-- {
		if n := len(f.entries[i]); n > 0 {
			return marker.Position{Ledger: f.ledgerIDs[i], Entry: int64(n - 1), Batch: -1}, true, nil
		}
	}
	return marker.Position{}, false, nil
}

func (f *fakeTail) ledgers(context.Context) ([]ledgerInfo, error) {
	f.lists++
	var out []ledgerInfo
	for i, id := range f.ledgerIDs {
		out = append(out, ledgerInfo{id: id, entries: int64(len(f.entries[i]))})
	}
	return out, nil
}

func (f *fakeTail) read(_ context.Context, from, through marker.Position, fn func(marker.Position, entryCopy)) error {
	f.reads++
	if f.failRead {
		return errors.New("link down")
	}
	if from.Entry < 0 || through.Entry < 0 {
		// A reader cannot start at, nor wait for, an entry -1: the
		// broker's would wait out its idle timeout.
		return fmt.Errorf("read %v..%v: no such entry", from, through)
	}
	for i, id := range f.ledgerIDs {
		for e, c := range f.entries[i] {
			p := marker.Position{Ledger: id, Entry: int64(e), Batch: -1}
			if p.Compare(from) >= 0 && p.Compare(through) <= 0 {
				f.readEntries++
				fn(p, c)
			}
		}
	}
	return nil
}

// tailOf builds a partition: ledger sizes, and the entries in order, each
// "c<n>" (our copy of origin 1:n), "o" (another producer's) or "x" (a
// copy of another cluster's origin).
func tailOf(sizes []int, ids []int64, entries ...string) *fakeTail {
	f := &fakeTail{ledgerIDs: ids}
	k := 0
	for _, n := range sizes {
		var l []entryCopy
		for range n {
			var c entryCopy
			switch s := entries[k]; {
			case s == "o":
				c = entryCopy{origins: []origin{{}}}
			case s == "x":
				c = entryCopy{origins: []origin{{cluster: "north", pos: marker.Position{Ledger: 1, Entry: 1, Batch: -1}, ok: true, sig: fakeSig}}}
			default:
				var n int64
				fmt.Sscanf(s, "c%d", &n)
				c = entryCopy{origins: []origin{{cluster: "east", pos: marker.Position{Ledger: 1, Entry: n, Batch: -1}, ok: true, sig: fakeSig}}}
			}
			l = append(l, c)
			k++
		}
		f.entries = append(f.entries, l)
	}
	return f
}

// copies is n copies of origins first.., in one string list.
func copies(first, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("c%d", first+i))
	}
	return out
}

func TestScanTail(t *testing.T) {
	pos := func(e int64) marker.Position { return marker.Position{Ledger: 1, Entry: e, Batch: -1} }
	tests := []struct {
		name      string
		tail      *fakeTail
		from      int64
		limit     int
		want      []int64 // origins found
		maxReads  int     // readers opened at most
		wantLists int
	}{
		{name: "empty partition", tail: tailOf(nil, nil), from: 5, limit: 1100},
		{name: "nothing after from: one window", tail: tailOf([]int{10}, []int64{7}, copies(0, 10)...),
			from: 10, limit: 1100, maxReads: 1},
		{name: "a few copies after from", tail: tailOf([]int{100}, []int64{7}, copies(0, 100)...),
			from: 95, limit: 1100, want: []int64{95, 96, 97, 98, 99}, maxReads: 1},
		{name: "a full window after from: doubling windows", tail: tailOf([]int{1500}, []int64{7}, copies(0, 1500)...),
			from: 500, limit: 1100, want: seq(500, 1000), maxReads: 5},
		{name: "across ledgers, an empty one between, others' entries mixed in",
			tail: tailOf([]int{40, 0, 30, 50}, []int64{3, 5, 8, 9},
				slices.Concat(copies(0, 40), copies(40, 10), []string{"o", "x", "o"}, copies(50, 17), copies(67, 25), []string{"o"}, copies(92, 24))...),
			from: 45, limit: 1100, want: seq(45, 71), maxReads: 3, wantLists: 1},
		{name: "many small Ledgers: windows span them once listed", tail: smallLedgers(40, 30),
			from: 600, limit: 1100, want: seq(600, 600), maxReads: 6, wantLists: 1},
		{name: "partition shorter than the window", tail: tailOf([]int{5, 5}, []int64{1, 2}, copies(10, 10)...),
			from: 0, limit: 1100, want: seq(10, 10), maxReads: 2, wantLists: 1},
		{name: "limit reached", tail: tailOf([]int{3000}, []int64{7}, copies(0, 3000)...),
			from: 0, limit: 1100, want: seq(1900, 1100), maxReads: 5},
		{name: "a copy before an older one still counts (proof, fewer duplicates)",
			tail: tailOf([]int{6}, []int64{7}, "c1", "c9", "c2", "c3", "c4", "c5"),
			from: 3, limit: 1100, want: []int64{3, 4, 5, 9}, maxReads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := scanTail(context.Background(), tt.tail, fakeOurs, "east", pos(tt.from), tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for p := range set {
				got = append(got, p.Entry)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("found %v, want %v", got, tt.want)
			}
			if tt.tail.reads > tt.maxReads {
				t.Errorf("%d readers, want at most %d", tt.tail.reads, tt.maxReads)
			}
			if tt.tail.lists != tt.wantLists {
				t.Errorf("%d ledger lists, want %d", tt.tail.lists, tt.wantLists)
			}
			// Never more than twice the entries the proof needed, nor
			// more than the limit (plus the first window).
			if need := max(len(tt.want), 1); tt.tail.readEntries > max(2*need+firstWindow, firstWindow) || tt.tail.readEntries > tt.limit+firstWindow {
				t.Errorf("%d entries read for %d copies", tt.tail.readEntries, len(tt.want))
			}
		})
	}
}

// TestScanTailErrorKeepsProof: a window that cannot be read ends the scan
// with what was read so far (proof), and the error.
func TestScanTailErrorKeepsProof(t *testing.T) {
	f := tailOf([]int{10}, []int64{7}, copies(0, 10)...)
	f.failRead = true
	set, err := scanTail(context.Background(), f, func(entryCopy) bool { return true }, "east", marker.Position{Ledger: 1, Entry: 5, Batch: -1}, 100)
	if err == nil || len(set) != 0 {
		t.Fatalf("set %v, err %v; want an empty set and the error", set, err)
	}
}

func seq(first, n int64) []int64 {
	var out []int64
	for i := range n {
		out = append(out, first+i)
	}
	return out
}

// smallLedgers is n ledgers of size entries each, our copies of origins
// 0, 1, 2 ...
func smallLedgers(n, size int) *fakeTail {
	sizes := make([]int, n)
	ids := make([]int64, n)
	for i := range n {
		sizes[i], ids[i] = size, int64(10+2*i)
	}
	return tailOf(sizes, ids, copies(0, n*size)...)
}

// scanTail's windows at their edges: a window that ends on a ledger's
// entry 1 (the next one is that ledger's entry 0, not the ledger before),
// a limit reached in listed windows (exactly the limit read: the copies
// before them are not proof the read was paid for), entries holding
// several origins (each one counts on its own).
func TestScanTailEdges(t *testing.T) {
	at := func(e int64) marker.Position { return marker.Position{Ledger: 1, Entry: e, Batch: -1} }
	mixed := tailOf([]int{10}, []int64{7}, copies(0, 10)...)
	north := origin{cluster: "north", pos: at(50), ok: true, sig: fakeSig}
	mixed.entries[0][4].origins = []origin{north, {cluster: "east", pos: at(40), ok: true}}
	mixed.entries[0][6].origins = []origin{{cluster: "east", pos: at(1), ok: true, sig: fakeSig}, {cluster: "east", pos: at(41), ok: true}}
	tests := []struct {
		name      string
		tail      *fakeTail
		from      int64
		limit     int
		want      []int64
		wantReads int // entries read; 0: not checked
	}{
		{name: "a window ending on entry 1", tail: tailOf([]int{5, 65}, []int64{1, 2}, copies(0, 70)...),
			from: 0, limit: 1100, want: seq(0, 70)},
		{name: "the limit reached in listed windows", tail: smallLedgers(40, 30),
			from: 0, limit: 1000, want: seq(200, 1000), wantReads: 1000},
		{name: "a window starting right after an empty ledger", tail: tailOf([]int{40, 0, 64}, []int64{3, 5, 8}, copies(0, 104)...),
			from: 0, limit: 1100, want: seq(0, 104), wantReads: 104},
		{name: "several origins in one entry", tail: mixed, from: 3,
			limit: 1100, want: []int64{3, 5, 7, 8, 9, 40, 41}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := scanTail(context.Background(), tt.tail, fakeOurs, "east", at(tt.from), tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for p := range set {
				got = append(got, p.Entry)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("found %d copies %v, want %d %v", len(got), got[:min(len(got), 8)], len(tt.want), tt.want[:min(len(tt.want), 8)])
			}
			if tt.wantReads > 0 && tt.tail.readEntries != tt.wantReads {
				t.Errorf("%d entries read, want %d", tt.tail.readEntries, tt.wantReads)
			}
		})
	}
}
