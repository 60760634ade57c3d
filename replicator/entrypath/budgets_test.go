package entrypath

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A target that takes sends but confirms none fills its own budget only:
// the pairs of another target go on, and the bytes held over all targets
// stay within the process's budget.
func TestTargetBudgetsIsolateTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gauge float64
		b := NewTargetBudgets(200, []string{"west", "north", "west"}, func(v float64) { gauge = v })
		west, north := b.Of("west"), b.Of("north")
		if west == nil || north == nil || west == north {
			t.Fatalf("budgets west %p, north %p: want one each", west, north)
		}
		if b.Of("south") != nil {
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
