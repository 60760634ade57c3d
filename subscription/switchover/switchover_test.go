package switchover

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

func pos(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }

func TestParseAcked(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Range
		err  bool
	}{
		{"", nil, false},
		{"[]", nil, false},
		{"[(5:10..5:12]]", []Range{{pos(5, 10), pos(5, 12)}}, false},
		{"[(5:10..5:12], (5:15..6:2]]", []Range{{pos(5, 10), pos(5, 12)}, {pos(5, 15), pos(6, 2)}}, false},
		{"[(6:-1..6:0]]", []Range{{pos(6, -1), pos(6, 0)}}, false},
		{"(5:10..5:12]", nil, true},
		{"[(5:10..5:12)]", nil, true},
		{"[(5:12..5:10]]", nil, true},
		{"[(5:x..5:12]]", nil, true},
	} {
		got, err := ParseAcked(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("ParseAcked(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestConsumed(t *testing.T) {
	s := State{MarkDelete: pos(10, 6), Acked: []Range{{pos(10, 7), pos(10, 9)}, {pos(10, 12), pos(11, 1)}}}
	for _, tc := range []struct {
		p    marker.Position
		want bool
	}{
		{pos(9, 100), true}, {pos(10, 6), true}, {pos(10, 7), false}, {pos(10, 8), true}, {pos(10, 9), true},
		{pos(10, 10), false}, {pos(10, 12), false}, {pos(10, 13), true}, {pos(11, 0), true}, {pos(11, 1), true},
		{pos(11, 2), false}, {marker.Position{Ledger: 10, Entry: 8, Batch: 3}, true},
	} {
		if got := s.Consumed(tc.p); got != tc.want {
			t.Errorf("Consumed(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// The source's entries 10:0..10:20 are copied to 50:100..50:120; the
// source consumed through 10:6 and 8, 9, 11, 12, 13 past it.
var (
	srcState = State{MarkDelete: pos(10, 6), Acked: []Range{{pos(10, 7), pos(10, 9)}, {pos(10, 10), pos(10, 13)}}}
	heldBack = []int64{7, 10, 14, 15, 16, 17, 18, 19, 20}
)

func copies(src, tgtMD marker.Position) *Copies {
	c := NewCopies(src, tgtMD)
	for e := int64(0); e <= 20; e++ {
		c.Add(pos(10, e), pos(50, 100+e))
	}
	return c
}

func TestPlanAndCompare(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tgt         State
		wantMD      marker.Position
		hasMD       bool
		wantInd     []marker.Position
		refused     bool
		before      Comparison
		afterAgain  int
		afterMissed int
	}{
		{
			name: "behind", tgt: State{MarkDelete: pos(50, 103)}, wantMD: pos(50, 106), hasMD: true,
			wantInd: []marker.Position{pos(50, 108), pos(50, 109), pos(50, 111), pos(50, 112), pos(50, 113)},
			before:  Comparison{Again: 8, FirstAgain: "50:104"},
		},
		{
			name: "at the mark-delete position, holes missing", tgt: State{MarkDelete: pos(50, 106)},
			wantInd: []marker.Position{pos(50, 108), pos(50, 109), pos(50, 111), pos(50, 112), pos(50, 113)},
			before:  Comparison{Again: 5, FirstAgain: "50:108"},
		},
		{
			name: "some holes there", tgt: State{MarkDelete: pos(50, 106), Acked: []Range{{pos(50, 110), pos(50, 112)}}},
			wantInd: []marker.Position{pos(50, 108), pos(50, 109), pos(50, 113)},
			before:  Comparison{Again: 3, FirstAgain: "50:108"},
		},
		{
			name: "in step", tgt: State{MarkDelete: pos(50, 106), Acked: []Range{{pos(50, 107), pos(50, 109)}, {pos(50, 110), pos(50, 113)}}},
		},
		{
			name: "ahead: a held-back message consumed", tgt: State{MarkDelete: pos(50, 107)}, refused: true,
			before: Comparison{Again: 5, FirstAgain: "50:108", Missed: 1, FirstMissed: "50:107"}, afterAgain: 5, afterMissed: 1,
		},
		{
			name: "no subscription on the target", tgt: State{MarkDelete: nothing}, wantMD: pos(50, 106), hasMD: true,
			wantInd: []marker.Position{pos(50, 108), pos(50, 109), pos(50, 111), pos(50, 112), pos(50, 113)},
			before:  Comparison{Again: 12, FirstAgain: "50:100"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := copies(srcState.MarkDelete, tc.tgt.MarkDelete)
			if got := c.Compare(srcState, tc.tgt); got != tc.before {
				t.Errorf("before: %+v, want %+v", got, tc.before)
			}
			p := c.PlanMove(srcState, tc.tgt)
			if (p.Refused != "") != tc.refused {
				t.Fatalf("refused %q, want %v", p.Refused, tc.refused)
			}
			if p.HasMarkDelete != tc.hasMD || (tc.hasMD && p.MarkDelete != tc.wantMD) || !slices.Equal(p.Individually, tc.wantInd) {
				t.Errorf("plan %+v, want mark-delete %v (%v), individually %v", p, tc.wantMD, tc.hasMD, tc.wantInd)
			}
			after := tc.tgt
			if !tc.refused {
				after = predict(tc.tgt, p)
			}
			if got := c.Compare(srcState, after); got.Again != tc.afterAgain || got.Missed != tc.afterMissed {
				t.Errorf("after: %+v, want again %d, missed %d", got, tc.afterAgain, tc.afterMissed)
			}
			// What a consumer on the target receives after the plan: the
			// copies of exactly the held-back entries.
			if !tc.refused {
				var got []int64
				for e := int64(0); e <= 20; e++ {
					if !after.Consumed(pos(50, 100+e)) {
						got = append(got, e)
					}
				}
				if !slices.Equal(got, heldBack) {
					t.Errorf("a consumer on the target receives the copies of %v, want %v", got, heldBack)
				}
			}
		})
	}
}

// Copies keeps only what the subscription's two positions leave open.
func TestCopiesBounded(t *testing.T) {
	c := copies(pos(10, 6), pos(50, 103))
	if c.last != (Copy{pos(10, 6), pos(50, 106)}) || !c.hasMD {
		t.Errorf("last copy at or before the mark-delete position %+v", c.last)
	}
	if len(c.past) != 17 { // 10:4..10:20
		t.Errorf("%d copies kept, want 17", len(c.past))
	}
	c.Add(pos(10, 15), pos(50, 130)) // a second copy: left out
	if len(c.past) != 17 {
		t.Errorf("a second copy was kept")
	}
}

// fakeCluster is a cluster with one partition "p" whose subscriptions are
// states; the target's move applies plans to them as the broker would.
type fakeCluster struct {
	mu        sync.Mutex
	subs      map[string]Sub
	producers []string
	// noHoles: the mover leaves the individual acknowledgements out (a
	// hand-break the comparison must catch).
	noHoles bool
	moves   int
}

func (f *fakeCluster) Subscription(_ context.Context, _, sub string) (Sub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subs[sub], nil
}

func (f *fakeCluster) Producers(context.Context, string) ([]string, error) {
	return f.producers, nil
}

func (f *fakeCluster) Move(_ context.Context, _, sub string, md marker.Position, ind []marker.Position) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves++
	s := f.subs[sub]
	if !s.Exists {
		s = Sub{Exists: true, State: State{MarkDelete: pos(50, 99)}}
	}
	if f.noHoles {
		ind = nil
	}
	s.State = predict(s.State, Plan{MarkDelete: md, HasMarkDelete: true, Individually: ind})
	f.subs[sub] = s
	return nil
}

type fakeProver struct {
	proof Proof
	err   error
}

func (f fakeProver) Prove(_ context.Context, copied func(string, marker.Position, marker.Position)) (Proof, error) {
	for e := int64(0); e <= 20; e++ {
		copied("p", pos(10, e), pos(50, 100+e))
	}
	return f.proof, f.err
}

func TestRun(t *testing.T) {
	src := func(consumers int) *fakeCluster {
		return &fakeCluster{subs: map[string]Sub{"app": {Exists: true, State: srcState, Type: "Shared", Consumers: consumers}},
			producers: []string{marker.MarkerProducerName("east", "west")}}
	}
	tgt := func() *fakeCluster {
		return &fakeCluster{subs: map[string]Sub{"app": {Exists: true, State: State{MarkDelete: pos(50, 103)}},
			"other": {Exists: true, State: State{MarkDelete: pos(50, 100)}}}}
	}
	complete := fakeProver{proof: Proof{Complete: true}}
	for _, tc := range []struct {
		name      string
		src, tgt  *fakeCluster
		prover    Prover
		dry       bool
		err       error
		moves     int
		again     int
		ok        bool
		outcome   string
		producers []string
	}{
		{name: "moved", src: src(0), tgt: tgt(), prover: complete, moves: 1, ok: true, outcome: Moved},
		{name: "dry run", src: src(0), tgt: tgt(), prover: complete, dry: true, ok: true, outcome: Planned},
		{name: "holes left out", src: src(0), tgt: func() *fakeCluster { f := tgt(); f.noHoles = true; return f }(),
			prover: complete, moves: 1, again: 5, outcome: Moved},
		{name: "no such subscription on the source", src: &fakeCluster{subs: map[string]Sub{}}, tgt: tgt(), prover: complete, outcome: NoSource},
		{name: "producer attached", src: src(0), tgt: tgt(), prover: complete, producers: []string{"orders-app"}, err: ErrNotQuiet},
		{name: "consumer attached on the source", src: src(1), tgt: tgt(), prover: complete, err: ErrConsumers},
		{name: "copy not complete", src: src(0), tgt: tgt(), prover: fakeProver{proof: Proof{Detail: "3 not yet copied"}}, err: ErrNotProven},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.producers != nil {
				tc.src.producers = append(tc.src.producers, tc.producers...)
			}
			rep, err := Run(context.Background(), Options{Topic: "t", From: "east", To: "west", Partitions: []string{"p"},
				Subscriptions: []string{"app"}, Source: tc.src, Target: tc.tgt, Mover: tc.tgt, Prover: tc.prover, DryRun: tc.dry}, io.Discard)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if tc.tgt.moves != tc.moves {
				t.Errorf("%d moves, want %d", tc.tgt.moves, tc.moves)
			}
			if tc.tgt.subs["other"].State.MarkDelete != pos(50, 100) {
				t.Errorf("a subscription not named was moved: %+v", tc.tgt.subs["other"])
			}
			if err != nil {
				if rep.Next == "" {
					t.Error("no next step said")
				}
				return
			}
			if rep.Again != tc.again || rep.Missed != 0 || rep.OK() != tc.ok || len(rep.Results) != 1 || rep.Results[0].Outcome != tc.outcome {
				t.Errorf("report %+v", rep)
			}
			if !strings.Contains(rep.Next, "west") {
				t.Errorf("next %q", rep.Next)
			}
		})
	}
}
