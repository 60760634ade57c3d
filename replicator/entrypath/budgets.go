package entrypath

import (
	"context"
	"sync"
)

// TargetBudgets splits the entry pipe's in-flight budget (the send
// budget, sidecar.send_budget: 256 MiB by default) evenly among the target clusters of the process: each target's pairs
// share one ByteBudget of total/targets bytes. One budget for the whole
// process let a target that takes sends but confirms none (bookies down
// with retryable errors, a throttled namespace) hold all of it, and every
// pair of every other target then waited in acquire: only the pairs of a
// failing remote should wait. The memory bound stays what it was, the
// sum over the targets; inflight_bytes reports that sum.
type TargetBudgets struct {
	byTarget map[string]*ByteBudget

	mu    sync.Mutex
	held  map[string]float64
	gauge func(float64)
}

// NewTargetBudgets gives each of targets (duplicates ignored) an equal
// share of total. gauge, when set, is told the bytes held over all.
func NewTargetBudgets(total int64, targets []string, gauge func(float64)) *TargetBudgets {
	distinct := map[string]bool{}
	for _, t := range targets {
		distinct[t] = true
	}
	share := total / int64(max(len(distinct), 1))
	b := &TargetBudgets{byTarget: map[string]*ByteBudget{}, held: map[string]float64{}, gauge: gauge}
	for t := range distinct {
		b.byTarget[t] = newByteBudget(share, func(v float64) { b.report(t, v) })
	}
	return b
}

// Of returns the budget of target, nil for a target not given at start.
func (b *TargetBudgets) Of(target string) *ByteBudget { return b.byTarget[target] }

func (b *TargetBudgets) report(target string, v float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[target] = v
	if b.gauge == nil {
		return
	}
	sum := 0.0
	for _, h := range b.held {
		sum += h
	}
	b.gauge(sum)
}

// ByteBudget bounds the bytes of entries held in flight across the
// process: a topic of 1 MB messages with a large backlog must not multiply
// into gigabytes. One entry larger than the whole budget still passes
// alone. Safe for concurrent use.
type ByteBudget struct {
	limit int64
	gauge func(float64)

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed and replaced when bytes are released
}

func newByteBudget(limit int64, gauge func(float64)) *ByteBudget {
	if gauge == nil {
		gauge = func(float64) {}
	}
	return &ByteBudget{limit: limit, gauge: gauge, freed: make(chan struct{})}
}

// acquire waits until n bytes fit (or nothing else is held) or ctx ends.
func (b *ByteBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.gauge(float64(b.used))
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *ByteBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.gauge(float64(b.used))
	close(b.freed)
	b.freed = make(chan struct{})
}

// Limit is how many bytes the budget holds at most (but for one entry
// larger than that alone).
func (b *ByteBudget) Limit() int64 { return b.limit }

func (b *ByteBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
