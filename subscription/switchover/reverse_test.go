package switchover

import (
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// The failback's map (geo-sidecar failback: west's state onto east) is
// not in the target's order. East (the target, ledger 1) holds its own
// entries 1:0..1:9, copied to west at 2:0..2:9 before the outage, then
// its stranded tail 1:10..1:14 (never reached west), then the copies
// 1:15..1:24 of west's own entries 2:10..2:19 produced while east was
// away. West (the source) consumed through 2:15 and 2:17 past it; east's
// subscription is at 1:4.
var (
	westState = State{MarkDelete: pos(2, 15), Acked: []Range{{pos(2, 16), pos(2, 17)}}}
	tail      = []marker.Position{pos(1, 10), pos(1, 11), pos(1, 12), pos(1, 13), pos(1, 14)}
)

func reverseCopies(west, east State, replayed bool) *Copies {
	c := NewCopies(west.MarkDelete, east.MarkDelete)
	for i := int64(0); i < 10; i++ {
		c.Add(pos(2, i), pos(1, i))       // east's own, copied to west (the east→west walk, turned round)
		c.Add(pos(2, 10+i), pos(1, 15+i)) // west's, copied to east (the west→east proof)
	}
	if replayed { // --replay copied the tail to west late, at 2:20..2:24
		for i := int64(0); i < 5; i++ {
			c.Add(pos(2, 20+i), pos(1, 10+i))
		}
	}
	return c
}

// received is what a consumer of east's subscription receives of 1:0..1:24.
func received(s State) []int64 {
	var out []int64
	for e := int64(0); e < 25; e++ {
		if !s.Consumed(pos(1, e)) {
			out = append(out, e)
		}
	}
	return out
}

func TestPlanOutOfOrder(t *testing.T) {
	east := State{MarkDelete: pos(1, 4)}
	for _, tc := range []struct {
		name     string
		west     State
		replayed bool
		leave    bool
		consume  bool
		md       marker.Position
		hasMD    bool
		want     []int64 // received on east after the move
		refused  bool
	}{
		// The tail stays unconsumed: the mark-delete position stops short
		// of it, west's consumed entries past it are acknowledged one by one.
		{name: "tail left", west: westState, leave: true, md: pos(1, 9), hasMD: true, want: []int64{10, 11, 12, 13, 14, 21, 23, 24}},
		// Parked aside: the tail is consumed with the rest.
		{name: "tail parked", west: westState, consume: true, md: pos(1, 20), hasMD: true, want: []int64{21, 23, 24}},
		// Replayed to west and not consumed there yet: unconsumed on east too.
		{name: "tail replayed, not consumed on west", west: westState, replayed: true, md: pos(1, 9), hasMD: true,
			want: []int64{10, 11, 12, 13, 14, 21, 23, 24}},
		// Replayed and consumed on west (its late copies at 2:20..2:24).
		{name: "tail replayed and consumed on west", west: State{MarkDelete: pos(2, 15), Acked: []Range{{pos(2, 16), pos(2, 17)}, {pos(2, 19), pos(2, 24)}}},
			replayed: true, md: pos(1, 20), hasMD: true, want: []int64{21, 23, 24}},
		// Nothing said of the tail (a switchover): the position passes it,
		// as it passes any entry of the target's own.
		{name: "tail not named", west: westState, md: pos(1, 20), hasMD: true, want: []int64{21, 23, 24}},
		// East consumed a tail entry before the outage: left consumed.
		{name: "tail left, part consumed on east", west: westState, leave: true, md: pos(1, 11), hasMD: true,
			want: []int64{12, 13, 14, 21, 23, 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := east
			if tc.name == "tail left, part consumed on east" {
				e = State{MarkDelete: pos(1, 4), Acked: []Range{{pos(1, 9), pos(1, 11)}}}
			}
			c := reverseCopies(tc.west, e, tc.replayed)
			for _, p := range tail {
				if tc.leave {
					c.Leave(p)
				}
				if tc.consume {
					c.Consume(p)
				}
			}
			p := c.PlanMove(tc.west, e)
			if (p.Refused != "") != tc.refused {
				t.Fatalf("refused %q", p.Refused)
			}
			if p.HasMarkDelete != tc.hasMD || p.MarkDelete != tc.md {
				t.Errorf("mark-delete %v (%v), want %v", p.MarkDelete, p.HasMarkDelete, tc.md)
			}
			after := predict(e, p)
			if got := received(after); !slices.Equal(got, tc.want) {
				t.Errorf("east's consumers receive %v, want %v (plan %+v)", got, tc.want, p)
			}
			if cmp := c.Compare(tc.west, after); cmp.Again != 0 || cmp.Missed != 0 {
				t.Errorf("after the move: %+v", cmp)
			}
		})
	}
}

// East consumed entries west has not (a copy of west's 2:16 at 1:21, or
// its mark-delete position past everything): refused, nothing moves back.
func TestPlanOutOfOrderNeverBack(t *testing.T) {
	for _, east := range []State{
		{MarkDelete: pos(1, 4), Acked: []Range{{pos(1, 20), pos(1, 21)}}},
		{MarkDelete: pos(1, 24)},
	} {
		c := reverseCopies(westState, east, false)
		p := c.PlanMove(westState, east)
		if p.Refused == "" || !p.Empty() {
			t.Errorf("east %v: plan %+v, want refused and empty", east, p)
		}
	}
}
