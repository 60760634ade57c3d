package main

// The sidecars' memory over the run (issue 38: flat after the first 5
// minutes, within 10 %). Each instance's resident set (VmRSS) is sampled
// every few seconds, per life of the process (a fault's kill or stop and
// the restart begin a new life); the longest life of each instance is
// judged.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// rssEvery is the sampling period.
const rssEvery = 5 * time.Second

// The judgement's knobs: the warm-up is rssWarmup into a life, or the
// first fifth of the life when that is shorter (a short run); growth
// beyond rssGrowth after it is flagged, and fails the run only after a
// full warm-up (a life of a few minutes is still filling its caches).
const (
	rssWarmup = 5 * time.Minute
	rssGrowth = 0.10
)

// rssSample is one VmRSS reading, At from the start of its life.
type rssSample struct {
	At time.Duration
	KB int64
}

// rssLife is one life of one instance: its samples in order.
type rssLife struct {
	Instance string
	Life     int // 1 for the first start
	Start    time.Time
	Samples  []rssSample
}

// span is how long the life was seen running.
func (l rssLife) span() time.Duration {
	if len(l.Samples) == 0 {
		return 0
	}
	return l.Samples[len(l.Samples)-1].At
}

// RSSJudgement is the report's line for one instance: its longest life,
// the RSS at the end of the warm-up and at the end, the peak after the
// warm-up, and whether it grew beyond rssGrowth.
type RSSJudgement struct {
	Instance      string
	Life, Lives   int
	Span, Warmup  time.Duration
	WarmKB, EndKB int64
	PeakKB        int64 // highest after the warm-up
	Growth        float64
	Flagged       bool   // end beyond rssGrowth above the warm value
	Fails         bool   // flagged after a full warm-up
	Note          string // why it is not judged, when it is not
}

// judgeRSS picks each instance's longest life and judges it: the sample
// at the end of the warm-up (the first at or after it) against the last.
// A life with fewer than three samples is too short to judge.
func judgeRSS(lives []rssLife) []RSSJudgement {
	longest := map[string]rssLife{}
	count := map[string]int{}
	var order []string
	for _, l := range lives {
		if _, ok := count[l.Instance]; !ok {
			order = append(order, l.Instance)
		}
		count[l.Instance]++
		if cur, ok := longest[l.Instance]; !ok || l.span() > cur.span() {
			longest[l.Instance] = l
		}
	}
	var out []RSSJudgement
	for _, name := range order {
		l := longest[name]
		j := RSSJudgement{Instance: name, Life: l.Life, Lives: count[name], Span: l.span()}
		if len(l.Samples) < 3 {
			j.Note = "too short to judge"
			out = append(out, j)
			continue
		}
		j.Warmup = min(rssWarmup, j.Span/5)
		warm := len(l.Samples) - 1
		for i, s := range l.Samples {
			if s.At >= j.Warmup {
				warm = i
				break
			}
		}
		j.WarmKB = l.Samples[warm].KB
		j.EndKB = l.Samples[len(l.Samples)-1].KB
		for _, s := range l.Samples[warm:] {
			j.PeakKB = max(j.PeakKB, s.KB)
		}
		if j.WarmKB > 0 {
			j.Growth = float64(j.EndKB-j.WarmKB) / float64(j.WarmKB)
		}
		j.Flagged = j.Growth > rssGrowth
		j.Fails = j.Flagged && j.Warmup >= rssWarmup
		out = append(out, j)
	}
	return out
}

// vmRSS reads VmRSS (kB) from a /proc/PID/status text.
func vmRSS(status []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("VmRSS:")) {
			continue
		}
		f := bytes.Fields(line[len("VmRSS:"):])
		if len(f) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		return kb, err == nil
	}
	return 0, false
}

// rssSampler samples every instance's current life until its Run's ctx
// ends.
type rssSampler struct {
	insts []*instance

	mu    sync.Mutex
	lives map[string]map[int]*rssLife
}

func newRSSSampler(insts []*instance) *rssSampler {
	return &rssSampler{insts: insts, lives: map[string]map[int]*rssLife{}}
}

// Run samples every rssEvery until ctx is done.
func (r *rssSampler) Run(ctx context.Context) {
	t := time.NewTicker(rssEvery)
	defer t.Stop()
	for {
		r.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *rssSampler) sample() {
	for _, in := range r.insts {
		pid, life, started, ok := in.Life()
		if !ok {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue // exited meanwhile
		}
		kb, ok := vmRSS(status)
		if !ok {
			continue
		}
		r.mu.Lock()
		if r.lives[in.Name] == nil {
			r.lives[in.Name] = map[int]*rssLife{}
		}
		l := r.lives[in.Name][life]
		if l == nil {
			l = &rssLife{Instance: in.Name, Life: life, Start: started}
			r.lives[in.Name][life] = l
		}
		l.Samples = append(l.Samples, rssSample{At: time.Since(started), KB: kb})
		r.mu.Unlock()
	}
}

// Lives returns every life sampled, in the instances' order, each
// instance's lives in order.
func (r *rssSampler) Lives() []rssLife {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []rssLife
	for _, in := range r.insts {
		for _, n := range slices.Sorted(maps.Keys(r.lives[in.Name])) {
			out = append(out, *r.lives[in.Name][n])
		}
	}
	return out
}
