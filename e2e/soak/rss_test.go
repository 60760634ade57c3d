package main

import (
	"testing"
	"time"
)

// TestJudgeRSS: each instance's longest life is judged, the sample at
// the end of the warm-up (5 minutes, or the first fifth of a shorter
// life) against the last; growth beyond 10 % is flagged, and fails only
// after a full warm-up.
func TestJudgeRSS(t *testing.T) {
	// life builds samples every 5 s over span, RSS from kb(at).
	life := func(inst string, n int, span time.Duration, kb func(time.Duration) int64) rssLife {
		l := rssLife{Instance: inst, Life: n}
		for at := time.Duration(0); at <= span; at += 5 * time.Second {
			l.Samples = append(l.Samples, rssSample{At: at, KB: kb(at)})
		}
		return l
	}
	flat := func(time.Duration) int64 { return 50000 }
	// Grows fast in the first minute, then by growth over the rest.
	warming := func(span time.Duration, growth float64) func(time.Duration) int64 {
		return func(at time.Duration) int64 {
			if at < time.Minute {
				return 20000 + int64(30000*at/time.Minute)
			}
			return 50000 + int64(50000*growth*float64(at-time.Minute)/float64(span-time.Minute))
		}
	}
	for _, tc := range []struct {
		name          string
		lives         []rssLife
		life          int
		warmup        time.Duration
		warm, end     int64
		flagged, fail bool
		note          bool
	}{
		{name: "flat 30 minutes", lives: []rssLife{life("a", 1, 30*time.Minute, flat)},
			life: 1, warmup: 5 * time.Minute, warm: 50000, end: 50000},
		{name: "warm-up growth is not judged", lives: []rssLife{life("a", 1, 30*time.Minute, warming(30*time.Minute, 0))},
			life: 1, warmup: 5 * time.Minute, warm: 50000, end: 50000},
		{name: "grows 9 % after warm-up", lives: []rssLife{life("a", 1, 30*time.Minute, warming(30*time.Minute, 0.09))},
			life: 1, warmup: 5 * time.Minute, warm: 50620, end: 54500},
		{name: "grows 20 % after a full warm-up: fails", lives: []rssLife{life("a", 1, 30*time.Minute, warming(30*time.Minute, 0.25))},
			life: 1, warmup: 5 * time.Minute, warm: 51724, end: 62500, flagged: true, fail: true},
		{name: "short life: first fifth, flagged only", lives: []rssLife{life("a", 1, 3*time.Minute, func(at time.Duration) int64 { return 40000 + int64(at/time.Second)*100 })},
			life: 1, warmup: 36 * time.Second, warm: 44000, end: 58000, flagged: true},
		{name: "longest life judged, not the last", lives: []rssLife{
			life("a", 1, 20*time.Minute, flat),
			life("a", 2, 2*time.Minute, func(time.Duration) int64 { return 90000 }),
		}, life: 1, warmup: 4 * time.Minute, warm: 50000, end: 50000},
		{name: "a spike that passes is not growth", lives: []rssLife{life("a", 1, 30*time.Minute, func(at time.Duration) int64 {
			if at >= 15*time.Minute && at < 16*time.Minute {
				return 70000
			}
			return 50000
		})}, life: 1, warmup: 5 * time.Minute, warm: 50000, end: 50000},
		{name: "too short to judge", lives: []rssLife{life("a", 1, 5*time.Second, flat)}, life: 1, note: true},
		{name: "shrinking is fine", lives: []rssLife{life("a", 1, 30*time.Minute, func(at time.Duration) int64 { return 60000 - int64(at/time.Minute)*100 })},
			life: 1, warmup: 5 * time.Minute, warm: 59500, end: 57000},
	} {
		js := judgeRSS(tc.lives)
		if len(js) != 1 {
			t.Fatalf("%s: %d judgements, want 1", tc.name, len(js))
		}
		j := js[0]
		if j.Life != tc.life || j.Lives != len(tc.lives) {
			t.Errorf("%s: life %d of %d, want %d of %d", tc.name, j.Life, j.Lives, tc.life, len(tc.lives))
		}
		if (j.Note != "") != tc.note {
			t.Errorf("%s: note %q", tc.name, j.Note)
		}
		if tc.note {
			continue
		}
		if j.Warmup != tc.warmup || j.WarmKB != tc.warm || j.EndKB != tc.end {
			t.Errorf("%s: warm-up %s at %d kB, end %d kB; want %s at %d, end %d", tc.name, j.Warmup, j.WarmKB, j.EndKB, tc.warmup, tc.warm, tc.end)
		}
		if j.Flagged != tc.flagged || j.Fails != tc.fail {
			t.Errorf("%s: flagged %v fails %v (growth %.3f), want %v %v", tc.name, j.Flagged, j.Fails, j.Growth, tc.flagged, tc.fail)
		}
		if j.PeakKB < j.EndKB || j.PeakKB < j.WarmKB {
			t.Errorf("%s: peak %d below warm %d or end %d", tc.name, j.PeakKB, j.WarmKB, j.EndKB)
		}
	}
}

// TestJudgeRSSInstances: one judgement per instance, in the order first
// seen.
func TestJudgeRSSInstances(t *testing.T) {
	s := []rssSample{{0, 1}, {5 * time.Second, 1}, {10 * time.Second, 1}}
	js := judgeRSS([]rssLife{{Instance: "west-a", Life: 1, Samples: s}, {Instance: "east-a", Life: 1, Samples: s}, {Instance: "west-a", Life: 2, Samples: s}})
	if len(js) != 2 || js[0].Instance != "west-a" || js[1].Instance != "east-a" || js[0].Lives != 2 || js[0].Life != 1 {
		t.Errorf("got %+v", js)
	}
}

func TestVmRSS(t *testing.T) {
	for _, tc := range []struct {
		status string
		kb     int64
		ok     bool
	}{
		{"Name:\tgeo-sidecar\nVmPeak:\t  900000 kB\nVmRSS:\t   51234 kB\nRssAnon:\t 40000 kB\n", 51234, true},
		{"Name:\tzombie\nState:\tZ (zombie)\n", 0, false},
		{"VmRSS:\n", 0, false},
		{"VmRSS:\tlots kB\n", 0, false},
	} {
		kb, ok := vmRSS([]byte(tc.status))
		if kb != tc.kb || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.status, kb, ok, tc.kb, tc.ok)
		}
	}
}
