// Command bench is `make bench`: with the east and west test-bed clusters
// up, it measures geo-sidecar side by side with Pulsar's own (built-in)
// geo-replication on the same clusters, and against the direct-produce
// limit (a producer writing straight to west with the same settings, the
// ceiling a replicator cannot beat).
//
// Every run works in a fresh tenant, bench<unix-seconds>:
//
//	bench…/builtin   Pulsar's geo-replication east<->west (cluster.sh geo)
//	bench…/bdrain    the same, for the backlog-drain workload (its replicator
//	                 dispatch rate is throttled while the backlog is built)
//	bench…/sidecar   local-only on each cluster; geo-sidecar copies east->west
//	bench…/direct    west only: the direct-produce limit
//	bench…/scale     1,000 topics copied by one sidecar
//	geobench-subs/n<N>  N topics east<->west with a replicated
//	                 subscription each (subs.go; kept with -keep, reused)
//	geobench-subs/b<N>  the same on Pulsar's geo-replication: the subs
//	                 row's built-in arm (subsbuiltin.go, -subs-builtin)
//	bench…/svbuiltin-<type>, bench…/svsidecar-<type>  replicated
//	                 subscriptions side by side: Pulsar's own and
//	                 geo-sidecar's, at once, per application type (subsvs.go)
//	bench…/sidecar (vfon, vfoff, vfage)  the continuous verifier's cost
//	                 and verified-through age (verifycost.go)
//
// Each workload runs several rounds; in every round the built-in and the
// sidecar arm run one after the other, the order alternating between
// rounds, so both see the same machine state. Medians are reported; the
// drain rows (drain.go), which time the replicators alone copying a
// backlog that exists, report the ratio of every round pair and flag
// slow rounds. The sidecar is the real binary, run as a subprocess per
// workload so that its CPU seconds and peak RSS can be read from /proc.
//
// Absolute numbers on a 2-core machine shared by two Pulsar JVMs are noisy;
// the ratios measured within one run are what the table is for.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sizes are the knobs of one run.
type sizes struct {
	Rounds        int
	Settle        time.Duration // pause between two arms: brokers finish writing, collect garbage
	WarmMessages  int           // through every throughput arm before measuring
	LatWarm       time.Duration // latency warm-up per arm, not recorded
	TPMessages    int           // per arm per round, throughput workloads
	LatRate       int           // messages per second, latency workload
	LatDuration   time.Duration // per arm per round
	DrainMessages int           // backlog per arm per round
	// DrainShapes are the partition counts of the drain topic, one drain
	// row each: 1, 4, and 100 as a spread over many topics (each
	// partition is a topic of its own to either replicator).
	DrainShapes   []int
	ZstdMessages  int // per arm per round, ZSTD workload
	ScaleTopics   int
	ScaleMessages int           // spread over every scale topic
	IdleWindow    time.Duration // idle CPU measured over this long
	ScaleSettle   time.Duration // after start-up, before idle is measured
	Subs          subsSizes     // the scale row with replicated subscriptions (subs.go)
	SubsVs        subsvsSizes   // replicated subscriptions side by side with the built-in (subsvs.go)
	Verify        verifySizes   // the continuous verifier's cost and age (verifycost.go)
}

var (
	fullSizes = sizes{
		Rounds: 3, Settle: 2 * time.Second, WarmMessages: 2000, LatWarm: 2 * time.Second,
		TPMessages: 200_000,
		LatRate:    1000, LatDuration: 15 * time.Second,
		// At the built-in's 100,000-250,000 msg/s on the test bed, a copy
		// of 2,500,000 lasts 10-25 s: past the warm-up (issue 37).
		DrainMessages: 2_500_000, DrainShapes: []int{1, 4, 100},
		ZstdMessages: 100_000,
		ScaleTopics:  1000, ScaleMessages: 200_000, IdleWindow: 60 * time.Second, ScaleSettle: 20 * time.Second,
		Subs: subsSizes{Topics: 1000, Settle: 30 * time.Second, Idle: 5 * time.Minute, Rate: 1000,
			Warm: 20 * time.Second, Traffic: time.Minute, Probes: 50, ProbeParallel: 10,
			Growth: []int{2500, 5000}, GrowthIdle: time.Minute, Builtin: true},
		SubsVs: subsvsSizes{Partitions: 40, Rate: 200, Warm: 10 * time.Second, Load: time.Minute, Tail: 20 * time.Second, Probes: 20, Types: svAllTypes},
		Verify: verifySizes{Rounds: 3, Messages: 200_000, AgeRate: 1000, AgeFor: time.Minute, AgeWarm: 10 * time.Second, CatchUp: 20 * time.Second},
	}
	quickSizes = sizes{
		Rounds: 1, Settle: time.Second, WarmMessages: 1000, LatWarm: time.Second,
		TPMessages: 20_000,
		LatRate:    500, LatDuration: 4 * time.Second,
		DrainMessages: 20_000, DrainShapes: []int{1, 4, 100},
		ZstdMessages: 5_000,
		ScaleTopics:  50, ScaleMessages: 5_000, IdleWindow: 5 * time.Second, ScaleSettle: 3 * time.Second,
		Subs: subsSizes{Topics: 50, Settle: 3 * time.Second, Idle: 10 * time.Second, Rate: 100,
			Warm: 3 * time.Second, Traffic: 10 * time.Second, Probes: 10, ProbeParallel: 5, Builtin: true},
		SubsVs: subsvsSizes{Partitions: 10, Rate: 100, Warm: 5 * time.Second, Load: 20 * time.Second, Tail: 20 * time.Second, Probes: 6, Types: svAllTypes},
		Verify: verifySizes{Rounds: 3, Messages: 100_000, AgeRate: 1000, AgeFor: 20 * time.Second, AgeWarm: 6 * time.Second, CatchUp: 10 * time.Second},
	}
)

// options are the command line.
type options struct {
	Binary  string
	Versus  string // a second geo-sidecar binary, measured as an extra arm
	Out     string
	Page    string // docs/benchmark.md: its generated sections are replaced
	Profile string // directory for pprof profiles; empty: no profiling
	// JFR is the directory for the brokers' flight recordings of each
	// drain arm (jfr.go); empty: none.
	JFR string
	// JFRSettings are the recordings' settings: a name the JDK knows
	// (profile) or a .jfc file.
	JFRSettings string
	// ProfileSeconds is the length of each CPU profile.
	ProfileSeconds time.Duration
	Only           map[string]bool
	Sizes          sizes
	Quick          bool
	Keep           bool
	Logs           string
	// SlowLogs is where the sidecar logs of slow drain rounds are kept
	// (empty: a folder named after the run under the temporary directory).
	SlowLogs string
	LogLevel string
	// SidecarMemLimit is the sidecars' GOMEMLIMIT (empty: none, the
	// runtime's default), as the Helm chart sets it (95 % of the pod's
	// memory limit).
	SidecarMemLimit string
	Machine         string
	Progress        *os.File
}

func main() {
	var o options
	var only string
	var rounds, tp, drain, zstd, topics, subTopics int
	var subIdle, subIdleAfter time.Duration
	var subRate int
	var subBuiltin bool
	var subAdminRate float64
	var subPositions string
	var subSettle time.Duration
	var verifySigned bool
	var subGrowth string
	var svTypesFlag string
	var drainShapes string
	flag.StringVar(&o.Binary, "binary", "bin/geo-sidecar", "geo-sidecar binary to measure")
	flag.StringVar(&o.Versus, "versus", "", "also measure this second geo-sidecar binary as an extra arm of the throughput and drain rows (A/B test of a change)")
	flag.StringVar(&o.SlowLogs, "slow-logs", "", "keep the sidecar logs of slow drain rounds here (default: a folder named after the run under the temporary directory)")
	flag.StringVar(&drainShapes, "drain-partitions", "", "comma-separated partition counts of the drain rows (default 1,4,100)")
	flag.StringVar(&o.Out, "out", defaultOut, "write the markdown report here (empty: print only)")
	flag.StringVar(&o.Page, "page", "", "also replace the generated sections (the latest tables) of this page, e.g. docs/benchmark.md")
	flag.StringVar(&o.Profile, "profile", "", "run the sidecar with --pprof and save CPU, allocation and blocking profiles of each workload here (perturbs the measurement)")
	flag.StringVar(&o.JFR, "jfr", "", "record both brokers' JVMs with JDK Flight Recorder over each drain arm's copy, into this directory (perturbs the measurement)")
	flag.StringVar(&o.JFRSettings, "jfr-settings", "profile", "the -jfr recordings' settings: profile (Java samples every 10 ms) or a .jfc file, e.g. one with a 1 ms jdk.ExecutionSample period")
	flag.DurationVar(&o.ProfileSeconds, "profile-seconds", 15*time.Second, "length of each CPU profile")
	flag.BoolVar(&o.Quick, "quick", false, "small sizes, one round (a minute or two)")
	flag.BoolVar(&o.Keep, "keep", false, "keep the bench tenant's topics and namespaces afterwards")
	flag.StringVar(&o.LogLevel, "log-level", "info", "the sidecars' --log-level (debug shows each session's steps, with times)")
	flag.StringVar(&o.SidecarMemLimit, "sidecar-memlimit", "", "the sidecars' GOMEMLIMIT, such as 1020054732 (what the Helm chart sets for a 1Gi pod); default none")
	flag.StringVar(&o.Logs, "logs", "", "write each sidecar's log (and config) here, kept after the run (default: a temporary directory, removed)")
	flag.StringVar(&only, "only", "", "comma-separated workloads to run (tp1,tp4,latency,drain,zstd,scale,subs,subsvs,verify,wan); default all")
	flag.IntVar(&rounds, "rounds", 0, "rounds per workload (default 3, quick 1)")
	flag.IntVar(&tp, "tp-messages", 0, "messages per arm per throughput round")
	flag.IntVar(&drain, "drain-messages", 0, "backlog per arm per drain round (default 2500000: a copy of 10 s or more at the built-in's speed; quick 20000)")
	flag.IntVar(&zstd, "zstd-messages", 0, "messages per arm per ZSTD round")
	flag.IntVar(&topics, "scale-topics", 0, "topics of the scale run")
	flag.IntVar(&subTopics, "subs-topics", 0, "topics of the scale run with replicated subscriptions (subs)")
	flag.DurationVar(&subIdle, "subs-idle", 0, "each idle window of the subs run (default 5m, quick 10s)")
	flag.DurationVar(&subIdleAfter, "subs-idle-after", 0, "the subs run's idle window after the traffic (default: -subs-idle's)")
	flag.BoolVar(&verifySigned, "verify-signed", false, "run the continuous verifier's row with a marker key on both sidecars (signed origins, checked)")
	flag.DurationVar(&subSettle, "subs-settle", 0, "the subs run's pause after start-up (and after the traffic) before each idle window (default 30s; past 5m the windows see partitions at rest, after their first idle follow)")
	flag.Float64Var(&subAdminRate, "subs-admin-rate", 0, "the subs run sidecar's admin budget, requests per second per cluster (default: the sidecar's, 50)")
	flag.StringVar(&subPositions, "subs-positions", "", "the subs run sidecar's sidecar.positions: admin or servlet (default: the sidecar's, admin)")
	flag.IntVar(&subRate, "subs-rate", 0, "messages per second of the subs run's spread traffic (default 1000, quick 100)")
	flag.BoolVar(&subBuiltin, "subs-builtin", true, "the subs run also measures Pulsar's own geo-replication with replicated subscriptions at the same time (the built-in arm: as many topics in geobench-subs/b<N>, its own application, traffic at the same rate and probes interleaved with the sidecar's), for the follow p50/p99 and start-up beside the sidecar's; -subs-builtin=false: the sidecar alone")
	flag.StringVar(&subGrowth, "subs-growth", "", "comma-separated larger topic counts the subs run measures after its row, start-up and idle only (default 2500,5000; \"none\" for none)")
	flag.StringVar(&svTypesFlag, "subsvs-types", "", "comma-separated application types of the subsvs row, one run each (exclusive,failover,shared; default all)")
	flag.Parse()

	o.Sizes = fullSizes
	if o.Quick {
		o.Sizes = quickSizes
	}
	if rounds > 0 {
		o.Sizes.Rounds = rounds
	}
	if tp > 0 {
		o.Sizes.TPMessages = tp
	}
	if drain > 0 {
		o.Sizes.DrainMessages = drain
	}
	if zstd > 0 {
		o.Sizes.ZstdMessages = zstd
	}
	if topics > 0 {
		o.Sizes.ScaleTopics = topics
	}
	if subTopics > 0 {
		o.Sizes.Subs.Topics = subTopics
	}
	if subIdle > 0 {
		o.Sizes.Subs.Idle = subIdle
	}
	if subIdleAfter > 0 {
		o.Sizes.Subs.IdleAfter = subIdleAfter
	}
	o.Sizes.Verify.Signed = verifySigned
	if subSettle > 0 {
		o.Sizes.Subs.Settle = subSettle
	}
	if subRate > 0 {
		o.Sizes.Subs.Rate = subRate
	}
	o.Sizes.Subs.AdminRate = subAdminRate
	o.Sizes.Subs.Builtin = subBuiltin
	o.Sizes.Subs.Positions = subPositions
	if err := parseLists(&o.Sizes, subGrowth, svTypesFlag, drainShapes); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	o.Only = parseOnly(only)
	for w := range o.Only {
		if !slices.Contains(workloads, w) {
			fmt.Fprintf(os.Stderr, "bench: -only: no workload %q (have %s)\n", w, strings.Join(workloads, ","))
			os.Exit(2)
		}
	}
	o.Machine = machine()
	o.Progress = os.Stderr

	rep, err := run(o)
	if rep != nil {
		md := rep.Markdown() + rep.wanMarkdown()
		fmt.Println(md)
		if o.Out != "" {
			if werr := writeResults(o.Out, o, rep); werr != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", werr)
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "bench: report written to %s\n", o.Out)
		}
		if o.Page != "" && err == nil {
			if werr := updatePageAll(o.Page, o, rep); werr != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", werr)
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "bench: %s updated\n", o.Page)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// parseLists applies the list flags (-subs-growth, -subsvs-types,
// -drain-partitions) to sz.
func parseLists(sz *sizes, subGrowth, svTypesFlag, drainShapes string) error {
	if subGrowth != "" {
		sz.Subs.Growth = nil
		for _, f := range strings.Split(subGrowth, ",") {
			if f = strings.TrimSpace(f); f == "none" || f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				return fmt.Errorf("-subs-growth: %q is not a topic count", f)
			}
			sz.Subs.Growth = append(sz.Subs.Growth, n)
		}
	}
	if drainShapes != "" {
		sz.DrainShapes = nil
		for _, f := range strings.Split(drainShapes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return fmt.Errorf("-drain-partitions: %q is not a partition count", f)
			}
			sz.DrainShapes = append(sz.DrainShapes, n)
		}
	}
	if svTypesFlag != "" {
		sz.SubsVs.Types = nil
		for _, t := range strings.Split(svTypesFlag, ",") {
			t = strings.TrimSpace(t)
			if _, ok := svTypes[t]; !ok {
				return fmt.Errorf("-subsvs-types: no type %q (have %s)", t, strings.Join(svAllTypes, ","))
			}
			sz.SubsVs.Types = append(sz.SubsVs.Types, t)
		}
	}
	return nil
}

var workloads = []string{"tp1", "tp4", "latency", "drain", "zstd", "scale", "subs", "subsvs", "verify"}

func parseOnly(s string) map[string]bool {
	m := map[string]bool{}
	if s == "" {
		for _, w := range workloads {
			m[w] = true
		}
		return m
	}
	for _, w := range strings.Split(s, ",") {
		if w = strings.TrimSpace(w); w != "" {
			m[w] = true
		}
	}
	return m
}
