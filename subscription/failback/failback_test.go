package failback

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

func pos(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }

// The scenario of switchover's reverse_test, as the failback sees it:
// east's partition "p" holds its own entries 1:0..1:9 (copied to west at
// 2:0..2:9 before the outage), its stranded tail 1:10..1:14, and the
// copies 1:15..1:24 of west's own 2:10..2:19. West consumed through 2:15
// and 2:17; east's subscription is at 1:4.

type fakeFinder struct {
	tail []Entry
	err  error
}

func (f fakeFinder) Find(_ context.Context, add func(string, Entry)) ([]End, error) {
	for _, e := range f.tail {
		add("p", e)
	}
	return []End{{Partition: "p", Source: pos(1, 24), HasSource: true}}, f.err
}

func theTail() []Entry {
	var out []Entry
	for e := int64(10); e < 15; e++ {
		out = append(out, Entry{Pos: pos(1, e), PublishTime: 1_700_000_000_000 + e*100, Messages: 1})
	}
	return out
}

type fakeCopier struct {
	copied []marker.Position
	upTo   int // copies this many, then fails; 0: all
}

func (c *fakeCopier) Copy(_ context.Context, _ string, _ marker.Position, entries []marker.Position) (int, error) {
	if c.upTo > 0 && c.upTo < len(entries) {
		c.copied = append(c.copied, entries[:c.upTo]...)
		return c.upTo, errors.New("the target went away")
	}
	c.copied = append(c.copied, entries...)
	return len(entries), nil
}

type fakePair struct {
	there     bool // the cursor is at the end already
	consumers int
	advanced  map[string]marker.Position
}

func (p *fakePair) Attached(context.Context, string) (int, error) { return p.consumers, nil }
func (p *fakePair) Advance(_ context.Context, part string, to marker.Position) (bool, error) {
	if p.advanced == nil {
		p.advanced = map[string]marker.Position{}
	}
	p.advanced[part] = to
	return !p.there, nil
}

// cluster is switchover.Cluster and Mover over one partition "p".
type cluster struct {
	mu    sync.Mutex
	subs  map[string]switchover.Sub
	moves int
}

func (c *cluster) Subscription(_ context.Context, _, sub string) (switchover.Sub, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[sub], nil
}

func (c *cluster) Producers(context.Context, string) ([]string, error) { return nil, nil }

func (c *cluster) Move(_ context.Context, _, sub string, md marker.Position, ind []marker.Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moves++
	s := c.subs[sub]
	if md.Compare(s.State.MarkDelete) > 0 {
		s.State.MarkDelete = md
	}
	for _, p := range ind {
		s.State.Acked = append(s.State.Acked, switchover.Range{After: pos(p.Ledger, p.Entry-1), Through: p})
	}
	c.subs[sub] = s
	return nil
}

// prover maps west onto east both ways; with replayed, west holds late
// copies of the tail at 2:20..2:24.
type prover struct{ replayed, undrained bool }

func (p prover) Prove(_ context.Context, copied func(string, marker.Position, marker.Position)) (switchover.Proof, error) {
	for i := int64(0); i < 10; i++ {
		copied("p", pos(2, 10+i), pos(1, 15+i))
		copied("p", pos(2, i), pos(1, i))
	}
	if p.replayed {
		for i := int64(0); i < 5; i++ {
			copied("p", pos(2, 20+i), pos(1, 10+i))
		}
	}
	if p.undrained {
		return switchover.Proof{Detail: "the pair west→east is not drained: 3 entries not yet copied"}, nil
	}
	return switchover.Proof{Complete: true}, nil
}

func options(choice string, finder Finder, copier Copier, pair Pair, east *cluster, replayed bool, subs ...string) Options {
	west := &cluster{subs: map[string]switchover.Sub{"billing": {Exists: true, Type: "Shared",
		State: switchover.State{MarkDelete: pos(2, 15), Acked: []switchover.Range{{After: pos(2, 16), Through: pos(2, 17)}}}}}}
	return Options{Topic: "t", From: "east", To: "west", Partitions: []string{"p"}, Choice: choice, Finder: finder,
		Copier: copier, Pair: pair, ParkTopic: "t-stranded", ParkOn: "east",
		Switchover: switchover.Options{Topic: "t", From: "west", To: "east", Partitions: []string{"p"}, Subscriptions: subs,
			Source: west, Target: east, Mover: east, Prover: prover{replayed: replayed}}}
}

func eastCluster() *cluster {
	return &cluster{subs: map[string]switchover.Sub{
		"billing": {Exists: true, State: switchover.State{MarkDelete: pos(1, 4)}},
		"other":   {Exists: true, State: switchover.State{MarkDelete: pos(1, 2)}},
	}}
}

// received is what a consumer of east's billing receives of 1:0..1:24.
func received(c *cluster) []int64 {
	s := c.subs["billing"].State
	var out []int64
	for e := int64(0); e < 25; e++ {
		if !s.Consumed(pos(1, e)) {
			out = append(out, e)
		}
	}
	return out
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		choice   string
		tail     []Entry
		pairBusy int
		upTo     int
		dry      bool
		subs     []string
		err      error
		changed  bool
		copied   int
		advanced bool
		receives []int64 // nil: east's billing not moved
		ok       bool
		// westConsumedLate: west's application consumed the late copies;
		// unmapped: the walk east→west maps none of them; undrained: the
		// pair west→east has not copied everything home yet.
		westConsumedLate, unmapped, undrained, pairThere bool
	}{
		{name: "no choice, a tail: report only", tail: theTail(), subs: []string{"billing"}, err: ErrNoChoice},
		{name: "no choice, nothing stranded", subs: []string{"billing"}, advanced: true,
			receives: []int64{21, 23, 24}, ok: true},
		{name: "the pair running", choice: Replay, tail: theTail(), pairBusy: 1, err: ErrPairRunning},
		{name: "replay", choice: Replay, tail: theTail(), subs: []string{"billing"}, copied: 5, advanced: true,
			receives: []int64{10, 11, 12, 13, 14, 21, 23, 24}, ok: true},
		{name: "park", choice: Park, tail: theTail(), subs: []string{"billing"}, copied: 5, advanced: true,
			receives: []int64{21, 23, 24}, ok: true},
		{name: "leave", choice: Leave, tail: theTail(), subs: []string{"billing"}, advanced: true,
			receives: []int64{10, 11, 12, 13, 14, 21, 23, 24}, ok: true},
		{name: "replay, the late copies consumed on west", choice: Replay, tail: theTail(), subs: []string{"billing"}, copied: 5,
			advanced: true, westConsumedLate: true, receives: []int64{21, 23, 24}, ok: true},
		{name: "replay, a late copy not mapped", choice: Replay, tail: theTail(), subs: []string{"billing"}, copied: 5,
			advanced: true, unmapped: true, receives: []int64{10, 11, 12, 13, 14, 21, 23, 24}, ok: true},
		{name: "the pair west→east not drained: subscriptions not moved", choice: Replay, tail: theTail(), subs: []string{"billing"},
			copied: 5, advanced: true, undrained: true, err: switchover.ErrNotProven, changed: true},
		{name: "not drained, nothing stranded: nothing changed but the pair's cursor", choice: Leave, subs: []string{"billing"},
			advanced: true, undrained: true, err: switchover.ErrNotProven, changed: true},
		{name: "not drained, nothing stranded, the pair's cursor there: nothing changed", choice: Leave, subs: []string{"billing"},
			advanced: true, pairThere: true, undrained: true, err: switchover.ErrNotProven},
		{name: "replay, the tail only", choice: Replay, tail: theTail(), copied: 5, advanced: true, ok: true},
		{name: "a copy fails part-way", choice: Park, tail: theTail(), subs: []string{"billing"}, upTo: 2, copied: 2, changed: true},
		{name: "dry run", choice: Replay, tail: theTail(), subs: []string{"billing"}, dry: true, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			east, copier, pair := eastCluster(), &fakeCopier{upTo: tc.upTo}, &fakePair{consumers: tc.pairBusy, there: tc.pairThere}
			o := options(tc.choice, fakeFinder{tail: tc.tail}, copier, pair, east, tc.choice == Replay && !tc.dry && !tc.unmapped, tc.subs...)
			if tc.undrained {
				o.Switchover.Prover = prover{undrained: true}
			}
			if tc.westConsumedLate {
				w := o.Switchover.Source.(*cluster)
				s := w.subs["billing"]
				s.State.Acked = append(s.State.Acked, switchover.Range{After: pos(2, 19), Through: pos(2, 24)})
				w.subs["billing"] = s
			}
			o.DryRun = tc.dry
			rep, err := Run(context.Background(), o, io.Discard)
			var ch *Changed
			switch {
			case tc.err != nil && !errors.Is(err, tc.err), tc.changed != errors.As(err, &ch),
				tc.err == nil && !tc.changed && err != nil:
				t.Fatalf("err %v, want %v (after changes: %v)", err, tc.err, tc.changed)
			}
			if len(copier.copied) != tc.copied || rep.Copied != int64(tc.copied) {
				t.Errorf("copied %d (report %d), want %d", len(copier.copied), rep.Copied, tc.copied)
			}
			if (pair.advanced["p"] == pos(1, 24)) != tc.advanced {
				t.Errorf("the pair's cursor advanced to %v, want advanced %v", pair.advanced, tc.advanced)
			}
			if tc.receives == nil && east.moves > 0 {
				t.Errorf("east's subscription moved: %+v", east.subs["billing"])
			}
			if got := received(east); tc.receives != nil && !slices.Equal(got, tc.receives) {
				t.Errorf("east's consumers receive %v, want %v", got, tc.receives)
			}
			if east.subs["other"].State.MarkDelete != pos(1, 2) || len(east.subs["other"].State.Acked) > 0 {
				t.Errorf("a subscription not named was moved: %+v", east.subs["other"])
			}
			if want := len(copier.copied) > 0 || len(pair.advanced) > 0 && !tc.pairThere || east.moves > 0; rep.Changed != want {
				t.Errorf("report says changed %v, want %v (copied %d, cursor %v, moves %d)", rep.Changed, want, len(copier.copied), pair.advanced, east.moves)
			}
			if err == nil && rep.OK() != tc.ok {
				t.Errorf("OK %v, want %v: %+v", rep.OK(), tc.ok, rep)
			}
			if rep.Next == "" {
				t.Error("no next step said")
			}
			if tc.undrained && (rep.Subscriptions == nil || !strings.Contains(rep.Subscriptions.ProofDetail, "not drained")) {
				t.Errorf("the report does not say the pair west→east is not drained: %+v", rep.Subscriptions)
			}
			if tc.err == ErrNoChoice && !strings.Contains(rep.Next, "--replay") {
				t.Errorf("next %q does not say to choose", rep.Next)
			}
			if len(tc.tail) > 0 && !errors.Is(err, ErrPairRunning) {
				s := rep.Stranded[0]
				if rep.RPO.Entries != 5 || s.Entries != 5 || s.First != "1:10" || s.Last != "1:14" || rep.RPO.Seconds != 0.4 {
					t.Errorf("stranded %+v, RPO %+v", s, rep.RPO)
				}
			}
		})
	}
}

// The RPO spans every partition's tail: the earliest first publish time
// to the latest last one, entries and messages summed (a batch counts
// its messages).
func TestRPOAcrossPartitions(t *testing.T) {
	a, b, none := &Stranded{Partition: "p0"}, &Stranded{Partition: "p1"}, &Stranded{Partition: "p2"}
	a.add(Entry{Pos: pos(1, 5), PublishTime: 2_000, Messages: 1})
	a.add(Entry{Pos: pos(1, 6), PublishTime: 9_000, Messages: 10})
	b.add(Entry{Pos: pos(3, 0), PublishTime: 1_500, Messages: 0})
	b.add(Entry{Pos: pos(3, 1), PublishTime: 4_000, Messages: 1})
	var r RPO
	for _, s := range []*Stranded{a, none, b} {
		s.finish()
		r.add(s)
	}
	r.finish()
	if r.Entries != 4 || r.Messages != 13 || r.Seconds != 7.5 || r.FirstPublishTime != rfc3339(1_500) || r.LastPublishTime != rfc3339(9_000) {
		t.Errorf("RPO %+v", r)
	}
	if a.First != "1:5" || a.Last != "1:6" || b.FirstPublishTime != rfc3339(1_500) || none.First != "" {
		t.Errorf("tails %+v %+v %+v", a, b, none)
	}
}

// TestSealed: a stranded tail with encrypted batches (whose messages a
// late copy cannot flag one by one) is not replayed, dry run or not:
// nothing changed, the first such entry named, --park or --leave
// offered. Parked, it is copied and the report says how many carry the
// flags on the entry only; left, nothing is said of flags.
func TestSealed(t *testing.T) {
	tail := theTail()
	tail[2].Sealed, tail[4].Sealed = true, true
	for _, tc := range []struct {
		name, choice string
		dry          bool
		err          error
		copied       int
		tailSays     string
	}{
		{"replay refused", Replay, false, ErrSealed, 0, "1:12"},
		{"replay refused in a dry run too", Replay, true, ErrSealed, 0, "1:12"},
		{"park", Park, false, nil, 5, "2 of them encrypted batches"},
		{"leave", Leave, false, nil, 0, "left on east"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			east, copier, pair := eastCluster(), &fakeCopier{}, &fakePair{}
			o := options(tc.choice, fakeFinder{tail: tail}, copier, pair, east, false, "billing")
			o.DryRun = tc.dry
			rep, err := Run(context.Background(), o, io.Discard)
			var ch *Changed
			if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) || errors.As(err, &ch) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if len(copier.copied) != tc.copied {
				t.Errorf("copied %d, want %d", len(copier.copied), tc.copied)
			}
			if rep.RPO.Sealed != 2 || rep.Stranded[0].Sealed != 2 || rep.Stranded[0].FirstSealed != "1:12" {
				t.Errorf("sealed: RPO %d, partition %d from %q; want 2, 2 from 1:12", rep.RPO.Sealed, rep.Stranded[0].Sealed, rep.Stranded[0].FirstSealed)
			}
			if !strings.Contains(rep.Tail, tc.tailSays) {
				t.Errorf("tail %q does not say %q", rep.Tail, tc.tailSays)
			}
			if tc.err != nil {
				if rep.Changed || len(pair.advanced) > 0 || east.moves > 0 || !strings.Contains(err.Error(), "p 1:12") ||
					!strings.Contains(rep.Next, "--park") || !strings.Contains(rep.Next, "--leave") {
					t.Errorf("refused: changed %v, cursor %v, moves %d, err %v, next %q", rep.Changed, pair.advanced, east.moves, err, rep.Next)
				}
			}
		})
	}
}
