package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// rd is a drain round of 1,000,000 messages: start-up s, then copy s.
func rd(arm string, round int, startup, copy float64) drainRound {
	s := time.Duration(startup * float64(time.Second))
	return drainRound{Arm: arm, Round: round, Msgs: 1_000_000, Startup: s, Dur: s + time.Duration(copy*float64(time.Second))}
}

// TestDrainRatios: one ratio per round pair, the sidecar's copy speed
// over the built-in's in the same round; start-up does not count, a
// round too short to time has none, leaked messages are not copied.
func TestDrainRatios(t *testing.T) {
	leaky := rd(armBuiltin, 2, 0.5, 8)
	leaky.Leaked = 200_000 // 800,000 copied in 8 s: 100,000 msg/s
	for _, tt := range []struct {
		name   string
		rounds []drainRound
		a, b   string
		want   []float64
	}{
		{"one pair", []drainRound{rd(armBuiltin, 0, 0.5, 10), rd(armSidecar, 0, 1.5, 5)}, armSidecar, armBuiltin, []float64{2}},
		{"start-up left out", []drainRound{rd(armBuiltin, 0, 0, 10), rd(armSidecar, 0, 30, 10)}, armSidecar, armBuiltin, []float64{1}},
		{"round order, arms in any order",
			[]drainRound{rd(armSidecar, 0, 1, 20), rd(armBuiltin, 0, 1, 10), rd(armBuiltin, 1, 1, 10), rd(armSidecar, 1, 1, 5)},
			armSidecar, armBuiltin, []float64{0.5, 2}},
		{"a round without its pair", []drainRound{rd(armBuiltin, 0, 1, 10), rd(armSidecar, 1, 1, 5)}, armSidecar, armBuiltin, nil},
		{"a copy too short to time", []drainRound{rd(armBuiltin, 0, 1, 0), rd(armSidecar, 0, 1, 5)}, armSidecar, armBuiltin, nil},
		{"leaked messages", []drainRound{leaky, rd(armSidecar, 2, 1, 5)}, armSidecar, armBuiltin, []float64{2}},
		{"versus", []drainRound{rd(armBuiltin, 0, 1, 10), rd(armSidecar, 0, 1, 5), rd(armVersus, 0, 1, 20)}, armSidecar, armVersus, []float64{4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &drainResult{Messages: 1_000_000, Partitions: 1, Rounds: tt.rounds}
			got := d.ratios(tt.a, tt.b)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("ratios = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRatioSpread: the median, minimum and maximum of the per-round
// ratios, and how the report writes them.
func TestRatioSpread(t *testing.T) {
	for _, tt := range []struct {
		xs          []float64
		med, lo, hi float64
		text        string
	}{
		{nil, 0, 0, 0, "—"},
		{[]float64{0.95}, 0.95, 0.95, 0.95, "0.95× (1 round)"},
		{[]float64{1.2, 0.11, 0.95}, 0.95, 0.11, 1.2, "0.95× (0.11–1.20×, 3 rounds)"},
		{[]float64{1.5, 1.0, 1.2, 1.4}, 1.3, 1.0, 1.5, "1.30× (1.00–1.50×, 4 rounds)"},
	} {
		s := ratioSpreadOf(tt.xs)
		if math.Abs(s.Median-tt.med) > 1e-9 || s.Min != tt.lo || s.Max != tt.hi || s.N != len(tt.xs) || s.String() != tt.text {
			t.Errorf("ratioSpreadOf(%v) = %+v %q, want median %v min %v max %v, %q", tt.xs, s, s.String(), tt.med, tt.lo, tt.hi, tt.text)
		}
	}
}

// TestFlagSlow: a round is slow when its copy, or its whole time from
// the start, is more than twice the median of its arm's rounds; the other
// arm's rounds are judged against their own median.
func TestFlagSlow(t *testing.T) {
	for _, tt := range []struct {
		name   string
		rounds []drainRound
		want   []string // a prefix of each round's Slow; "" for not slow
	}{
		{"steady", []drainRound{rd(armSidecar, 0, 1, 10), rd(armSidecar, 1, 1, 12), rd(armSidecar, 2, 1, 9)}, []string{"", "", ""}},
		{"a copy stall", []drainRound{rd(armSidecar, 0, 1, 10), rd(armSidecar, 1, 1, 89), rd(armSidecar, 2, 1, 11)},
			[]string{"", "copy 89.0 s, 8.1× its arm's median 11.0 s", ""}},
		{"exactly twice is not slow", []drainRound{rd(armSidecar, 0, 0, 10), rd(armSidecar, 1, 0, 20), rd(armSidecar, 2, 0, 10)}, []string{"", "", ""}},
		{"a start-up stall", []drainRound{rd(armSidecar, 0, 1, 10), rd(armSidecar, 1, 40, 10), rd(armSidecar, 2, 1, 10)},
			[]string{"", "start to last message 50.0 s, 4.5× its arm's median 11.0 s (start-up 40.0 s)", ""}},
		{"per arm", []drainRound{
			rd(armBuiltin, 0, 0, 20), rd(armSidecar, 0, 1, 10), rd(armBuiltin, 1, 0, 61), rd(armSidecar, 1, 1, 26),
			rd(armBuiltin, 2, 0, 21), rd(armSidecar, 2, 1, 12)},
			[]string{"", "", "copy 61.0 s, 2.9× its arm's median 21.0 s", "copy 26.0 s, 2.2× its arm's median 12.0 s", "", ""}},
		{"two rounds cannot be", []drainRound{rd(armSidecar, 0, 1, 10), rd(armSidecar, 1, 1, 100)}, []string{"", ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			flagSlow(tt.rounds)
			for i, x := range tt.rounds {
				if (tt.want[i] == "") != (x.Slow == "") || !strings.HasPrefix(x.Slow, tt.want[i]) {
					t.Errorf("round %d %s: Slow %q, want %q", x.Round+1, x.Arm, x.Slow, tt.want[i])
				}
			}
		})
	}
}

// TestDrainMarkdown renders drain rows without clusters: the summary's
// rows with the per-round ratios, the slow round with its iowait,
// publish latency and kept log, the targets and a round's row.
func TestDrainMarkdown(t *testing.T) {
	use := func(iowait float64) window {
		return window{Busy: 0.24, IOWait: iowait, Broker: map[string]time.Duration{"east": time.Second, "west": 2 * time.Second}}
	}
	rounds := []drainRound{
		rd(armBuiltin, 0, 0.5, 20), rd(armSidecar, 0, 1.1, 10),
		rd(armSidecar, 1, 1.2, 50), rd(armBuiltin, 1, 0.4, 25),
		rd(armBuiltin, 2, 0.5, 10), rd(armSidecar, 2, 1.0, 12.5),
	}
	for i := range rounds {
		rounds[i].Use = use(0.02)
		rounds[i].Publish = map[string]float64{"west": 3.25}
	}
	rounds[2].Use, rounds[2].Publish = use(0.31), map[string]float64{"east": 0.5, "west": 45.1}
	rounds[2].Kept, rounds[2].Log = "/tmp/slow/drain-d1p-1-1.log", "/tmp/x/drain-d1p-1-1.log"
	rounds[2].CPU, rounds[2].HWM = 2*time.Second, 60<<20
	d := &drainResult{Messages: 1_000_000, Partitions: 1, Rounds: rounds}
	flagSlow(d.Rounds)
	rep := &report{Date: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC), Machine: "test", Pulsar: "4.0.7", Sizes: quickSizes, Drain: []*drainResult{d}}
	md := rep.Markdown()
	for _, want := range []string{
		// copy speeds: built-in 50,000 / 40,000 / 100,000, sidecar 100,000 / 20,000 / 80,000 msg/s
		"| backlog drain, 1 partition, 1,000,000 messages | copy msg/s, first to last message on west (the replicator's speed) | 50,000 | 80,000 | | 0.80× (0.50–2.00×, 3 rounds) | | every round ≥ 1.0×, median ≥ 1.2× built-in |",
		"| backlog drain, 1 partition, 1,000,000 messages | start-up s, release or process start to the first message on west | 0.5 | 1.1 | | | | |",
		"| backlog drain, 1 partition, 1,000,000 messages | seconds, release or process start to the last message (start-up included; ratio of the medians, as speed) | 20.5 | 13.5 | | 1.52× | | |",
		"- backlog drain, 1 partition, 1,000,000 messages, round 2, sidecar: copy 50.0 s, 4.0× its arm's median 12.5 s; machine 24 % busy, iowait 31 %; publish latency east 0.5 ms, west 45.1 ms (the round's built-in: copy 25.0 s, iowait 2 %, publish latency east —, west 3.2 ms); sidecar log kept: `/tmp/slow/drain-d1p-1-1.log`.",
		"- backlog drain, 1 partition, every round ≥ 1.0× built-in (copy speed, per round pair): lowest 0.50×: **short**",
		"- backlog drain, 1 partition, median of the round pairs ≥ 1.2× built-in (copy speed): 0.80× (0.50–2.00×, 3 rounds): **short**",
		"- backlog drain, 1 partition, no sidecar round more than 2× slower than its arm's median: 1 of 3: **short**",
		"| 2 | sidecar | 1.20 | 50.00 | 20,000 | 0.50× | 51.20 | 0 | 2.00 | 60 | 1.00 | 2.00 | 24 % | 31 % | east 0.5 ms, west 45.1 ms | **slow**: copy 50.0 s, 4.0× its arm's median 12.5 s |",
		"| 3 | built-in | 0.50 | 10.00 | 100,000 |  | 10.50 | 0 |  |  | 1.00 | 2.00 | 24 % | 2 % | east —, west 3.2 ms |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
	if strings.Contains(md, sustainedNote) {
		t.Error("the throughput rows' label appears without throughput rows")
	}

	// Steady rounds: none flagged, and -versus adds its ratios.
	steady := &drainResult{Messages: 1_000_000, Partitions: 4, Rounds: []drainRound{
		rd(armBuiltin, 0, 0.5, 8), rd(armSidecar, 0, 1, 4), rd(armVersus, 0, 1, 8),
	}}
	flagSlow(steady.Rounds)
	md = (&report{Sizes: quickSizes, Drain: []*drainResult{steady}}).Markdown()
	for _, want := range []string{
		"Slow drain rounds: none took more than twice its arm's median.",
		"| copy msg/s, the -versus binary (sidecar-b) in the sidecar's column; ratio: sidecar-b / built-in | 125,000 | 125,000 | | 1.00× (1 round) |",
		"| copy, sidecar / sidecar-b per round | | | | 2.00× (1 round) |",
		"- backlog drain, 4 partitions, median of the round pairs ≥ 1.2× built-in (copy speed): 2.00× (1 round): met",
		"| 1 | sidecar-b | 1.00 | 8.00 | 125,000 | 1.00× |",
		"backlog drain, 4 partitions, 1,000,000 messages: the built-in's copy lasted less than 10s in 1 of 1 round(s); warm-up weighs in them (raise -drain-messages).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
	if strings.Contains(md, "every round ≥ 1.0× built-in (copy speed") {
		t.Error("the every-round goal is the 1-partition row's only")
	}
}
