package entrypath

import "sync"

// TargetBudgets splits the entry pipe's in-flight budget (InflightBudget)
// evenly among the target clusters of the process: each target's pairs
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
