package cluster

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff is a capped exponential backoff with jitter. The zero value is not
// usable; build one with NewBackoff.
type Backoff struct {
	min, max, cur time.Duration
}

// NewBackoff starts at min and doubles up to max.
func NewBackoff(min, max time.Duration) *Backoff { return &Backoff{min: min, max: max, cur: min} }

// Next returns the delay before the next attempt and doubles the base, up to
// max. Jitter of ±20% keeps many partitions from retrying in step.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	j := time.Duration(rand.Int64N(int64(d)/5 + 1))
	if rand.IntN(2) == 0 {
		return d - j
	}
	return d + j
}

// Reset starts again at the shortest delay.
func (b *Backoff) Reset() { b.cur = b.min }

// Sleep waits d or until ctx is done; it reports whether the full wait
// happened.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Limiter is a token bucket shared by the partitions of one replication
// pair. A zero rate means unlimited. Safe for concurrent use.
type Limiter struct {
	mu     sync.Mutex
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

// NewLimiter is a bucket of rate tokens a second; nil (unlimited) for a
// rate of 0 or less.
func NewLimiter(rate float64) *Limiter {
	if rate <= 0 {
		return nil
	}
	burst := max(rate/10, 1)
	return &Limiter{rate: rate, burst: burst, tokens: burst, last: time.Now()}
}

// Wait takes n tokens, sleeping as needed; a nil Limiter never waits. A
// request larger than the burst is let through once the bucket is full, so
// one big message cannot stall forever.
func (l *Limiter) Wait(ctx context.Context, n float64) error {
	if l == nil {
		return nil
	}
	for {
		l.mu.Lock()
		now := time.Now()
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
		l.last = now
		need := min(n, l.burst)
		if l.tokens >= need {
			l.tokens -= n
			l.mu.Unlock()
			return nil
		}
		d := time.Duration((need - l.tokens) / l.rate * float64(time.Second))
		l.mu.Unlock()
		if !Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}
