// Package switchover moves consumers from one cluster to another on
// purpose (geo-sidecar switchover): with the source's producers and
// applications stopped and the copy proven, it brings each named
// subscription on the target to exactly the source's state, the
// mark-delete position and every message acknowledged past it (the ack
// holes), and then compares the two sides, so that a consumer switching
// now receives nothing again and misses nothing.
//
// Replicated subscriptions carry only the mark-delete position: an
// application that acknowledges out of order (a Shared consumer holding
// some messages back) gets everything past it again on the other side.
// The switchover maps each consumed source entry to its copy on the
// target through the copies' signed origins, which the proof of the copy
// (verify) reads anyway.
//
// The core (this file) is pure: states, plans and comparisons of
// positions. run.go drives it over small interfaces (the clusters' admin
// API, the mover, the proof), which the command implements with the
// sidecar's clients and tests with fakes. It never moves a position back
// and touches no subscription it was not named.
package switchover

import (
	"fmt"
	"slices"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Range is the entries after After through Through, in one ledger or
// across ledgers: one of the broker's individually deleted ranges,
// "(After..Through]".
type Range struct{ After, Through marker.Position }

// contains reports whether the entry p lies in (After, Through].
func (r Range) contains(p marker.Position) bool {
	return p.Compare(r.After) > 0 && p.Compare(r.Through) <= 0
}

// State is a subscription's acknowledgement state on one partition, at
// entry granularity: everything up to MarkDelete is consumed, and after
// it the entries in Acked. Positions have Batch -1.
type State struct {
	MarkDelete marker.Position
	Acked      []Range
}

// Consumed reports whether the entry at p (its batch index ignored) is
// acknowledged in s.
func (s State) Consumed(p marker.Position) bool {
	p = entry(p)
	if p.Compare(s.MarkDelete) <= 0 {
		return true
	}
	for _, r := range s.Acked {
		if r.contains(p) {
			return true
		}
	}
	return false
}

func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mark-delete %d:%d", s.MarkDelete.Ledger, s.MarkDelete.Entry)
	if len(s.Acked) > 0 {
		fmt.Fprintf(&b, ", %d ranges acknowledged past it", len(s.Acked))
	}
	return b.String()
}

// entry is p as a whole entry (Batch -1).
func entry(p marker.Position) marker.Position { p.Batch = -1; return p }

// ParseEntry reads the broker's "ledger:entry" (entry may be -1).
func ParseEntry(s string) (marker.Position, bool) {
	l, e, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return marker.Position{}, false
	}
	return marker.ParsePosition(l + ":" + e + ":-1")
}

// ParseAcked reads internal stats' individuallyDeletedMessages of a
// cursor: "[]" or "[(5:10..5:12], (5:15..6:2]]", each range open at its
// start and closed at its end. An empty string is no range.
func ParseAcked(s string) ([]Range, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "[]" {
		return nil, nil
	}
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("acknowledged ranges %q: want [(l:e..l:e], ...]", s)
	}
	body := s[1 : len(s)-1]
	var out []Range
	for _, part := range strings.Split(body, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		inner, ok := strings.CutPrefix(part, "(")
		if ok {
			inner, ok = strings.CutSuffix(inner, "]")
		}
		from, to, ok2 := strings.Cut(inner, "..")
		if !ok || !ok2 {
			return nil, fmt.Errorf("acknowledged range %q: want (l:e..l:e]", part)
		}
		a, oka := ParseEntry(from)
		b, okb := ParseEntry(to)
		if !oka || !okb || b.Compare(a) <= 0 {
			return nil, fmt.Errorf("acknowledged range %q: want (l:e..l:e] with its end after its start", part)
		}
		out = append(out, Range{After: a, Through: b})
	}
	return out, nil
}

// Copy is one proven copy on the target: the source entry at Origin is
// copied at At.
type Copy struct{ Origin, At marker.Position }

// Copies collects the proven copies of one partition that matter to one
// subscription, as the proof reads them: the copy furthest on the target
// of an entry at or before the source's mark-delete position (where the
// target's goes), and every copy that is past the source's mark-delete
// position or the target's. The copies before both are consumed on both
// sides, and since the target's position only moves forward they stay
// so: they are left out, so that memory grows with the subscriptions'
// backlog, not with the topic.
//
// The copies need not lie on the target in their origins' order: the
// failback maps west's state onto east over copies both ways, and east's
// own entries (copied to west before the outage) lie before the copies of
// west's. The plan never moves the mark-delete position past a copy of an
// entry the source has not consumed, nor past an entry named by Leave.
type Copies struct {
	src     marker.Position // the source's mark-delete position
	tgt     marker.Position // the target's, before the move
	seen    map[marker.Position]bool
	last    Copy // the furthest on the target of those of origins at or before src
	hasMD   bool
	past    []Copy
	copies  int
	leave   []marker.Position
	consume []marker.Position
}

// NewCopies collects for a subscription whose mark-delete position is
// src on the source and tgt on the target.
func NewCopies(src, tgt marker.Position) *Copies {
	return &Copies{src: entry(src), tgt: entry(tgt), seen: map[marker.Position]bool{}}
}

// Add takes one proven copy. A second copy of an origin is left out (the
// proof counts it duplicated, and the switchover stops then).
func (c *Copies) Add(origin, at marker.Position) {
	origin, at = entry(origin), entry(at)
	c.copies++
	if origin.Compare(c.src) <= 0 {
		if !c.hasMD || at.Compare(c.last.At) > 0 {
			c.last, c.hasMD = Copy{Origin: origin, At: at}, true
		}
		if at.Compare(c.tgt) <= 0 {
			return
		}
	}
	if c.seen[origin] {
		return
	}
	c.seen[origin] = true
	c.past = append(c.past, Copy{Origin: origin, At: at})
}

// Leave names a target entry the mark-delete position must not pass
// while it is not consumed there: the failback's stranded tail under
// --leave (east's consumers receive it when they come back), and under
// --replay, where the entry is also acknowledged one by one when the
// source consumed its late copy.
func (c *Copies) Leave(at marker.Position) { c.leave = append(c.leave, entry(at)) }

// Consume names a target entry with no copy on the source that the move
// consumes (the failback's stranded tail once parked aside with --park);
// the comparison counts it received again while it is not consumed.
func (c *Copies) Consume(at marker.Position) { c.consume = append(c.consume, entry(at)) }

// Plan is what a switchover does to one subscription on one partition of
// the target.
type Plan struct {
	// MarkDelete, when HasMarkDelete, is where the target's mark-delete
	// position goes: the copy of the source's (of the last entry copied at
	// or before it), or short of the first entry the target must keep
	// unconsumed. Not set when the target's is there or past it.
	MarkDelete    marker.Position
	HasMarkDelete bool
	// Individually are the copies of the entries the source consumed past
	// its mark-delete position and the target has not, in the target's
	// order.
	Individually []marker.Position
	// Refused, when not "", says why the subscription is left as it is:
	// the target consumed entries the source did not, and a switchover
	// never takes a position back.
	Refused string
}

// Empty reports whether the plan moves nothing.
func (p Plan) Empty() bool { return !p.HasMarkDelete && len(p.Individually) == 0 }

// PlanMove plans bringing the target's state tgt to the source's src,
// over the copies collected.
func (c *Copies) PlanMove(src, tgt State) Plan {
	var p Plan
	if cmp := c.Compare(src, tgt); cmp.Missed > 0 {
		p.Refused = fmt.Sprintf("the target already consumed %d entries the source has not (the first copy at %s): "+
			"a switchover never moves a position back; reset the target's subscription by hand if that is meant",
			cmp.Missed, cmp.FirstMissed)
		return p
	}
	if c.hasMD && c.last.At.Compare(tgt.MarkDelete) > 0 {
		p.MarkDelete, p.HasMarkDelete = c.last.At, true
		if b, ok := c.firstKept(src, tgt); ok && b.Compare(p.MarkDelete) <= 0 {
			// Short of it: everything before it is consumed on the
			// source or not the source's to say.
			p.MarkDelete = marker.Position{Ledger: b.Ledger, Entry: b.Entry - 1, Batch: -1}
			p.HasMarkDelete = p.MarkDelete.Compare(tgt.MarkDelete) > 0
		}
	}
	for _, cp := range c.past {
		if !src.Consumed(cp.Origin) || tgt.Consumed(cp.At) {
			continue
		}
		if p.HasMarkDelete && cp.At.Compare(p.MarkDelete) <= 0 {
			continue
		}
		p.Individually = append(p.Individually, cp.At)
	}
	for _, at := range c.consume {
		if tgt.Consumed(at) || (p.HasMarkDelete && at.Compare(p.MarkDelete) <= 0) {
			continue
		}
		p.Individually = append(p.Individually, at)
	}
	slices.SortFunc(p.Individually, marker.Position.Compare)
	p.Individually = slices.Compact(p.Individually)
	return p
}

// firstKept is the first target entry the move must leave unconsumed:
// a copy of an entry the source has not consumed, or an entry named by
// Leave, that the target has not consumed either.
func (c *Copies) firstKept(src, tgt State) (first marker.Position, ok bool) {
	keep := func(at marker.Position) {
		if !tgt.Consumed(at) && (!ok || at.Compare(first) < 0) {
			first, ok = at, true
		}
	}
	for _, cp := range c.past {
		if !src.Consumed(cp.Origin) {
			keep(cp.At)
		}
	}
	for _, at := range c.leave {
		keep(at)
	}
	return first, ok
}

// Comparison is what a consumer switching to the target now would see
// of one subscription on one partition, in entries (a batch is one).
type Comparison struct {
	// Again: entries the source consumed whose copies the target has not:
	// a consumer on the target receives them again. The goal is 0.
	Again int `json:"again"`
	// Missed: copies the target consumed of entries the source has not:
	// a consumer on the target never receives them. Must be 0.
	Missed int `json:"missed"`
	// FirstAgain and FirstMissed are the target positions of the first of
	// each ("" when none).
	FirstAgain  string `json:"first_again,omitempty"`
	FirstMissed string `json:"first_missed,omitempty"`
}

// Compare compares the source's state src with the target's tgt over the
// copies collected.
func (c *Copies) Compare(src, tgt State) Comparison {
	var r Comparison
	for _, cp := range c.past {
		s, t := src.Consumed(cp.Origin), tgt.Consumed(cp.At)
		switch {
		case s && !t:
			if r.Again == 0 {
				r.FirstAgain = at(cp.At)
			}
			r.Again++
		case t && !s:
			if r.Missed == 0 {
				r.FirstMissed = at(cp.At)
			}
			r.Missed++
		}
	}
	for _, p := range c.consume {
		if !tgt.Consumed(p) {
			if r.Again == 0 {
				r.FirstAgain = at(p)
			}
			r.Again++
		}
	}
	return r
}

func at(p marker.Position) string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }
