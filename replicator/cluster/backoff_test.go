package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// within reports whether d is base ±20%, the jitter backoff promises.
func within(d, base time.Duration) bool {
	return d >= base-base/5 && d <= base+base/5
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	const min, max = 100 * time.Millisecond, time.Second
	bases := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	distinct := map[time.Duration]bool{}
	for range 200 { // jitter is random: check the bounds many times
		b := NewBackoff(min, max)
		for i, base := range bases {
			base *= time.Millisecond
			d := b.Next()
			if !within(d, base) {
				t.Fatalf("attempt %d: next() = %v, want %v ±20%%", i, d, base)
			}
			if i == 0 {
				distinct[d] = true
			}
		}
	}
	if len(distinct) < 2 {
		t.Errorf("200 first delays all equal %v: no jitter", distinct)
	}
}

func TestBackoffReset(t *testing.T) {
	b := NewBackoff(100*time.Millisecond, 10*time.Second)
	for range 5 {
		b.Next()
	}
	if d := b.Next(); within(d, 100*time.Millisecond) {
		t.Fatalf("after 5 attempts next() = %v, still at the minimum", d)
	}
	b.Reset()
	if d := b.Next(); !within(d, 100*time.Millisecond) {
		t.Errorf("after reset next() = %v, want 100ms ±20%%", d)
	}
	if d := b.Next(); !within(d, 200*time.Millisecond) {
		t.Errorf("second after reset next() = %v, want 200ms ±20%%", d)
	}
}

func TestBackoffMinEqualsMax(t *testing.T) {
	b := NewBackoff(time.Second, time.Second)
	for range 10 {
		if d := b.Next(); !within(d, time.Second) {
			t.Fatalf("next() = %v, want 1s ±20%%", d)
		}
	}
}

func TestSleep(t *testing.T) {
	t.Run("full wait", func(t *testing.T) {
		if !Sleep(context.Background(), time.Millisecond) {
			t.Error("Sleep() = false on a live context, want true")
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if Sleep(ctx, time.Hour) {
			t.Error("Sleep() = true on a cancelled context, want false")
		}
	})
	t.Run("cancelled during", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			if Sleep(ctx, time.Hour) {
				t.Error("Sleep() = true, want false when ctx ends first")
			}
			if got := time.Since(start); got != time.Second {
				t.Errorf("sleep returned after %v (fake clock), want when ctx ended (1s)", got)
			}
		})
	})
}

func TestLimiterNil(t *testing.T) {
	for _, rate := range []float64{0, -1} {
		if l := NewLimiter(rate); l != nil {
			t.Errorf("NewLimiter(%v) = %+v, want nil (unlimited)", rate, l)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var l *Limiter
	if err := l.Wait(ctx, 1e9); err != nil {
		t.Errorf("nil limiter: wait() = %v, want nil at once", err)
	}
}

// The limiter tests run on synctest's fake clock, so the delays they check
// are exact and cost no real time.

func TestLimiterBurstThenRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := NewLimiter(1000) // burst 100
		start := time.Now()
		for range 100 {
			if err := l.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the burst took %v, want no wait", d)
		}
		for range 100 {
			if err := l.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d < 99*time.Millisecond || d > 101*time.Millisecond {
			t.Errorf("200 tokens at 1000/s with a burst of 100 took %v, want about 100ms", d)
		}
	})
}

func TestLimiterLargeRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := NewLimiter(10) // burst 1
		start := time.Now()
		// Larger than the burst: let through once the bucket is full.
		if err := l.Wait(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("first large request waited %v, want none (bucket full)", d)
		}
		// The debt is paid before the next request: 5 tokens of which 1
		// was there, then 1 more for this request, at 10/s.
		if err := l.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 490*time.Millisecond || d > 510*time.Millisecond {
			t.Errorf("request after a 5-token one waited %v, want about 500ms", d)
		}
	})
}

func TestLimiterCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(1) // burst 1
		if err := l.Wait(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := l.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("wait() on an empty bucket = %v, want the ctx error", err)
		}
	})
}

func TestLimiterConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(1000)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					if err := l.Wait(context.Background(), 1); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}
