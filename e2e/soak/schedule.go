package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a fault the soak applies.
type Kind string

// The faults the runner applies today, on the test bed's east and west
// with the harness's means (processes it started, the admin API, its own
// producers). Each Event of one of these kinds ends by its At+For.
const (
	// KindKill sends SIGKILL to a sidecar instance (kill -9, as a crash)
	// and starts it again after For.
	KindKill Kind = "kill-9"
	// KindTerm sends SIGTERM to a sidecar instance (a clean stop, as a
	// rolling update) and starts it again after For.
	KindTerm Kind = "sigterm"
	// KindUnload unloads one topic (every partition) on one cluster through
	// the admin API: the broker closes its producers and cursors and
	// reloads the topic, rebuilding its deduplication state. Instant.
	KindUnload Kind = "unload"
	// KindDedupOff turns the namespace's deduplication off on one cluster
	// (where the other side's sidecars write) for For, then on again.
	KindDedupOff Kind = "dedup-off"
	// KindBurst multiplies the load produced on one cluster by
	// burstFactor for For, so that the sidecars' send and receive
	// budgets fill.
	KindBurst Kind = "burst"
	// KindRestart kills one cluster's broker (kill -9 of the test bed's
	// standalone JVM, as a crash: in the pair every cluster is a source
	// and a target) and starts it again after For, holding the test
	// bed's exclusive lock on the cluster meanwhile
	// (e2e.HoldClustersExclusive), as a test that restarts a cluster
	// does. Drawn apart from the others (see planRestarts).
	KindRestart Kind = "restart"
	// KindLinkCut cuts the WAN proxy's link between a sidecar instance
	// and a cluster (Target "instance cluster") for For: every connection
	// reset, and each new one reset at once (the far side refuses).
	// Drawn apart from the others, as restarts are (see planWAN).
	KindLinkCut Kind = "link-cut"
	// KindHalfOpen makes that link half-open for For: every byte of the
	// connections open then, and of those made meanwhile, dropped in
	// both directions, no close passed on, for ever (a NAT that lost its
	// state); only keep-alives tell the ends. Connections made after it
	// work.
	KindHalfOpen Kind = "half-open"
	// KindSlowLink makes that link deliver at slowFraction of its normal
	// rate for For.
	KindSlowLink Kind = "slow-link"
	// KindReconfig: every instance's config gets the added topic under
	// topic_patterns and the instances are restarted one by one with it
	// (SIGTERM, start, the next 2 s after: a rolling update; the sidecar
	// has no reload of its own, neither SIGHUP nor a watch of the file).
	// Not drawn: at reconfigAt of a run with Options.Reconfig.
	KindReconfig Kind = "config-change"
	// KindNewTopic: the late topics' load begins (not drawn: at
	// lateAt of every run), so that a topic created under the sidecars'
	// topic_patterns meets the faults that follow.
	KindNewTopic Kind = "new-topic"
)

// NotWired names the faults issue 38 asks for that the runner does not
// apply yet: they need the WAN proxy between the sidecars and the
// clusters, or a config change under a running instance.
var NotWired = []string{
	"producers with Java's client",
	"chunked messages",
	"Key_Shared applications",
}

// Event is one fault of the schedule: Kind applied to Target at At after
// the start, lasting For (0 for instant faults).
type Event struct {
	At     time.Duration
	Kind   Kind
	Target string
	For    time.Duration
}

// End is when the fault is over.
func (e Event) End() time.Duration { return e.At + e.For }

func (e Event) String() string {
	if e.For == 0 {
		return fmt.Sprintf("%8s  %-9s %s", fmtOffset(e.At), e.Kind, e.Target)
	}
	return fmt.Sprintf("%8s  %-9s %s for %s", fmtOffset(e.At), e.Kind, e.Target, e.For)
}

func fmtOffset(d time.Duration) string { return "+" + d.Truncate(100*time.Millisecond).String() }

// Targets are what the faults can hit: sidecar instances by name
// (kill-9, sigterm), clusters (dedup-off, burst, restart) and "cluster topic"
// pairs (unload).
type Targets struct {
	Sidecars []string
	Clusters []string
	Topics   []string // short topic names, on every cluster
	// Links are the WAN proxy's links between a sidecar instance and a
	// cluster, "instance cluster" (link-cut, half-open, slow-link).
	Links []string
}

// Schedule bounds: the first fault comes after warmUp (the sidecars have
// found their topics), every fault ends coolDown before the duration,
// and faults start gapMin to gapMax apart, shorter than most faults last,
// so that they overlap.
const (
	warmUp   = 10 * time.Second
	coolDown = 5 * time.Second
	gapMin   = 2 * time.Second
	gapMax   = 20 * time.Second
)

// kinds and how long each lasts (uniform in [min, max]); the weights
// make the processes' faults, the ones that met in the defects found so
// far, the most frequent.
var kinds = []struct {
	kind     Kind
	weight   int
	min, max time.Duration
}{
	{KindKill, 4, time.Second, 15 * time.Second},
	{KindTerm, 2, time.Second, 15 * time.Second},
	{KindUnload, 3, 0, 0},
	{KindDedupOff, 1, 10 * time.Second, 60 * time.Second},
	{KindBurst, 2, 3 * time.Second, 10 * time.Second},
}

// Plan draws the fault schedule of a run of duration d from seed: the
// same seed, duration and targets give the same schedule. Faults start
// from warmUp on, in order of At, and each ends by d-coolDown (one that
// would not is shortened, or left out when it cannot fit). A sidecar
// instance, or a cluster's deduplication or load, takes one fault at a
// time (a kill of an instance that is down would do nothing); different
// targets' faults overlap freely.
func Plan(seed int64, d time.Duration, t Targets) []Event {
	return PlanOf(seed, d, t, nil)
}

// PlanOf is Plan keeping only the faults of the kinds in only (all when
// only is nil): the same seed and duration give the same faults at the
// same times, less the kinds left out, so a short soak beside other tests
// (make test's) can leave out what would disturb them (broker restarts)
// or what its checker would count against it (deduplication off).
func PlanOf(seed int64, d time.Duration, t Targets, only []Kind) []Event {
	all := plan(seed, d, t)
	if only == nil {
		return all
	}
	return slices.DeleteFunc(all, func(e Event) bool { return !slices.Contains(only, e.Kind) })
}

func plan(seed int64, d time.Duration, t Targets) []Event {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15))
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	end := d - coolDown
	busy := map[string]time.Duration{} // kind class + target -> end of its fault
	var out []Event
	for at := warmUp + between(r, 0, gapMax); at < end; at += between(r, gapMin, gapMax) {
		w := r.IntN(total)
		k := kinds[0]
		for _, c := range kinds {
			if w < c.weight {
				k = c
				break
			}
			w -= c.weight
		}
		var target, class string
		switch k.kind {
		case KindKill, KindTerm:
			target, class = pick(r, t.Sidecars), "process"
		case KindUnload:
			if len(t.Clusters) > 0 && len(t.Topics) > 0 {
				target = pick(r, t.Clusters) + " " + pick(r, t.Topics)
			}
			class = "unload"
		case KindDedupOff:
			target, class = pick(r, t.Clusters), "dedup"
		case KindBurst:
			target, class = pick(r, t.Clusters), "burst"
		}
		dur := between(r, k.min, k.max)
		if target == "" || busy[class+" "+target] > at {
			continue
		}
		if at+dur > end {
			dur = end - at
			if k.min > 0 && dur < k.min/2 {
				continue
			}
		}
		busy[class+" "+target] = at + dur
		out = append(out, Event{At: at, Kind: k.kind, Target: target, For: dur})
	}
	out = append(out, planRestarts(seed, d, t.Clusters)...)
	out = append(out, planWAN(seed, d, t.Links)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Broker restarts: one at a time (a standalone broker takes up to
// restartTakes to be ready again, and the exclusive lock on a cluster
// waits for the other lane's test), the first from restartFirst on, the
// next restartGapMin to restartGapMax after the previous one's start,
// down for restartMin to restartMax, and none that would not be ready
// again restartTakes before the end's coolDown.
const (
	restartFirst  = 30 * time.Second
	restartGapMin = 2 * time.Minute
	restartGapMax = 6 * time.Minute
	restartMin    = 2 * time.Second
	restartMax    = 10 * time.Second
	restartTakes  = 45 * time.Second
)

// planRestarts draws the broker restarts of a run from a random stream
// of their own, so that wiring them left every other fault of a seed
// where it was: a seed reported before restarts were wired reproduces
// its faults, with restarts added.
func planRestarts(seed int64, d time.Duration, clusters []string) []Event {
	if len(clusters) == 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(uint64(seed)^0x5f0e2b1d3c4a6978, uint64(seed)+0x2545f4914f6cdd1d))
	var out []Event
	for at := restartFirst + between(r, 0, restartFirst); ; at += between(r, restartGapMin, restartGapMax) {
		dur := between(r, restartMin, restartMax)
		target := pick(r, clusters)
		if at+dur+restartTakes > d-coolDown {
			return out
		}
		out = append(out, Event{At: at, Kind: KindRestart, Target: target, For: dur})
	}
}

// WAN faults: one at a time on a link (the proxy applies a fault to the
// whole link; two at once would hide each other), the first from
// wanFirst on, the next wanGapMin to wanGapMax after the previous one's
// end, each of the three kinds equally likely and lasting wanMin to
// wanMax; none past the end's coolDown (one that would not end by then
// is shortened, or left out under wanMin/2).
const (
	wanFirst  = 15 * time.Second
	wanGapMin = 5 * time.Second
	wanGapMax = 40 * time.Second
	wanMin    = 5 * time.Second
	wanMax    = 30 * time.Second
	// slowFraction of the link's normal rate is what a slow link
	// delivers.
	slowFraction = 0.05
)

// planWAN draws the WAN faults of a run from a random stream of their
// own, as planRestarts does, so that a seed reported before they were
// wired keeps every other fault where it was; without links (the short
// soak, a run without north) there are none.
func planWAN(seed int64, d time.Duration, links []string) []Event {
	if len(links) == 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(uint64(seed)^0x3c6ef372fe94f82b, uint64(seed)+0x6a09e667f3bcc909))
	wanKinds := []Kind{KindLinkCut, KindHalfOpen, KindSlowLink}
	end := d - coolDown
	var out []Event
	for at := wanFirst + between(r, 0, wanGapMax); at < end; {
		k := wanKinds[r.IntN(len(wanKinds))]
		target := pick(r, links)
		dur := between(r, wanMin, wanMax)
		if at+dur > end {
			dur = end - at
			if dur < wanMin/2 {
				break
			}
		}
		out = append(out, Event{At: at, Kind: k, Target: target, For: dur})
		at += dur + between(r, wanGapMin, wanGapMax)
	}
	return out
}

// between draws a duration uniformly in [lo, hi], to the millisecond.
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
}

func pick(r *rand.Rand, from []string) string {
	if len(from) == 0 {
		return ""
	}
	return from[r.IntN(len(from))]
}

// lateAt is when a run of duration d starts its late topics' load: a
// third in, with two thirds of the faults after it.
func lateAt(d time.Duration) time.Duration { return (d / 3).Truncate(time.Second) }

// reconfigAt is when a run of duration d with the config change makes
// it: half-way, after the late topic (a third in), with the other half
// of the faults after it.
func reconfigAt(d time.Duration) time.Duration { return (d / 2).Truncate(time.Second) }

// lateNames names the late topics, for the timeline.
func lateNames() string {
	var names []string
	for _, tk := range loadTopics {
		if tk.Late {
			names = append(names, tk.Short)
		}
	}
	return strings.Join(names, " ")
}
