package drill

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestRPO: the RPO sums what each partition did not prove in messages and
// entries, and spans, in seconds of traffic, from the verified-through
// entry's publish time to the last unproven one's (from the first
// unproven one's, and only "at least", when nothing read was proven).
func TestRPO(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	since := t0.Add(-time.Minute)
	tests := []struct {
		name   string
		proofs []Proof
		want   RPO
	}{
		{"a clean copy", []Proof{{Partition: "p0", Through: at(900)}},
			RPO{Partitions: []PartitionRPO{{Partition: "p0"}}}},
		{"an empty partition", []Proof{{Partition: "p0"}},
			RPO{Partitions: []PartitionRPO{{Partition: "p0"}}}},
		{"the tail not yet copied", []Proof{{Partition: "p0", Through: at(1000), Entries: 3, Messages: 25, First: at(1100), Last: at(3500)}},
			RPO{Messages: 25, Entries: 3, Seconds: 2.5, Partitions: []PartitionRPO{{"p0", 25, 3, 2.5}}}},
		{"nothing proven: from the first unproven, at least", []Proof{{Partition: "p0", Entries: 2, Messages: 200, First: at(1000), Last: at(2750)}},
			RPO{Messages: 200, Entries: 2, Seconds: 1.75, AtLeast: true, Partitions: []PartitionRPO{{"p0", 200, 2, 1.75}}}},
		{"partitions add up; seconds are the longest", []Proof{
			{Partition: "p0", Through: at(1000), Entries: 1, Messages: 10, First: at(1200), Last: at(1200)},
			{Partition: "p1", Through: at(500), Entries: 4, Messages: 40, First: at(600), Last: at(2500), Faults: 1},
			{Partition: "p2", Through: at(2600)},
		}, RPO{Messages: 50, Entries: 5, Seconds: 2, Faults: 1,
			Partitions: []PartitionRPO{{"p0", 10, 1, 0.2}, {"p1", 40, 4, 2}, {"p2", 0, 0, 0}}}},
		// A copy under a marker key the config no longer has holds the
		// entry: not lost, counted apart; and nothing proven before it.
		{"copies held but unproven are not in it", []Proof{
			{Partition: "p0", Unproven: 50},
			{Partition: "p1", Through: at(500), Unproven: 3, Entries: 1, Messages: 10, First: at(1500), Last: at(1500), Faults: 1},
		}, RPO{Messages: 10, Entries: 1, Seconds: 1, Unproven: 53, Faults: 1,
			Partitions: []PartitionRPO{{"p0", 0, 0, 0}, {"p1", 10, 1, 1}}}},
		{"producers' clocks: never below 0", []Proof{{Partition: "p0", Through: at(2000), Entries: 1, Messages: 1, First: at(1500), Last: at(1500)}},
			RPO{Messages: 1, Entries: 1, Partitions: []PartitionRPO{{"p0", 1, 1, 0}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Measured, tt.want.MarkedAfter, tt.want.Since = true, 0.25, "2026-12-06T02:59:00Z"
			if got := rpoOf(tt.proofs, since, 250*time.Millisecond); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rpoOf = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

// fakeProver marks after markTakes, or fails; Prove returns proofs.
type fakeProver struct {
	markTakes time.Duration
	markErr   error
	proveErr  error
	proofs    []Proof
	marked    time.Time
	since     time.Time
}

func (f *fakeProver) Mark(ctx context.Context) error {
	time.Sleep(f.markTakes)
	f.marked = time.Now()
	return f.markErr
}

func (f *fakeProver) Prove(_ context.Context, since time.Time) ([]Proof, error) {
	f.since = since
	return f.proofs, f.proveErr
}

func (f *fakeProver) Close() {}

// TestAtSwitch: the RTO runs from the switch, to the reading that saw the
// subscription in To in step, however long marking the ends for the RPO
// takes (it runs beside the wait); a wait given up is not reached, and
// reports how long it waited.
func TestAtSwitch(t *testing.T) {
	one := func(v int64) map[string]int64 { return map[string]int64{"p0": v} }
	tests := []struct {
		name      string
		before    time.Duration // the switch lies this long before the call
		markTakes time.Duration
		inStepAt  time.Duration // from the switch; 0: never
		movesAt   time.Duration // the lag shrinks but never reaches 0 (0: never)
		limit     time.Duration
		want      RTO
		slack     time.Duration // the reading period
	}{
		{"in step, a slow mark", 0, 2 * time.Second, time.Second, 0, waitLimit,
			RTO{Reached: true, Seconds: 1}, 200 * time.Millisecond},
		{"in step, called late", 300 * time.Millisecond, 0, time.Second, 0, waitLimit,
			RTO{Reached: true, Seconds: 1}, 200 * time.Millisecond},
		{"as close as it gets", 0, 2 * time.Second, 0, 1500 * time.Millisecond, waitLimit,
			RTO{Reached: true, Seconds: 1.5, Trailing: 4}, 200 * time.Millisecond},
		{"never moved: not reached", 0, 0, 0, 0, waitLimit,
			RTO{Seconds: settleUnmoved.Seconds(), Trailing: 51}, 200 * time.Millisecond},
		{"not within a shorter wait", 0, 0, 20 * time.Second, 0, 5 * time.Second,
			RTO{Seconds: 5, Trailing: 51}, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				switched := time.Now()
				time.Sleep(tt.before)
				sample := func() (map[string]int64, map[string]int64, bool) {
					since := time.Since(switched)
					switch {
					case tt.inStepAt > 0 && since >= tt.inStepAt:
						return one(10), one(10), true
					case tt.movesAt > 0 && since >= tt.movesAt:
						return one(10), one(14), true
					}
					return one(10), one(61), true
				}
				p := &fakeProver{markTakes: tt.markTakes}
				st, m := atSwitch(t.Context(), switched, p, sample, tt.limit, "app", func(string, ...any) {})
				if m.err != nil {
					t.Fatal(m.err)
				}
				if want := tt.before + tt.markTakes; p.marked.Sub(switched) != want || m.after != want {
					t.Errorf("marked %v after the switch, reported %v, want %v", p.marked.Sub(switched), m.after, want)
				}
				got := rtoOf(st)
				if got.Reached != tt.want.Reached || got.Trailing != tt.want.Trailing ||
					got.Seconds < tt.want.Seconds || got.Seconds > tt.want.Seconds+tt.slack.Seconds() {
					t.Errorf("RTO %+v, want %+v (seconds up to %v more)", got, tt.want, tt.slack)
				}
			})
		})
	}
}

// TestMeasureRPO: the RPO is proven from the drill's range start, and
// reported as not measured, with the reason, when the verifier is
// missing or failed; the drill goes on either way.
func TestMeasureRPO(t *testing.T) {
	since := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	proofs := []Proof{{Partition: "p0", Through: since, Entries: 1, Messages: 7, First: since.Add(time.Second), Last: since.Add(time.Second)}}
	tests := []struct {
		name    string
		p       *fakeProver
		markErr error
		want    string // in RPO.Error; "": measured
	}{
		{"measured", &fakeProver{proofs: proofs}, nil, ""},
		{"no verifier", nil, nil, "no verifier"},
		{"the mark failed", &fakeProver{proofs: proofs}, errors.New("east: last entry: closed"), "east: last entry: closed"},
		{"the walk failed", &fakeProver{proveErr: errors.New("no entry for 30s")}, nil, "no entry for 30s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Prover
			if tt.p != nil {
				p = tt.p
			}
			var rep Report
			var said strings.Builder
			measureRPO(t.Context(), &rep, p, mark{after: 100 * time.Millisecond, err: tt.markErr}, since,
				func(f string, a ...any) { io.WriteString(&said, f) })
			if tt.want == "" {
				if !rep.RPO.Measured || rep.RPO.Messages != 7 || rep.RPO.Seconds != 1 || rep.RPO.MarkedAfter != 0.1 || !tt.p.since.Equal(since) {
					t.Errorf("RPO %+v (proven from %v), want 7 messages and 1 s proven from %v", rep.RPO, tt.p.since, since)
				}
				return
			}
			if rep.RPO.Measured || rep.RPO.Error != tt.want || !strings.Contains(said.String(), "RPO not measured") {
				t.Errorf("RPO %+v, said %q; want not measured: %q", rep.RPO, said.String(), tt.want)
			}
		})
	}
}
