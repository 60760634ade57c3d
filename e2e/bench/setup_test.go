package main

import (
	"testing"
	"time"
)

// TestWatch: a count that stands still for the limit stalls, from the
// start as after a move; any move, down included, restarts the clock;
// limit 0 never stalls.
func TestWatch(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type obs struct {
		n    int64
		at   int
		want time.Duration
	}
	for _, tt := range []struct {
		name  string
		from  int64
		limit time.Duration
		obs   []obs
	}{
		{"never starts", 10, time.Minute, []obs{{10, 30, 0}, {10, 59, 0}, {10, 60, time.Minute}}},
		{"moves, then stops", 0, time.Minute, []obs{{5, 30, 0}, {5, 89, 0}, {5, 90, time.Minute}}},
		{"keeps moving", 0, time.Minute, []obs{{1, 50, 0}, {2, 100, 0}, {3, 150, 0}, {4, 200, 0}}},
		{"a move down counts (a reloaded topic's counters)", 100, time.Minute, []obs{{0, 50, 0}, {0, 100, 0}, {0, 110, time.Minute}}},
		{"no limit", 0, 0, []obs{{0, 3600, 0}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWatch(tt.from, tt.limit, t0)
			for i, o := range tt.obs {
				if got := w.observe(o.n, at(o.at)); got != o.want {
					t.Errorf("observation %d (%d at %d s): stalled %v, want %v", i, o.n, o.at, got, o.want)
				}
			}
		})
	}
}
