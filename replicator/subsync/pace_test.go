package subsync

import (
	"testing"
	"time"
)

// TestPacerDue: when follow runs (due) and how long until it does (in),
// from the last follow's time, pause and newest snapshot, the data seen
// since, a bound set (soon) and whether the machine is idle.
func TestPacerDue(t *testing.T) {
	const interval = time.Second
	now := time.Unix(1_000_000, 0)
	idle := func() bool { return true }
	busy := func() bool { return false }
	tests := []struct {
		name    string
		p       *pacer // once, at, every, newestID, behind, soon
		data    bool
		newest  string
		machine func() bool
		wantDue bool
		wantIn  time.Duration
	}{
		{name: "never followed", p: &pacer{}, newest: "s1", machine: idle, wantDue: true, wantIn: 0},
		{name: "new snapshot, half an interval on", p: &pacer{once: true, at: now.Add(-interval / 2), every: idleFollow, newestID: "s0"},
			newest: "s1", machine: idle, wantDue: true, wantIn: 0},
		{name: "new snapshot, just before", p: &pacer{once: true, at: now.Add(-interval/2 + time.Millisecond), every: idleFollow, newestID: "s0"},
			newest: "s1", machine: idle, wantDue: false, wantIn: time.Millisecond},
		{name: "new snapshot, positions from the servlet's poll: at once", p: &pacer{once: true, at: now.Add(-time.Millisecond), every: idleFollow, newestID: "s0", cheap: true},
			newest: "s1", machine: idle, wantDue: true, wantIn: 0},
		{name: "no new snapshot, servlet: the pause holds", p: &pacer{once: true, at: now.Add(-time.Millisecond), every: idleFollow, newestID: "s1", cheap: true},
			newest: "s1", machine: idle, wantDue: false, wantIn: idleFollow - time.Millisecond},
		{name: "idle, idleFollow on", p: &pacer{once: true, at: now.Add(-idleFollow), every: interval, newestID: "s1"},
			newest: "s1", machine: idle, wantDue: true, wantIn: 0},
		{name: "idle, just before", p: &pacer{once: true, at: now.Add(-idleFollow + time.Millisecond), every: interval, newestID: "s1"},
			newest: "s1", machine: idle, wantDue: false, wantIn: time.Millisecond},
		{name: "data, the pause passed", p: &pacer{once: true, at: now.Add(-2 * interval), every: interval, newestID: "s1"},
			data: true, newest: "s1", machine: idle, wantDue: true, wantIn: -interval},
		{name: "behind, within the pause", p: &pacer{once: true, at: now.Add(-interval), every: 4 * interval, newestID: "s1", behind: true},
			newest: "s1", machine: idle, wantDue: false, wantIn: 3 * interval},
		{name: "machine busy, the pause passed", p: &pacer{once: true, at: now.Add(-2 * interval), every: interval, newestID: "s1"},
			newest: "s1", machine: busy, wantDue: true, wantIn: -interval},
		{name: "a bound reached", p: &pacer{once: true, at: now.Add(-time.Millisecond), every: idleFollow, newestID: "s1", soon: now},
			newest: "s1", machine: idle, wantDue: true, wantIn: 0},
		{name: "a bound ahead", p: &pacer{once: true, at: now.Add(-time.Millisecond), every: idleFollow, newestID: "s1", soon: now.Add(time.Second)},
			newest: "s1", machine: idle, wantDue: false, wantIn: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			p.dataSeen.Store(tt.data)
			if got := p.due(now, interval, tt.newest, tt.machine); got != tt.wantDue {
				t.Errorf("due = %v, want %v", got, tt.wantDue)
			}
			if got := p.in(now, interval, tt.newest, tt.machine); got != tt.wantIn {
				t.Errorf("in = %v, want %v", got, tt.wantIn)
			}
		})
	}
}

// TestPacerPaced: after a follow the pause is half an interval on a
// change, else doubles up to behindFollow, and up to idleFollow once
// nothing moved for staleBehind; a failed follow retries in half an
// interval, a rest waits idleFollow.
func TestPacerPaced(t *testing.T) {
	const interval = time.Second
	now := time.Unix(1_000_000, 0)
	tests := []struct {
		name      string
		every     time.Duration
		movedAgo  time.Duration
		changed   bool
		wantEvery time.Duration
	}{
		{"changed", behindFollow, time.Hour, true, interval / 2},
		{"first pause doubles", 0, 0, false, interval},
		{"doubles", 4 * time.Second, 0, false, 8 * time.Second},
		{"bounded by behindFollow", behindFollow, 0, false, behindFollow},
		{"stale: bounded by idleFollow", behindFollow, staleBehind, false, 2 * behindFollow},
		{"stale at most idleFollow", idleFollow, staleBehind, false, idleFollow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pacer{once: true, every: tt.every, movedAt: now.Add(-tt.movedAgo), at: now}
			p.paced(tt.changed, interval)
			if p.every != tt.wantEvery {
				t.Errorf("every = %v, want %v", p.every, tt.wantEvery)
			}
			if tt.changed && !p.movedAt.Equal(now) {
				t.Errorf("movedAt = %v, want the follow's time", p.movedAt)
			}
		})
	}
	p := &pacer{every: idleFollow}
	if p.retry(interval); p.every != interval/2 {
		t.Errorf("retry: every = %v, want %v", p.every, interval/2)
	}
	if p.rest(); p.every != idleFollow {
		t.Errorf("rest: every = %v, want %v", p.every, idleFollow)
	}
}

// TestPacerBeginAndBound: a follow begins with its bound cleared and
// tells whether the newest snapshot is new; by keeps the earliest bound.
func TestPacerBeginAndBound(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := &pacer{}
	if changed, prev := p.begin(now, "s1"); !changed || !prev.IsZero() {
		t.Errorf("first begin = %v, %v; want true, zero", changed, prev)
	}
	p.by(now.Add(3 * time.Second))
	p.by(now.Add(2 * time.Second))
	p.by(now.Add(4 * time.Second))
	p.by(time.Time{})
	if !p.soon.Equal(now.Add(2 * time.Second)) {
		t.Errorf("soon = %v, want the earliest bound", p.soon)
	}
	if changed, prev := p.begin(now.Add(time.Second), "s1"); changed || !prev.Equal(now) || !p.soon.IsZero() {
		t.Errorf("begin, same snapshot = %v, %v, soon %v; want false, the last follow's time, no bound", changed, prev, p.soon)
	}
	if changed, _ := p.begin(now.Add(2*time.Second), "s2"); !changed {
		t.Error("begin, new snapshot: not changed")
	}
}

// TestPacerSleep: a sleep is announced unless the machine turns busy;
// poke wakes an announced sleep once, and nothing that does not sleep.
func TestPacerSleep(t *testing.T) {
	tests := []struct {
		name      string
		busy      bool
		wantSleep bool
		wantWake  int
	}{
		{"idle: sleeps, a poke wakes it", false, true, 1},
		{"busy after the announcement: ticks", true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pacer{wake: make(chan struct{}, 1)}
			if got := p.sleep(func() bool { return tt.busy }); got != tt.wantSleep {
				t.Errorf("sleep = %v, want %v", got, tt.wantSleep)
			}
			p.poke()
			p.poke()
			if got := len(p.wake); got != tt.wantWake {
				t.Errorf("wake-ups = %d, want %d", got, tt.wantWake)
			}
			if p.sleeping.Load() {
				t.Error("still sleeping after a poke")
			}
		})
	}
}
