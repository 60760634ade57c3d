package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report is everything one run measured.
type report struct {
	Date    time.Time
	Machine string
	Pulsar  string
	Sizes   sizes
	Quick   bool
	Profile bool
	Took    time.Duration
	Load    string // load average when the run started
	// MemLimit is the sidecars' GOMEMLIMIT (-sidecar-memlimit), if set.
	MemLimit string
	Others   []string // other test-bed clusters up meanwhile
	// Retaken counts measurements taken again because a cluster
	// restarted meanwhile (other tests share the test bed).
	Retaken int

	TP    []*tpResult
	Lat   *latResult
	Drain []*drainResult // one per shape (sizes.DrainShapes)
	Zstd  *zstdResult
	Scale *scaleResult
	Subs  *subsResult
	// SubsGrowth are the subs row's larger topic counts, start-up and
	// idle only.
	SubsGrowth []*subsResult
	SubsVs     []*subsvsResult // one per application type
	Verify     *verifyResult
	WAN        *wanResult // east->far through the WAN proxy (wan.go)
	Errors     []string
}

// run sets the run up, runs the selected workloads and returns what they
// measured. A failed workload is reported and the others still run.
func run(o options) (*report, error) {
	if o.Profile != "" {
		if err := os.MkdirAll(o.Profile, 0o755); err != nil {
			return nil, err
		}
	}
	e, err := newEnv(o)
	if err != nil {
		return nil, err
	}
	defer e.cleanup()
	rep := &report{Date: time.Now().UTC(), Machine: o.Machine, Sizes: o.Sizes, Quick: o.Quick, Profile: o.Profile != "", MemLimit: o.SidecarMemLimit}
	rep.Pulsar = e.pulsarVersion()
	rep.Others = others()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if err := e.setup(); err != nil {
		return nil, err
	}
	start := time.Now()
	var errs []error
	fail := func(w string, err error) {
		e.logf("%s failed: %v", w, err)
		rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", w, err))
		errs = append(errs, fmt.Errorf("%s: %w", w, err))
	}
	// do runs a workload; one that failed on a broker's passing trouble
	// (the test bed is shared and loaded) runs again from the start.
	do := func(w string, f func() error) {
		for try := 1; ; try++ {
			err := f()
			if err == nil {
				return
			}
			if try == 3 || !(transient(err) || e.restarted()) {
				fail(w, err)
				return
			}
			e.logf("%s: %v; running it again", w, err)
			rep.Retaken++
			if err := e.waitClusters(5 * time.Minute); err != nil {
				fail(w, err)
				return
			}
		}
	}
	for _, parts := range []int{1, 4} {
		w := fmt.Sprintf("tp%d", parts)
		if !o.Only[w] {
			continue
		}
		e.logf("== throughput, %d partition(s): %d messages per arm per round, %d rounds", parts, o.Sizes.TPMessages, o.Sizes.Rounds)
		do(w, func() error {
			r, err := e.throughput(parts)
			if err == nil {
				rep.TP = append(rep.TP, r)
			}
			return err
		})
	}
	if o.Only["latency"] {
		e.logf("== latency at %d msg/s, %s per arm per round, %d rounds", o.Sizes.LatRate, o.Sizes.LatDuration, o.Sizes.Rounds)
		do("latency", func() (err error) { rep.Lat, err = e.latency(); return err })
	}
	if o.Only["drain"] {
		e.drains(rep, do)
	}
	if o.Only["zstd"] {
		e.logf("== ZSTD topic: %d messages per arm per round, %d rounds", o.Sizes.ZstdMessages, o.Sizes.Rounds)
		do("zstd", func() (err error) { rep.Zstd, err = e.zstd(); return err })
	}
	if o.Only["scale"] {
		e.logf("== scale: %d topics in one sidecar", o.Sizes.ScaleTopics)
		do("scale", func() (err error) { rep.Scale, err = e.scale(); return err })
	}
	if o.Only["subs"] && o.Sizes.Subs.Topics > 0 {
		e.subsRows(rep, do)
	}
	if o.Only["subsvs"] && o.Sizes.SubsVs.Partitions > 0 {
		for _, typ := range o.Sizes.SubsVs.Types {
			e.logf("== replicated subscriptions side by side, %s application: %d partitions per arm, %d msg/s per arm", typ, o.Sizes.SubsVs.Partitions, o.Sizes.SubsVs.Rate)
			do("subsvs-"+typ, func() error {
				r, err := e.subsvs(typ)
				if err == nil {
					rep.SubsVs = append(rep.SubsVs, r)
				}
				return err
			})
		}
	}
	if o.Only["verify"] && o.Sizes.Verify.Rounds > 0 {
		e.logf("== continuous verifier: %d messages per arm per round, %d rounds; age at %d msg/s", o.Sizes.Verify.Messages, o.Sizes.Verify.Rounds, o.Sizes.Verify.AgeRate)
		do("verify", func() (err error) { rep.Verify, err = e.verifyCost(); return err })
	}
	if o.Only["wan"] {
		e.logf("== WAN rows: east->far through the proxy, %d messages per arm per round, %d rounds", o.Sizes.TPMessages, o.Sizes.Rounds)
		do("wan", func() (err error) { rep.WAN, err = e.wanRows(); return err })
	}
	rep.Took = time.Since(start)
	rep.Retaken += e.disturbed
	e.logf("measured in %s", rep.Took.Round(time.Second))
	return rep, errors.Join(errs...)
}

// subsRows runs the scale row with replicated subscriptions and its
// growth runs; do runs a workload as run does.
func (e *env) subsRows(rep *report, do func(string, func() error)) {
	o := e.o
	e.logf("== scale with replicated subscriptions: %d topics east<->west", o.Sizes.Subs.Topics)
	do("subs", func() (err error) { rep.Subs, err = e.subs(o.Sizes.Subs.Topics, false); return err })
	for _, n := range o.Sizes.Subs.Growth {
		e.logf("== scale with replicated subscriptions, growth: %d topics east<->west, start-up and idle", n)
		do(fmt.Sprintf("subs-%d", n), func() error {
			r, err := e.subs(n, true)
			if r != nil {
				rep.SubsGrowth = append(rep.SubsGrowth, r)
			}
			return err
		})
	}
}

// ---- medians --------------------------------------------------------------

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rate is the median messages per second of arm's throughput rounds.
func (t *tpResult) rate(arm string) float64 {
	var xs []float64
	for _, r := range t.Rounds {
		if r.Arm == arm {
			xs = append(xs, float64(r.Msgs)/r.Dur.Seconds())
		}
	}
	return median(xs)
}

// cpuPerMsg is the median over arm's rounds of the CPU the brokers (and,
// for the sidecar arm, the sidecar) used per message, in µs.
func (t *tpResult) cpuPerMsg(arm string) float64 {
	var xs []float64
	for _, r := range t.Rounds {
		if r.Arm == arm {
			c := r.Use.Broker["east"] + r.Use.Broker["west"] + r.CPU
			xs = append(xs, c.Seconds()*1e6/float64(r.Msgs))
		}
	}
	return median(xs)
}

// lat is the median over rounds of one latency statistic, in ms.
func (l *latResult) lat(arm string, f func(latRound) time.Duration) float64 {
	var xs []float64
	for _, r := range l.Rounds {
		if r.Arm == arm {
			xs = append(xs, float64(f(r))/1e6)
		}
	}
	return median(xs)
}

// drainVerify is geo-sidecar verify's run over a drained backlog, if any.
func (r *report) drainVerify() *verifyRun {
	for _, d := range r.Drain {
		if d.Verify != nil {
			return d.Verify
		}
	}
	return nil
}

// ---- markdown -------------------------------------------------------------

// sustainedNote labels the throughput rows in the summary.
const sustainedNote = "The throughput rows are sustained load, what a user sees: a producer on east and the replicator running together on the same cores, timed from the first send to the last message on west. They are not the replicator's speed (when both replicators keep pace with the producer, their ratio measures CPU contention); the drain rows' copy msg/s is."

// Markdown renders the report: the summary table, the sidecar's resources,
// the scale run, the targets, then every round.
func (r *report) Markdown() string {
	var b strings.Builder
	b.WriteString(r.summary())
	b.WriteString("\n### Targets\n\n")
	b.WriteString(r.targets())
	b.WriteString("\n### Every round\n\n")
	b.WriteString(r.rounds())
	b.WriteString("\n### How it is measured\n\n")
	b.WriteString(method(r))
	return b.String()
}

// summary is the part docs/benchmark.md shows: date, machine, the comparison
// table, the sidecar's resources and the scale run.
func (r *report) summary() string {
	var b strings.Builder
	kind := "`make bench`"
	if r.Quick {
		kind = "`go run ./e2e/bench -quick` (small sizes: not representative)"
	}
	fmt.Fprintf(&b, "Run %s on %s; Pulsar %s standalone ×2 (east, west) on the same machine. %s, %d round(s) per workload, built-in and sidecar alternating, medians shown; 1 KiB messages, MB = 10⁶ bytes of payload.",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Machine, r.Pulsar, kind, r.Sizes.Rounds)
	if r.Load != "" {
		fmt.Fprintf(&b, " Load average at the start: %s", r.Load)
		if len(r.Others) > 0 {
			fmt.Fprintf(&b, "; other test-bed clusters up meanwhile: %s", strings.Join(r.Others, ", "))
		}
		b.WriteString(".")
	}
	if r.MemLimit != "" {
		fmt.Fprintf(&b, " The sidecars ran with GOMEMLIMIT=%s.", r.MemLimit)
	}
	if r.Retaken > 0 {
		fmt.Fprintf(&b, " %d measurement(s) or workload(s) were taken again because a test-bed broker restarted or failed meanwhile (other tests share it).", r.Retaken)
	}
	if r.Profile {
		b.WriteString(" **Profiling was on (--pprof, block and mutex sampling): numbers are perturbed.**")
	}
	b.WriteString("\n\n")
	b.WriteString("| workload | metric | built-in | sidecar | direct limit | sidecar / built-in | sidecar / direct | target |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, t := range r.TP {
		w := fmt.Sprintf("throughput, %d partition%s", t.Partitions, plural(t.Partitions))
		bi, sc, di := t.rate(armBuiltin), t.rate(armSidecar), t.rate(armDirect)
		fmt.Fprintf(&b, "| %s | msg/s | %s | %s | %s | %s | %s | ≥ 1.0× built-in, ≥ 0.8× direct |\n", w,
			num(bi), num(sc), num(di), ratio(sc, bi), ratio(sc, di))
		mb := func(x float64) string { return fmt.Sprintf("%.1f", x*msgSize/1e6) }
		fmt.Fprintf(&b, "| %s | MB/s | %s | %s | %s | %s | %s | |\n", w, mb(bi), mb(sc), mb(di), ratio(sc, bi), ratio(sc, di))
		cb, cs, cd := t.cpuPerMsg(armBuiltin), t.cpuPerMsg(armSidecar), t.cpuPerMsg(armDirect)
		fmt.Fprintf(&b, "| %s | CPU µs / message (both brokers + sidecar) | %.1f | %.1f | %.1f | %s | %s | |\n", w, cb, cs, cd, ratio(cs, cb), ratio(cs, cd))
	}
	if l := r.Lat; l != nil {
		w := fmt.Sprintf("end-to-end latency at %s msg/s", num(float64(l.Rate)))
		for _, s := range []struct {
			name   string
			f      func(latRound) time.Duration
			target string
		}{
			{"p50 ms", func(x latRound) time.Duration { return x.P50 }, ""},
			{"p99 ms", func(x latRound) time.Duration { return x.P99 }, "≤ 1.5× built-in"},
			{"max ms", func(x latRound) time.Duration { return x.Max }, ""},
		} {
			bi, sc, di := l.lat(armBuiltin, s.f), l.lat(armSidecar, s.f), l.lat(armDirect, s.f)
			fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.1f (one hop) | %s | %s | %s |\n", w, s.name, bi, sc, di, ratio(sc, bi), ratio(sc, di), s.target)
		}
	}
	for _, d := range r.Drain {
		b.WriteString(d.summaryRows())
	}
	if v := r.drainVerify(); v != nil {
		vr := float64(v.Messages) / v.Dur.Seconds()
		fmt.Fprintf(&b, "| geo-sidecar verify of the drained backlog (exit %d) | msg/s; ratio: to the sidecar's drain, %s msg/s | | %s | | %s | | ≥ 0.5× the sidecar's drain |\n",
			v.Exit, num(v.SidecarRate), num(vr), ratio(vr, v.SidecarRate))
		fmt.Fprintf(&b, "| geo-sidecar verify of the drained backlog | peak RSS MiB | | %s | | | | < 128 |\n", mib(v.PeakRSS))
	}
	if z := r.Zstd; z != nil {
		const w = "ZSTD topic, 1 partition"
		bi, sc := z.median(armBuiltin, zstdRound.perStored), z.median(armSidecar, zstdRound.perStored)
		fmt.Fprintf(&b, "| %s | bytes into the target per byte stored at the origin | %.3f | %.3f | — | %s | — | ≤ 1.05 |\n", w, bi, sc, ratio(sc, bi))
		cb, cs := z.median(armBuiltin, zstdRound.compression), z.median(armSidecar, zstdRound.compression)
		fmt.Fprintf(&b, "| %s | payload bytes per byte stored at the origin (what ZSTD saved) | %.2f | %.2f | | | | |\n", w, cb, cs)
	}
	if len(r.TP) > 0 {
		b.WriteString("\n" + sustainedNote + "\n")
	}
	b.WriteString(drainNotes(r.Drain))
	b.WriteString(r.resources())
	if s := r.Scale; s != nil {
		fmt.Fprintf(&b, "\nScale: one sidecar copying %s topics east→west (default 30 s discovery):\n\n", num(float64(s.Topics)))
		b.WriteString("| start-up until all replicate | ready (/readyz) | idle RSS MiB | peak RSS MiB | goroutines | threads | idle CPU, % of a core | spread traffic msg/s | CPU µs / message | stop (SIGTERM) |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		fmt.Fprintf(&b, "| %.1f s | %.1f s | %s | %s | %d | %d | %.2f | %s | %.1f | %.1f s |\n",
			s.Startup.Seconds(), s.Ready.Seconds(), mib(s.RSS), mib(max(s.HWM, s.HWMAfter)), s.Goroutines, s.Threads,
			100*s.IdleCPU.Seconds()/s.IdleWindow.Seconds(), num(float64(s.Messages)/s.Dur.Seconds()),
			s.CPU.Seconds()*1e6/float64(s.Messages), s.Stop.Seconds())
	}
	if r.Subs != nil {
		b.WriteString(r.Subs.markdown())
		b.WriteString(subsGrowth(append([]*subsResult{r.Subs}, r.SubsGrowth...)))
	}
	for _, sv := range r.SubsVs {
		b.WriteString(sv.markdown())
	}
	if r.Verify != nil {
		b.WriteString(r.Verify.markdown())
	}
	if len(r.Errors) > 0 {
		b.WriteString("\n**Failed workloads:**\n\n")
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	return b.String()
}

// resources is the table of the sidecar's resources per workload.
func (r *report) resources() string {
	var b strings.Builder
	b.WriteString("\nThe sidecar's resources (one process per workload; CPU over the measured windows only):\n\n")
	b.WriteString("| workload | messages copied | CPU s | CPU µs / message | peak RSS MiB | threads | goroutines |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	res := func(w string, s sidecarRun) {
		per := "—"
		if s.Messages > 0 {
			per = fmt.Sprintf("%.1f", s.CPU.Seconds()*1e6/float64(s.Messages))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s | %s | %d | %d |\n", w, num(float64(s.Messages)), s.CPU.Seconds(), per, mib(s.PeakRSS), s.Threads, s.Goroutines)
	}
	for _, t := range r.TP {
		res(fmt.Sprintf("throughput, %d partition%s", t.Partitions, plural(t.Partitions)), t.Sidecar)
	}
	if r.Lat != nil {
		res("latency", r.Lat.Sidecar)
	}
	for _, d := range r.Drain {
		res(fmt.Sprintf("backlog drain, %d partition%s (per process: max)", d.Partitions, plural(d.Partitions)), d.Sidecar)
	}
	if r.Zstd != nil {
		res("ZSTD topic", r.Zstd.Sidecar)
	}
	return b.String()
}

func (r *report) targets() string {
	var b strings.Builder
	line := func(ok bool, format string, args ...any) {
		mark := "met"
		if !ok {
			mark = "**short**"
		}
		fmt.Fprintf(&b, "- %s: %s\n", fmt.Sprintf(format, args...), mark)
	}
	for _, t := range r.TP {
		bi, sc, di := t.rate(armBuiltin), t.rate(armSidecar), t.rate(armDirect)
		line(sc >= bi, "throughput, %d partition%s, ≥ 1.0× built-in: %s", t.Partitions, plural(t.Partitions), ratio(sc, bi))
		line(sc >= 0.8*di, "throughput, %d partition%s, ≥ 0.8× the direct limit: %s", t.Partitions, plural(t.Partitions), ratio(sc, di))
	}
	// The sidecar process alone, from the resources table: a batched
	// source, 1 KiB messages.
	for _, t := range r.TP {
		if s := t.Sidecar; s.Messages > 0 {
			per := s.CPU.Seconds() * 1e6 / float64(s.Messages)
			// /proc counts CPU in ticks: on a small run one tick is a
			// sizeable share of a message's microseconds.
			res := ""
			if tick := 1e6 / clockTicks / float64(s.Messages); tick >= 0.05 {
				res = fmt.Sprintf(" (±%.2f µs: CPU is counted in %d ms ticks)", tick, 1000/clockTicks)
			}
			line(per <= 2, "sidecar CPU per 1 KiB message ≤ 2 µs (batched source), throughput, %d partition%s: %.1f µs%s", t.Partitions, plural(t.Partitions), per, res)
		}
	}
	if l := r.Lat; l != nil {
		p99 := func(x latRound) time.Duration { return x.P99 }
		bi, sc := l.lat(armBuiltin, p99), l.lat(armSidecar, p99)
		line(sc <= 1.5*bi, "p99 latency ≤ 1.5× built-in: %s", ratio(sc, bi))
	}
	for _, d := range r.Drain {
		d.targets(line)
	}
	if v := r.drainVerify(); v != nil {
		vr := float64(v.Messages) / v.Dur.Seconds()
		line(v.Exit == 0 && vr >= 0.5*v.SidecarRate, "geo-sidecar verify of %s messages ≥ 0.5× the sidecar's drain rate: %s msg/s, %s (exit %d)",
			num(float64(v.Messages)), num(vr), ratio(vr, v.SidecarRate), v.Exit)
		line(v.PeakRSS < 128<<20, "geo-sidecar verify, peak RSS < 128 MiB: %s MiB", mib(v.PeakRSS))
	}
	if z := r.Zstd; z != nil {
		bi, sc := z.median(armBuiltin, zstdRound.perStored), z.median(armSidecar, zstdRound.perStored)
		line(sc > 0 && sc <= 1.05, "ZSTD topic, bytes into the target per byte stored at the origin ≤ 1.05: %.3f (built-in %.3f)", sc, bi)
	}
	if s := r.Scale; s != nil {
		// The target is about idle partitions: judged on the RSS at rest
		// and the peak up to then (start-up included); the peak under
		// spread traffic is shown, not judged.
		line(s.HWM <= 256<<20 && s.RSS <= 256<<20, "%d idle partitions, RSS ≤ 256 MiB: %s MiB idle, %s MiB peak until then (start-up included); %s MiB peak later under spread traffic, not judged", s.Topics, mib(s.RSS), mib(s.HWM), mib(s.HWMAfter))
		pct := 100 * s.IdleCPU.Seconds() / s.IdleWindow.Seconds()
		line(pct < 2, "%d idle partitions, idle CPU < 2 %% of a core: %.2f %%", s.Topics, pct)
	}
	if r.Subs != nil {
		r.Subs.targets(line)
		growthTargets(append([]*subsResult{r.Subs}, r.SubsGrowth...), line)
	}
	for _, sv := range r.SubsVs {
		sv.targets(line)
	}
	if r.Verify != nil {
		r.Verify.targets(line)
	}
	return b.String()
}

func (r *report) rounds() string {
	var b strings.Builder
	for _, t := range r.TP {
		fmt.Fprintf(&b, "Throughput under sustained load, %d partition%s: what a user sees, producer and replicator together, not the replicator's speed (time: first send on the source to the last message taken by west):\n\n", t.Partitions, plural(t.Partitions))
		b.WriteString("| round | arm | messages | time s | msg/s | publish s | sidecar CPU s | east CPU s | west CPU s | machine busy |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range t.Rounds {
			cpu := ""
			if x.Arm == armSidecar {
				cpu = fmt.Sprintf("%.2f", x.CPU.Seconds())
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %.2f | %s | %.2f | %s | %.2f | %.2f | %.0f %% |\n", x.Round+1, x.Arm, num(float64(x.Msgs)), x.Dur.Seconds(),
				num(float64(x.Msgs)/x.Dur.Seconds()), x.Publish.Seconds(), cpu,
				x.Use.Broker["east"].Seconds(), x.Use.Broker["west"].Seconds(), 100*x.Use.Busy)
		}
		b.WriteString("\n")
	}
	if l := r.Lat; l != nil {
		b.WriteString("Latency (publish on the source to receipt by a consumer on west):\n\n")
		b.WriteString("| round | arm | received / sent | p50 ms | p99 ms | max ms |\n|---:|---|---:|---:|---:|---:|\n")
		for _, x := range l.Rounds {
			fmt.Fprintf(&b, "| %d | %s | %d / %d | %.1f | %.1f | %.1f |\n", x.Round+1, x.Arm, x.Got, x.Sent,
				float64(x.P50)/1e6, float64(x.P99)/1e6, float64(x.Max)/1e6)
		}
		b.WriteString("\n")
	}
	for _, d := range r.Drain {
		b.WriteString(d.roundsMarkdown())
	}
	if z := r.Zstd; z != nil {
		fmt.Fprintf(&b, "ZSTD topic, %s messages on 1 partition (bytes: the topic's bytesInCounter over the round, on east from the application, on west from the replicator; payload: the messages uncompressed; time: first send to the last message taken by west):\n\n", num(float64(z.Messages)))
		b.WriteString("| round | arm | messages on west | payload MB | stored on east MB | into west MB | west / east | payload / east | time s | sidecar CPU s |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range z.Rounds {
			cpu := ""
			if x.Arm == armSidecar {
				cpu = fmt.Sprintf("%.2f", x.CPU.Seconds())
			}
			mb := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/1e6) }
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %.3f | %.2f | %.2f | %s |\n", x.Round+1, x.Arm, num(float64(x.WestMsgs)),
				mb(x.Payload), mb(x.East), mb(x.West), x.perStored(), x.compression(), x.Dur.Seconds(), cpu)
		}
		b.WriteString("\n")
	}
	if r.Subs != nil {
		b.WriteString(r.Subs.rounds())
	}
	for _, sv := range r.SubsVs {
		b.WriteString(sv.rounds())
	}
	if r.Verify != nil {
		b.WriteString(r.Verify.rounds())
	}
	fmt.Fprintf(&b, "Measured in %s.\n", r.Took.Round(time.Second))
	return b.String()
}

func method(r *report) string {
	s := r.Sizes
	subs := ""
	if r.Subs != nil {
		subs = r.Subs.method(s.Subs)
	}
	if len(r.SubsVs) > 0 {
		subs += r.SubsVs[0].method()
	}
	if r.Verify != nil {
		subs += r.Verify.method()
	}
	return subs + fmt.Sprintf(`- Every run works in a fresh tenant: a namespace replicated by Pulsar's own geo-replication (%[1]s, wired by `+"`cluster.sh geo`"+`), a local-only namespace copied east→west by the geo-sidecar binary (default settings: 1,000 messages in flight per partition, 30 s discovery), and a west-only namespace for the direct limit. Only east produces, so both systems copy one way. Arms alternate (their order rotates every round); medians over rounds.
- Throughput under sustained load, what a user sees (not the replicator's speed: the drain rows measure that): a batching producer (pulsar-client-go defaults: up to 1,000 messages or 128 KiB per batch, 10 ms delay, 1,000 pending; no compression) publishes %[2]s messages of 1 KiB on east as fast as it can; the time runs from the first send until west's broker has taken the last message (msgInCounter of the west topic, polled every 50 ms; it counts messages whoever writes them). The direct limit is the same producer writing to west itself. Producer, brokers and replicator share the machine's cores. "CPU µs / message" is the CPU the two broker JVMs (and the sidecar process) used over the window per message, from /proc: it includes any other load on the brokers, so read it with the per-round "machine busy" share.
- Latency: a non-batching producer on east sends %[3]s messages per second for %[4]s per round, each stamped with its send time; a consumer on west takes the difference on receipt (same clock). The direct arm (produce and consume on west) is the one-hop floor. The sidecar's producer sends a batch when it is full or 2 ms after its cursor ran dry.
- Backlog drain, the replicator's own speed (%[5]s messages per arm per round; one row per shape: %[11]s partitions, the largest a spread: each partition is a topic of its own to either replicator, with its own cursor, reader and producer): each arm of a round starts from the same state, one arm after the other (order rotating): a fresh topic, its replicator unable to deliver, the backlog published on east by the batching producer, a pause of %[12]s, then the release; its topic is deleted before the next arm. The sidecar is simply not running (its cursor subscription exists and accumulates the backlog); its time starts at process start. Pulsar's replicator is held by a replicator dispatch rate of 1 message and 1 byte per second on its namespace (removing west from the replication clusters would delete the replicator's cursor, and the backlog with it); at most one batch per partition leaks before the hold bites, reported per round. Pulsar 4.0.7's replicator, once it found no permits, never reads again by itself (a dangling in-flight read task; it logs "Skip the reading because there is a pending read task"), so the release lifts the rate and unloads and reloads the topic on east; the new replicator resumes from its durable cursor. Its time starts before the release. West's msgInCounter is polled every 50 ms: start-up is the start to the first message on west (the sidecar's process start, configuration, discovery, subscribe and the Failover consumer's 1 s activation delay; the built-in's unload, reload and first read), reported apart; the copy is the first message on west to the last, and its speed is the backlog less what leaked, over the copy's seconds. Ratios are per round pair: the sidecar's copy speed over the built-in's in the same round; the table shows their median, minimum and maximum (not a ratio of per-arm medians). With -versus the second binary is a third arm of every round, with its own ratios. A round whose copy (or whole time from the start) took more than twice its arm's median is flagged slow, with the machine's iowait over it (/proc/stat) and each broker's mean publish latency over it (pulsar_broker_publish_latency from /metrics: a message's arrival to its storage's acknowledgement, the bookie's journal and ledger writes included; the standalone bookies publish no journal or flush series); its sidecar log is kept and named. A built-in copy shorter than 10 s is noted: raise -drain-messages. After the sidecar's arm of the first round, `+"`geo-sidecar verify`"+` (the same binary, with the sidecar's config; no marker key, so origins are taken at their word) proves the drained topic, reading both sides: its time from start to exit is set against the sidecar's drain rate of the same backlog, with the process's peak RSS (maxrss).
- ZSTD topic: a batching producer as above but with ZSTD compression (pulsar-client-go's default level; a batch of up to 128 KiB is compressed as a whole) publishes %[10]s messages of 1 KiB on east per arm per round, each a JSON-like order event with a counter, random ids and prices and a note of words drawn from sixteen (a 128 KiB batch of them compresses about fivefold; the report shows the factor the brokers saw: payload bytes per byte stored on east). Once west has every message (msgInCounter), the bytes west took into the topic (bytesInCounter: entries as stored, metadata included) are divided by the bytes east stored. A replicator that forwards stored entries as they are scores about 1 (plus what it adds to each entry's metadata); one that unpacks and sends messages again scores whatever its own producer's compression makes of them (uncompressed: the compression factor). Target: at most 1.05. No direct arm.
- Sidecar CPU is utime+stime from /proc/PID/stat over the measured windows; the target of at most 2 µs per 1 KiB message (batched source) is judged on the sidecar process alone, the throughput rows of the resources table. Peak RSS is VmHWM from /proc/PID/status; goroutines from its /metrics (go_goroutines).
- Scale: %[6]s non-partitioned topics on east with one message each, then one sidecar (topic_patterns, default 30 s discovery) started; start-up is process start until replicated_messages_total reaches the topic count. Idle RSS, goroutines and threads are read after %[9]s more; idle CPU over the next %[7]s; then %[8]s messages spread round-robin over all topics, timed until the sidecar counted them confirmed.
- Other engineers' tests share the test bed and restart clusters; a measurement during which a broker restarted is taken again (counted in the header).
`, "`builtin`", num(float64(s.TPMessages)), num(float64(s.LatRate)), s.LatDuration, num(float64(s.DrainMessages)),
		num(float64(s.ScaleTopics)), s.IdleWindow, num(float64(s.ScaleMessages)), s.ScaleSettle, num(float64(s.ZstdMessages)),
		drainShapesText(s.DrainShapes), s.Settle)
}

// drainShapesText is "1, 4 and 100".
func drainShapesText(shapes []int) string {
	xs := make([]string, len(shapes))
	for i, n := range shapes {
		xs[i] = strconv.Itoa(n)
	}
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func ratio(a, b float64) string {
	if b == 0 || a == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// num formats x with thousands separators.
func num(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// Markers of the generated sections of the benchmark page
// (docs/benchmark.md, `make bench`'s -page).
const (
	pageBegin = "<!-- bench:begin (generated by make bench; edits are overwritten) -->"
	pageEnd   = "<!-- bench:end -->"
)

// defaultOut is where the full report goes (-out).
const defaultOut = "e2e/bench/RESULTS.md"

// resultsLink is a markdown link, from the page at path, to the full
// report at results (defaultOut when empty): the link text is the
// report's path as given, the target that path relative to the page's
// directory, so that it resolves from docs/benchmark.md as from a file
// at the top.
func resultsLink(path, results, anchor string) string {
	if results == "" {
		results = defaultOut
	}
	target := filepath.ToSlash(results)
	page, perr := filepath.Abs(filepath.Dir(path))
	res, rerr := filepath.Abs(results)
	if perr == nil && rerr == nil {
		if rel, err := filepath.Rel(page, res); err == nil {
			target = filepath.ToSlash(rel)
		}
	}
	return "[" + filepath.ToSlash(results) + "](" + target + anchor + ")"
}

// updatePage replaces the text between the markers of the page at path
// with the summary; results is the full report it links to.
func updatePage(path, results string, r *report) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, pageBegin), strings.Index(s, pageEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section to replace", path, pageBegin, pageEnd)
	}
	body := "\n" + r.summary() + "\nTargets:\n\n" + r.targets() + "\nEvery round and the method: " + resultsLink(path, results, "") + ".\n"
	s = s[:i+len(pageBegin)] + body + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
