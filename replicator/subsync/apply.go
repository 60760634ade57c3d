package subsync

// The apply queue: the updates received from the remote and not applied
// yet, the newest per subscription, and the worker that applies them off
// the data path (a move must not hold up replication); beside them the
// newest list of ack holes to acknowledge per subscription (holes.go),
// applied after the subscription's update. Run starts the
// queue's workers and waits for the one running before it returns.

import (
	"context"
	"maps"
	"sync"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// applyQueue holds the updates waiting to be applied and runs at most one
// worker at a time while some wait. Safe for concurrent use: the entry
// path puts, the worker takes, Run starts and stops.
type applyQueue struct {
	mu      sync.Mutex
	pending map[string]marker.Position // latest pending update per subscription
	// holes is the latest list of entries to acknowledge one by one per
	// subscription (an acked marker's, mapped: holes.go).
	holes map[string][]marker.Position
	// ctx is Run's context and apply what a worker does with each update
	// (nil before start); running is set while a worker runs. A worker
	// lives only while updates wait: a goroutine per partition and
	// direction that waited for them was a quarter of a sidecar's
	// goroutines with replicated subscriptions (e2e/bench, subs row).
	ctx        context.Context
	apply      func(ctx context.Context, sub string, at marker.Position)
	applyHoles func(ctx context.Context, sub string, ids []marker.Position)
	running    bool
	// done is set when Run ends (no worker starts after it), and workers
	// counts the worker running, for Run to wait for it: an update still
	// being applied when Run returned moved the subscription after the
	// stop, beside the next start's.
	done    bool
	workers sync.WaitGroup
}

// put queues an update of sub to at, unless one further waits, and starts
// a worker if none runs and workers may run.
func (q *applyQueue) put(sub string, at marker.Position) {
	q.mu.Lock()
	if q.pending == nil {
		q.pending = map[string]marker.Position{}
	}
	if cur, ok := q.pending[sub]; !ok || at.Compare(cur) > 0 {
		q.pending[sub] = at
	}
	ctx, start := q.ctx, q.claim()
	q.mu.Unlock()
	if start {
		go q.work(ctx)
	}
}

// putHoles queues the entries of sub to acknowledge one by one, in place
// of any list waiting (the newer list is the source's newer state), and
// starts a worker as put does.
func (q *applyQueue) putHoles(sub string, ids []marker.Position) {
	q.mu.Lock()
	if q.holes == nil {
		q.holes = map[string][]marker.Position{}
	}
	q.holes[sub] = ids
	ctx, start := q.ctx, q.claim()
	q.mu.Unlock()
	if start {
		go q.work(ctx)
	}
}

// start lets put start workers that apply with apply (updates) and
// applyHoles (ack holes) under ctx (Run's), and starts one for what came
// before.
func (q *applyQueue) start(ctx context.Context, apply func(ctx context.Context, sub string, at marker.Position),
	applyHoles func(ctx context.Context, sub string, ids []marker.Position)) {
	q.mu.Lock()
	q.ctx, q.apply, q.applyHoles = ctx, apply, applyHoles
	start := q.claim()
	q.mu.Unlock()
	if start {
		go q.work(ctx)
	}
}

// claim, with mu held, reports whether the caller starts a worker:
// workers may run (start was called and stop was not), none does, and an
// update waits. The worker is counted here, under mu, so that stop's wait
// sees every worker claimed before it.
func (q *applyQueue) claim() bool {
	if q.ctx == nil || q.done || q.running || len(q.pending) == 0 && len(q.holes) == 0 {
		return false
	}
	q.running = true
	q.workers.Add(1)
	return true
}

// stop ends the queue as Run returns: no worker starts after it, and it
// waits for the one running (it ends at its current update: Run's ctx is
// done).
func (q *applyQueue) stop() {
	q.mu.Lock()
	q.done = true
	q.mu.Unlock()
	q.workers.Wait()
}

// work applies the waiting updates, the newest per subscription, until
// none waits or ctx is done.
func (q *applyQueue) work(ctx context.Context) {
	defer q.workers.Done()
	for {
		q.mu.Lock()
		batch, holes := q.pending, q.holes
		q.pending, q.holes = nil, nil
		if len(batch) == 0 && len(holes) == 0 || ctx.Err() != nil {
			q.pending, q.holes = batch, holes // kept for nobody: Run is over
			q.running = false
			q.mu.Unlock()
			return
		}
		apply, applyHoles := q.apply, q.applyHoles
		q.mu.Unlock()
		for sub, at := range batch {
			apply(ctx, sub, at)
		}
		for sub, ids := range holes {
			if applyHoles != nil {
				applyHoles(ctx, sub, ids)
			}
		}
	}
}

// waiting returns the updates waiting, the newest per subscription.
func (q *applyQueue) waiting() map[string]marker.Position {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.pending)
}
