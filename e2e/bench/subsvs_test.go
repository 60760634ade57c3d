package main

import (
	"strings"
	"testing"
	"time"
)

// svResult is a side-by-side result without clusters: the load runs 10 s
// (warm-up 6 s), the tail 20 s; samples every second with the built-in's
// and the sidecar's excess from f.
func svResult(f func(at time.Duration) (bi, sc int64)) *subsvsResult {
	r := &subsvsResult{Type: "exclusive", Partitions: 4, Rate: 100, Warm: 6 * time.Second, Load: 10 * time.Second, Tail: 20 * time.Second,
		Window: 31 * time.Second,
		Arms: []*svArm{
			{Name: armBuiltin, Data: 1000, In: map[string]int64{"east": 1200, "west": 1300}, AppData: 1000},
			{Name: armSidecar, Data: 1000, In: map[string]int64{"east": 1500, "west": 1500}, AppData: 1000, AppMark: 500},
		},
		Admin: map[string]int64{"east": 6, "west": 4}, Startup: map[string]int64{},
		Paths: map[string]map[string]int64{"east": {"GET x": 6}, "west": {"GET y": 4}},
	}
	for at := time.Duration(0); at <= r.Load+r.Tail; at += time.Second {
		bi, sc := f(at)
		r.Samples = append(r.Samples, svSample{At: at, Excess: map[string]int64{armBuiltin: bi, armSidecar: sc}})
	}
	return r
}

// TestSubsvsFigures checks the medians, the after-load picks, the ratios
// and the verdicts of the side-by-side row.
func TestSubsvsFigures(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		excess                  func(at time.Duration) (int64, int64)
		during, after, tail     [2]int64 // built-in, sidecar
		ratioDuring, ratioAfter string
		metDuring, metAfter     bool
	}{
		{
			name: "sidecar level during, tail never brought in",
			excess: func(at time.Duration) (int64, int64) {
				switch {
				case at < 6*time.Second:
					return 1000, 1000 // warm-up: not counted
				case at <= 10*time.Second:
					return 100, 100
				case at < 15*time.Second:
					return 50, 100
				}
				return 10, 100
			},
			during: [2]int64{100, 100}, after: [2]int64{10, 100}, tail: [2]int64{10, 100},
			ratioDuring: "1.00×", ratioAfter: "10.00×", metDuring: true, metAfter: false,
		},
		{
			name: "sidecar ahead, both at zero after",
			excess: func(at time.Duration) (int64, int64) {
				if at <= 10*time.Second {
					return 200, 100
				}
				return 0, 0
			},
			during: [2]int64{200, 100}, after: [2]int64{0, 0}, tail: [2]int64{0, 0},
			ratioDuring: "0.50×", ratioAfter: "1.00×", metDuring: true, metAfter: true,
		},
		{
			name: "built-in at zero, sidecar not",
			excess: func(at time.Duration) (int64, int64) {
				if at <= 10*time.Second {
					return 50, 150
				}
				return 0, 3
			},
			during: [2]int64{50, 150}, after: [2]int64{0, 3}, tail: [2]int64{0, 3},
			ratioDuring: "3.00×", ratioAfter: "—", metDuring: false, metAfter: false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := svResult(tc.excess)
			for i, arm := range []string{armBuiltin, armSidecar} {
				if got, ok := r.excessDuring(arm); !ok || got != float64(tc.during[i]) {
					t.Errorf("%s: excess during = %v, %v; want %d", arm, got, ok, tc.during[i])
				}
				if got, ok := r.excessAt(arm, svAfter); !ok || got != tc.after[i] {
					t.Errorf("%s: excess %s after = %v, %v; want %d", arm, svAfter, got, ok, tc.after[i])
				}
				if got, ok := r.excessAt(arm, r.Tail); !ok || got != tc.tail[i] {
					t.Errorf("%s: excess %s after = %v, %v; want %d", arm, r.Tail, got, ok, tc.tail[i])
				}
			}
			if got := exRatio(float64(tc.during[1]), float64(tc.during[0])); got != tc.ratioDuring {
				t.Errorf("ratio during = %s, want %s", got, tc.ratioDuring)
			}
			if got := exRatio(float64(tc.after[1]), float64(tc.after[0])); got != tc.ratioAfter {
				t.Errorf("ratio after = %s, want %s", got, tc.ratioAfter)
			}
			var verdicts []bool
			r.targets(func(ok bool, format string, args ...any) { verdicts = append(verdicts, ok) })
			if len(verdicts) != 3 {
				t.Fatalf("%d target lines, want 3", len(verdicts))
			}
			// 10 admin requests over 1,000 messages: 0.01, within 0.02.
			if want := []bool{true, tc.metDuring, tc.metAfter}; verdicts[0] != want[0] || verdicts[1] != want[1] || verdicts[2] != want[2] {
				t.Errorf("verdicts %v, want %v", verdicts, want)
			}
		})
	}
}

// TestSubsvsMarkdown checks the row's lines in the report, and that an
// arm whose samples are all missing shows no figure rather than zero.
func TestSubsvsMarkdown(t *testing.T) {
	r := svResult(func(time.Duration) (int64, int64) { return 100, 120 })
	rep := &report{Date: time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC), Machine: "test", Pulsar: "4.0.7", Sizes: quickSizes, Quick: true, SubsVs: []*subsvsResult{r}}
	md := rep.Markdown()
	for _, want := range []string{
		"| excess during the load, median | 100 (1.00 s of traffic) | 120 (1.20 s of traffic) | 1.20× | ≤ 1.0× built-in |",
		"| excess 5s after the load | 100 (1.00 s of traffic) | 120 (1.20 s of traffic) | 1.20× | ≤ 1.0× built-in |",
		"| admin requests per replicated message (east + west) | 0 | 0.010 (6 + 4 over 31s, 1,000 messages) | | ≤ 0.02 |",
		"| marker entries written per data entry, east / west | 0.200 / 0.300 | 0.500 / 0.500 | | |",
		"| markers a plain consumer on east sees (beside data messages) | 0 (1,000) | 500 (1,000) | | |",
		"excess 5s after the load ≤ 1.0× built-in: 1.20× (120 vs 100): **short**",
		"| east | 6 | 0.006 | `GET x` |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for i := range r.Samples {
		delete(r.Samples[i].Excess, armSidecar)
	}
	md = r.markdown()
	if !strings.Contains(md, "| excess during the load, median | 100 (1.00 s of traffic) | — |") {
		t.Errorf("a sidecar without samples should show —:\n%s", md)
	}
}
