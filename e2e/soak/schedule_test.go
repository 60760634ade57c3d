package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var testTargets = Targets{
	Sidecars: []string{"east-a", "east-b", "west-a", "west-b"},
	Clusters: []string{"east", "west"},
	Topics:   []string{"plain", "parted", "single"},
}

func TestPlanDeterministicAndBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		seed int64
		d    time.Duration
	}{
		{"3m", 1, 3 * time.Minute},
		{"3m other seed", 42, 3 * time.Minute},
		{"30m", 7, 30 * time.Minute},
		{"negative seed", -5, 10 * time.Minute},
		{"shorter than warm-up", 3, 12 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Plan(tc.seed, tc.d, testTargets)
			b := Plan(tc.seed, tc.d, testTargets)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d gave two schedules:\n%v\n%v", tc.seed, a, b)
			}
			busy := map[string]time.Duration{}
			for i, e := range a {
				if e.At < warmUp || e.End() > tc.d-coolDown || e.For < 0 {
					t.Errorf("event %d %v outside [%s, %s]", i, e, warmUp, tc.d-coolDown)
				}
				if i > 0 && e.At < a[i-1].At {
					t.Errorf("event %d %v before event %d %v", i, e, i-1, a[i-1])
				}
				key := string(e.Kind) + e.Target
				if e.Kind == KindKill || e.Kind == KindTerm {
					key = "process " + e.Target
				}
				if busy[key] > e.At {
					t.Errorf("event %d %v while %s still had a fault (until %s)", i, e, e.Target, busy[key])
				}
				busy[key] = e.End()
			}
		})
	}
}

// TestPlanSeedsDiffer: the seed is what a failing run is repeated with,
// so different seeds must give different schedules.
func TestPlanSeedsDiffer(t *testing.T) {
	if reflect.DeepEqual(Plan(1, 30*time.Minute, testTargets), Plan(2, 30*time.Minute, testTargets)) {
		t.Fatal("seeds 1 and 2 gave the same schedule")
	}
}

// TestPlanCoversAndOverlaps: over 30 minutes every wired kind comes up,
// on every target, and faults overlap (the point of the soak).
func TestPlanCoversAndOverlaps(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 99} {
		evs := Plan(seed, 30*time.Minute, testTargets)
		kindsSeen := map[Kind]bool{}
		targets := map[string]bool{}
		overlaps := 0
		for i, e := range evs {
			kindsSeen[e.Kind] = true
			targets[e.Target] = true
			for _, f := range evs[:i] {
				if f.End() > e.At {
					overlaps++
					break
				}
			}
		}
		for _, k := range append(kinds, struct {
			kind     Kind
			weight   int
			min, max time.Duration
		}{kind: KindRestart}) {
			if !kindsSeen[k.kind] {
				t.Errorf("seed %d: no %s in 30 minutes", seed, k.kind)
			}
		}
		for _, s := range append(append([]string{}, testTargets.Sidecars...), testTargets.Clusters...) {
			if !targets[s] {
				t.Errorf("seed %d: no fault on %s in 30 minutes", seed, s)
			}
		}
		if overlaps < 10 {
			t.Errorf("seed %d: %d of %d faults overlap an earlier one, want at least 10", seed, overlaps, len(evs))
		}
	}
}

// TestPlanFixed pins one schedule, so that a change to Plan that would
// give a reported seed another schedule is seen (a failing seed must
// reproduce its run).
func TestPlanFixed(t *testing.T) {
	got := Plan(38, time.Minute, testTargets)
	want := []Event{
		{At: 18500 * time.Millisecond, Kind: KindTerm, Target: "east-a", For: 6590 * time.Millisecond},
		{At: 32800 * time.Millisecond, Kind: KindUnload, Target: "east plain"},
		{At: 37900 * time.Millisecond, Kind: KindBurst, Target: "west", For: 9938 * time.Millisecond},
	}
	for i := range got {
		got[i].At = got[i].At.Truncate(100 * time.Millisecond) // printed to 0.1 s
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Plan(38, 1m) changed:\n%v", got)
	}
}

// TestPlanRestarts: broker restarts come one at a time, each ready again
// (restartTakes after its down time) before the end's cool-down, none in
// a run too short for one; and they leave the other faults of a seed
// where they were (drawn from a stream of their own).
func TestPlanRestarts(t *testing.T) {
	for _, tc := range []struct {
		seed int64
		d    time.Duration
		some bool
	}{
		{1, 30 * time.Minute, true},
		{6491954228745623628, 3 * time.Minute, true},
		{2, 2 * time.Minute, true},
		{3, time.Minute, false},
	} {
		evs := Plan(tc.seed, tc.d, testTargets)
		var restarts []Event
		for _, e := range evs {
			if e.Kind == KindRestart {
				restarts = append(restarts, e)
			}
		}
		if (len(restarts) > 0) != tc.some {
			t.Errorf("seed %d over %s: %d restarts", tc.seed, tc.d, len(restarts))
		}
		for i, e := range restarts {
			if e.At < restartFirst || e.End()+restartTakes > tc.d-coolDown || e.For < restartMin || e.For > restartMax {
				t.Errorf("seed %d: restart %v out of bounds", tc.seed, e)
			}
			if i > 0 && restarts[i-1].End()+restartTakes > e.At {
				t.Errorf("seed %d: restart %v while %v may still be starting", tc.seed, e, restarts[i-1])
			}
		}
		if len(planRestarts(tc.seed, tc.d, nil)) != 0 {
			t.Errorf("seed %d: restarts without clusters", tc.seed)
		}
	}
}

// TestPlanReportedSeedKept: wiring restarts left the other faults of a
// reported seed where they were: seed 6491954228745623628's 3-minute
// schedule (issue 38's first duplicates) as its report printed it.
func TestPlanReportedSeedKept(t *testing.T) {
	want := []string{
		"+23.9s kill-9 west-b 10.288s", "+36.4s burst west 7.845s", "+47.3s unload east parted 0s",
		"+58.7s kill-9 east-a 6.119s", "+1m10.6s kill-9 east-b 11.393s", "+1m26s kill-9 east-a 13.998s",
		"+1m49.1s unload west plain 0s", "+1m56s unload east plain 0s", "+2m16s kill-9 east-b 7.868s",
		"+2m21s kill-9 west-a 12.292s", "+2m40.8s burst west 5.29s", "+2m47.3s unload east plain 0s",
	}
	var got []string
	for _, e := range Plan(6491954228745623628, 3*time.Minute, testTargets) {
		if e.Kind != KindRestart {
			got = append(got, fmt.Sprintf("%s %s %s %s", fmtOffset(e.At), e.Kind, e.Target, e.For))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the seed's faults moved:\n%s", strings.Join(got, "\n"))
	}
}

// TestPlanOfKeepsTheSeedsTimes: a plan limited to some kinds is the full
// plan less the others, at the same times.
func TestPlanOfKeepsTheSeedsTimes(t *testing.T) {
	full := Plan(6491954228745623628, 3*time.Minute, testTargets)
	only := []Kind{KindKill, KindTerm, KindUnload, KindBurst}
	got := PlanOf(6491954228745623628, 3*time.Minute, testTargets, only)
	var want []Event
	for _, e := range full {
		if slices.Contains(only, e.Kind) {
			want = append(want, e)
		}
	}
	if len(got) == 0 || len(got) == len(full) || !reflect.DeepEqual(got, want) {
		t.Errorf("PlanOf = %v\nwant %v (of %d)", got, want, len(full))
	}
}

// TestPlanWAN: WAN faults come one at a time on the link, each of the
// three kinds over 30 minutes, from wanFirst on, within their bounds and
// ended by the cool-down; none without links; and they leave every other
// fault of a seed where it was (a stream of their own): the reported
// seed's schedule with a link is the one without, plus WAN faults.
func TestPlanWAN(t *testing.T) {
	withLink := testTargets
	withLink.Links = []string{"east-b north"}
	for _, tc := range []struct {
		seed int64
		d    time.Duration
	}{{1, 30 * time.Minute}, {38, 3 * time.Minute}, {-7, 10 * time.Minute}, {6491954228745623628, 3 * time.Minute}} {
		evs := Plan(tc.seed, tc.d, withLink)
		var wanEvs, rest []Event
		for _, e := range evs {
			switch e.Kind {
			case KindLinkCut, KindHalfOpen, KindSlowLink:
				wanEvs = append(wanEvs, e)
			default:
				rest = append(rest, e)
			}
		}
		if !reflect.DeepEqual(rest, Plan(tc.seed, tc.d, testTargets)) {
			t.Errorf("seed %d over %s: a link moved the other faults", tc.seed, tc.d)
		}
		if len(wanEvs) == 0 {
			t.Errorf("seed %d over %s: no WAN fault", tc.seed, tc.d)
		}
		seen := map[Kind]bool{}
		for i, e := range wanEvs {
			seen[e.Kind] = true
			if e.Target != "east-b north" {
				t.Errorf("seed %d: %v on another link", tc.seed, e)
			}
			if e.At < wanFirst || e.End() > tc.d-coolDown || e.For < wanMin/2 || e.For > wanMax {
				t.Errorf("seed %d: %v out of bounds", tc.seed, e)
			}
			if i > 0 && wanEvs[i-1].End()+wanGapMin > e.At {
				t.Errorf("seed %d: %v too close after %v", tc.seed, e, wanEvs[i-1])
			}
		}
		if tc.d >= 30*time.Minute && len(seen) != 3 {
			t.Errorf("seed %d over %s: kinds %v, want all three", tc.seed, tc.d, seen)
		}
		if !reflect.DeepEqual(Plan(tc.seed, tc.d, withLink), evs) {
			t.Errorf("seed %d: two WAN schedules", tc.seed)
		}
	}
	if got := planWAN(1, 30*time.Minute, nil); len(got) != 0 {
		t.Errorf("WAN faults without links: %v", got)
	}
}
