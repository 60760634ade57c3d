package replicator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// A target that takes sends but confirms none fills its own budget only:
// the pairs of another target go on, and the bytes held over all targets
// stay within the process's budget.
func TestTargetBudgetsIsolateTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gauge float64
		b := newTargetBudgets(200, []string{"west", "north", "west"}, func(v float64) { gauge = v })
		west, north := b.of("west"), b.of("north")
		if west == nil || north == nil || west == north {
			t.Fatalf("budgets west %p, north %p: want one each", west, north)
		}
		if b.of("south") != nil {
			t.Fatal("a budget for a target not given")
		}
		ctx := context.Background()
		// west stops confirming: its sends hold its whole share.
		for range 10 {
			if err := west.acquire(ctx, 10); err != nil {
				t.Fatal(err)
			}
		}
		blocked := make(chan error, 1)
		go func() { blocked <- west.acquire(ctx, 10) }()
		// north's pair copies 10 simulated minutes of entries meanwhile.
		copied := 0
		for start := time.Now(); time.Since(start) < 10*time.Minute; time.Sleep(time.Second) {
			if err := north.acquire(ctx, 30); err != nil {
				t.Fatal(err)
			}
			north.release(30)
			copied++
		}
		if copied < 600 {
			t.Errorf("north copied %d entries in 10 minutes while west held its budget, want 600", copied)
		}
		if err := north.acquire(ctx, 100); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-blocked:
			t.Fatalf("west acquired past its share: %v", err)
		default:
		}
		if gauge != 200 {
			t.Errorf("inflight gauge %v, want 200 (both shares full)", gauge)
		}
		west.release(10)
		if err := <-blocked; err != nil {
			t.Fatal(err)
		}
	})
}

// The sidecar gives each target cluster of the pairs it runs a budget of
// its own, an equal share of inflightBudget.
func TestSidecarBudgetPerTarget(t *testing.T) {
	cfg, err := config.Load("../config/testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sidecar.MarkerKeyFile, cfg.Sidecar.MarkerKeyAcceptedFile = "", "" // not on this machine; no budget depends on them
	for _, tt := range []struct {
		cluster string
		targets []string
	}{
		{"", []string{"west", "north_2", "east"}},
		{"east", []string{"west", "north_2"}},
	} {
		s, err := New(cfg, Options{Cluster: tt.cluster})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[*byteBudget]bool{}
		for _, target := range tt.targets {
			b := s.budgets.of(target)
			if b == nil || seen[b] {
				t.Fatalf("--cluster %q: target %s has budget %p, want one of its own", tt.cluster, target, b)
			}
			seen[b] = true
			if want := int64(inflightBudget / len(tt.targets)); b.limit != want {
				t.Errorf("--cluster %q: target %s limit %d, want %d", tt.cluster, target, b.limit, want)
			}
		}
	}
}
