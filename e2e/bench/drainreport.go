package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The drain rows' arithmetic and markdown: pure functions of the rounds,
// tested without clusters (drainreport_test.go).

// minDrainCopy is how long a built-in copy should last at least, so that
// warm-up (JIT, caches, the first ledger reads) weighs little in it.
const minDrainCopy = 10 * time.Second

// ratioSpread is the median, minimum and maximum of a set of ratios.
type ratioSpread struct {
	Median, Min, Max float64
	N                int
}

func ratioSpreadOf(xs []float64) ratioSpread {
	if len(xs) == 0 {
		return ratioSpread{}
	}
	return ratioSpread{Median: median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// String is "1.05× (0.95–1.20×, 3 rounds)", or "—" for no ratio.
func (s ratioSpread) String() string {
	switch s.N {
	case 0:
		return "—"
	case 1:
		return fmt.Sprintf("%.2f× (1 round)", s.Median)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f×, %d rounds)", s.Median, s.Min, s.Max, s.N)
}

// ratios is, for every round in which arms a and b both copied, a's copy
// speed over b's: one ratio per round pair, in round order. A round whose
// copy was too short to time (rate 0) has none.
func (d *drainResult) ratios(a, b string) []float64 {
	by := map[string]map[int]float64{a: {}, b: {}}
	for _, x := range d.Rounds {
		if m, ok := by[x.Arm]; ok && x.rate() > 0 {
			m[x.Round] = x.rate()
		}
	}
	var out []float64
	for r := range d.rounds() {
		ra, oka := by[a][r]
		rb, okb := by[b][r]
		if oka && okb {
			out = append(out, ra/rb)
		}
	}
	return out
}

// rounds is the number of rounds: one more than the highest round index.
func (d *drainResult) rounds() int {
	n := 0
	for _, x := range d.Rounds {
		n = max(n, x.Round+1)
	}
	return n
}

// median is the median over arm's rounds of f.
func (d *drainResult) median(arm string, f func(drainRound) float64) float64 {
	var xs []float64
	for _, x := range d.Rounds {
		if x.Arm == arm {
			xs = append(xs, f(x))
		}
	}
	return median(xs)
}

func (d *drainResult) has(arm string) bool {
	return slices.ContainsFunc(d.Rounds, func(x drainRound) bool { return x.Arm == arm })
}

func copySeconds(x drainRound) float64    { return x.copyTime().Seconds() }
func startupSeconds(x drainRound) float64 { return x.Startup.Seconds() }
func totalSeconds(x drainRound) float64   { return x.Dur.Seconds() }

// flagSlow marks every round that took more than twice the median of its
// arm's rounds (its copy, or else its whole time from the release: a stall
// before the first message shows there) and says by how much. With fewer
// than three rounds of an arm no round can be: the median of two is their
// mean.
func flagSlow(rounds []drainRound) {
	copies, totals := map[string][]float64{}, map[string][]float64{}
	for _, x := range rounds {
		copies[x.Arm] = append(copies[x.Arm], copySeconds(x))
		totals[x.Arm] = append(totals[x.Arm], totalSeconds(x))
	}
	for i := range rounds {
		x := &rounds[i]
		mc, mt := median(copies[x.Arm]), median(totals[x.Arm])
		c, t := copySeconds(*x), totalSeconds(*x)
		switch {
		case mc > 0 && c > 2*mc:
			x.Slow = fmt.Sprintf("copy %.1f s, %.1f× its arm's median %.1f s", c, c/mc, mc)
		case mt > 0 && t > 2*mt:
			x.Slow = fmt.Sprintf("start to last message %.1f s, %.1f× its arm's median %.1f s (start-up %.1f s)", t, t/mt, mt, x.Startup.Seconds())
		default:
			x.Slow = ""
		}
	}
}

// shortCopies counts the built-in's rounds whose copy lasted less than
// minDrainCopy.
func (d *drainResult) shortCopies() int {
	n := 0
	for _, x := range d.Rounds {
		if x.Arm == armBuiltin && x.copyTime() < minDrainCopy {
			n++
		}
	}
	return n
}

// name is the workload's name in the report.
func (d *drainResult) name() string {
	return fmt.Sprintf("backlog drain, %d partition%s, %s messages", d.Partitions, plural(d.Partitions), num(float64(d.Messages)))
}

// summaryRows are the drain's rows of the summary table: the copy speed
// (the replicator's), the start-up and the whole time, per arm; the ratio
// column of the copy is the median of the per-round ratios with their
// minimum and maximum, not a ratio of medians.
func (d *drainResult) summaryRows() string {
	var b strings.Builder
	w := d.name()
	target := "median ≥ 1.2× built-in"
	if d.Partitions == 1 {
		target = "every round ≥ 1.0×, median ≥ 1.2× built-in"
	}
	rate := func(x drainRound) float64 { return x.rate() }
	bi, sc := d.median(armBuiltin, rate), d.median(armSidecar, rate)
	fmt.Fprintf(&b, "| %s | copy msg/s, first to last message on west (the replicator's speed) | %s | %s | | %s | | %s |\n",
		w, num(bi), num(sc), ratioSpreadOf(d.ratios(armSidecar, armBuiltin)), target)
	fmt.Fprintf(&b, "| %s | start-up s, release or process start to the first message on west | %.1f | %.1f | | | | |\n",
		w, d.median(armBuiltin, startupSeconds), d.median(armSidecar, startupSeconds))
	tb, ts := d.median(armBuiltin, totalSeconds), d.median(armSidecar, totalSeconds)
	fmt.Fprintf(&b, "| %s | seconds, release or process start to the last message (start-up included; ratio of the medians, as speed) | %.1f | %.1f | | %s | | |\n",
		w, tb, ts, ratio(tb, ts))
	if d.has(armVersus) {
		fmt.Fprintf(&b, "| %s | copy msg/s, the -versus binary (sidecar-b) in the sidecar's column; ratio: sidecar-b / built-in | %s | %s | | %s | | |\n",
			w, num(bi), num(d.median(armVersus, rate)), ratioSpreadOf(d.ratios(armVersus, armBuiltin)))
		fmt.Fprintf(&b, "| %s | copy, sidecar / sidecar-b per round | | | | %s | | |\n", w, ratioSpreadOf(d.ratios(armSidecar, armVersus)))
	}
	return b.String()
}

// drainNotes follow the summary table: built-in copies too short to leave
// warm-up behind, and every slow round with what the machine and the
// brokers did over it.
func drainNotes(ds []*drainResult) string {
	var b strings.Builder
	for _, d := range ds {
		if n := d.shortCopies(); n > 0 {
			fmt.Fprintf(&b, "\n%s: the built-in's copy lasted less than %s in %d of %d round(s); warm-up weighs in them (raise -drain-messages).\n",
				d.name(), minDrainCopy, n, d.rounds())
		}
	}
	if len(ds) == 0 {
		return b.String()
	}
	var slow []string
	for _, d := range ds {
		for _, x := range d.Rounds {
			if x.Slow != "" {
				slow = append(slow, slowLine(d, x))
			}
		}
	}
	if len(slow) == 0 {
		b.WriteString("\nSlow drain rounds: none took more than twice its arm's median.\n")
		return b.String()
	}
	b.WriteString("\nSlow drain rounds (more than twice its arm's median; iowait: share of the cores idle with a disk request outstanding, /proc/stat; publish latency: each broker's mean over the round, pulsar_broker_publish_latency, which holds the bookie's journal and ledger writes):\n\n")
	for _, s := range slow {
		b.WriteString(s)
	}
	return b.String()
}

// slowLine describes one slow round, with the other arms' rounds of the
// same round for comparison.
func slowLine(d *drainResult, x drainRound) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- %s, round %d, %s: %s; machine %.0f %% busy, iowait %.0f %%; publish latency %s",
		d.name(), x.Round+1, x.Arm, x.Slow, 100*x.Use.Busy, 100*x.Use.IOWait, pubLat(x.Publish))
	for _, y := range d.Rounds {
		if y.Round == x.Round && y.Arm != x.Arm {
			fmt.Fprintf(&b, " (the round's %s: copy %.1f s, iowait %.0f %%, publish latency %s)", y.Arm, copySeconds(y), 100*y.Use.IOWait, pubLat(y.Publish))
		}
	}
	switch {
	case x.Kept != "":
		fmt.Fprintf(&b, "; sidecar log kept: `%s`", x.Kept)
	case x.Log != "":
		b.WriteString("; sidecar log not kept (see the run's output)")
	}
	b.WriteString(".\n")
	return b.String()
}

// pubLat is "east 1.2 ms, west 3.4 ms", a broker with no publish "—".
func pubLat(m map[string]float64) string {
	var xs []string
	for _, c := range []string{"east", "west"} {
		if v, ok := m[c]; ok {
			xs = append(xs, fmt.Sprintf("%s %.1f ms", c, v))
		} else {
			xs = append(xs, c+" —")
		}
	}
	return strings.Join(xs, ", ")
}

// targets are issue 37's goals for the drain: ratios per round pair.
func (d *drainResult) targets(line func(bool, string, ...any)) {
	s := ratioSpreadOf(d.ratios(armSidecar, armBuiltin))
	shape := fmt.Sprintf("backlog drain, %d partition%s", d.Partitions, plural(d.Partitions))
	if s.N == 0 {
		line(false, "%s: no round pair timed (copies too short to time)", shape)
		return
	}
	if d.Partitions == 1 {
		line(s.Min >= 1.0, "%s, every round ≥ 1.0× built-in (copy speed, per round pair): lowest %.2f×", shape, s.Min)
	}
	line(s.Median >= 1.2, "%s, median of the round pairs ≥ 1.2× built-in (copy speed): %s", shape, s)
	slow := 0
	for _, x := range d.Rounds {
		if x.Arm == armSidecar && x.Slow != "" {
			slow++
		}
	}
	line(slow == 0, "%s, no sidecar round more than 2× slower than its arm's median: %d of %d", shape, slow, d.rounds())
}

// roundsMarkdown is the drain's table of every round.
func (d *drainResult) roundsMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Backlog drain, %s messages on %d partition%s (start-up: the release, or the sidecar's process start, to the first message on west; copy: first to last message on west; / built-in: the round's copy speed over the built-in's in the same round; iowait: share of the cores; publish latency: each broker's mean over the round):\n\n",
		num(float64(d.Messages)), d.Partitions, plural(d.Partitions))
	b.WriteString("| round | arm | start-up s | copy s | copy msg/s | / built-in | start to last s | leaked while held | sidecar CPU s | sidecar peak RSS MiB | east CPU s | west CPU s | machine busy | iowait | publish latency | slow |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	bi := map[int]float64{}
	for _, x := range d.Rounds {
		if x.Arm == armBuiltin {
			bi[x.Round] = x.rate()
		}
	}
	for _, x := range d.Rounds {
		b.WriteString(drainRow(x, bi[x.Round]))
	}
	b.WriteString("\n")
	return b.String()
}

// drainRow is one round's row; builtin is the built-in's copy speed in
// the same round (0: none).
func drainRow(x drainRound, builtin float64) string {
	cpu, hwm, rel := "", "", ""
	if x.Arm != armBuiltin {
		cpu, hwm = fmt.Sprintf("%.2f", x.CPU.Seconds()), mib(x.HWM)
		rel = ratio(x.rate(), builtin)
	}
	slow := ""
	if x.Slow != "" {
		slow = "**slow**: " + x.Slow
	}
	return fmt.Sprintf("| %d | %s | %.2f | %.2f | %s | %s | %.2f | %d | %s | %s | %.2f | %.2f | %.0f %% | %.0f %% | %s | %s |\n",
		x.Round+1, x.Arm, x.Startup.Seconds(), copySeconds(x), num(x.rate()), rel, x.Dur.Seconds(), x.Leaked, cpu, hwm,
		x.Use.Broker["east"].Seconds(), x.Use.Broker["west"].Seconds(), 100*x.Use.Busy, 100*x.Use.IOWait, pubLat(x.Publish), slow)
}
