package entrypath

import (
	"container/list"
	"context"
	"sync"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
)

// ReadBackPools split the read-back budget (sidecar.readback_budget)
// evenly among the target clusters of the process, as ReceivePools split
// the receive budget: the read-backs of the partitions of the pairs to
// one target (copiedSince: the remote partition read back before a
// session sends) share one ReadBackPool.
//
// Each read-back opens its readers one at a time, each with a window of
// readbackWindowBytes (wire.ConsumerOptions.MaxBytes); uncounted, a target
// that restarts under 10,000 partitions had 10,000 read-backs at once,
// 8 MiB each, outside every other bound. A read-back cannot take its
// bytes from the receive pool: its session's cursor holds a reservation
// there, and would wait for room that only its own read-back can free.
// So read-backs have a pool of their own, and what they hold is bounded
// by it (at the readers' size estimates, as for the receive pool).
type ReadBackPools struct {
	byTarget map[string]*ReadBackPool
}

// NewReadBackPools gives each of targets (duplicates ignored) an equal
// share of total. With m, each pool reports its bytes and its waiters
// under the target's name.
func NewReadBackPools(total int64, targets []string, m *metrics.Metrics) *ReadBackPools {
	distinct := map[string]bool{}
	for _, t := range targets {
		distinct[t] = true
	}
	share := total / int64(max(len(distinct), 1))
	p := &ReadBackPools{byTarget: map[string]*ReadBackPool{}}
	for t := range distinct {
		var gauge func(used, waiting float64)
		if m != nil {
			used, waiting := m.ReadBackBytes.WithLabelValues(t), m.ReadBackWaiting.WithLabelValues(t)
			gauge = func(u, w float64) { used.Set(u); waiting.Set(w) }
		}
		p.byTarget[t] = newReadBackPool(share, gauge)
	}
	return p
}

// Of returns the pool of target, nil for a target not given at start.
func (p *ReadBackPools) Of(target string) *ReadBackPool { return p.byTarget[target] }

// ReadBackPool is one target's share of the read-back budget. A read-back
// takes one window (the pool's window: readbackWindowBytes, or the whole
// pool when that is smaller) for as long as it runs, and its readers hold
// at most that much at once; so at most limit/window read-backs run
// together, and what they hold stays within limit. One is always let in
// when none runs. The others wait, never fail (but for their session
// ending), first come first served. A read-back holds nothing else while
// it runs that another read-back waits for, so the line always moves:
// each read is bounded by readbackIdleTimeout per window. Safe for
// concurrent use.
type ReadBackPool struct {
	limit  int64
	window int64
	gauge  func(used, waiting float64) // nil: none

	mu   sync.Mutex
	used int64
	line list.List // of chan struct{}, closed when let in; first come first
}

func newReadBackPool(limit int64, gauge func(used, waiting float64)) *ReadBackPool {
	limit = max(limit, 1)
	p := &ReadBackPool{limit: limit, window: min(readbackWindowBytes, limit), gauge: gauge}
	p.report()
	return p
}

// Limit is the pool's size in bytes.
func (p *ReadBackPool) Limit() int64 { return p.limit }

// Window is what one read-back's readers may hold at once
// (wire.ConsumerOptions.MaxBytes).
func (p *ReadBackPool) Window() int64 { return p.window }

// acquire waits for room for one read-back, in line, until ctx ends
// (then err is ctx's, and nothing is held). release gives the room back;
// calling it more than once gives it back once.
func (p *ReadBackPool) acquire(ctx context.Context) (release func(), err error) {
	p.mu.Lock()
	if p.line.Len() == 0 && p.used+p.window <= p.limit {
		p.used += p.window
		p.report()
		p.mu.Unlock()
		return p.releaser(), nil
	}
	in := make(chan struct{})
	e := p.line.PushBack(in)
	p.report()
	p.mu.Unlock()
	select {
	case <-in:
		return p.releaser(), nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	select {
	case <-in: // let in meanwhile: the room is ours to give back
		p.mu.Unlock()
		p.release()
	default:
		first := p.line.Front() == e
		p.line.Remove(e)
		if first {
			p.serve() // the next may fit where this one did not yet
		}
		p.report()
		p.mu.Unlock()
	}
	return nil, ctx.Err()
}

func (p *ReadBackPool) releaser() func() {
	var once sync.Once
	return func() { once.Do(p.release) }
}

func (p *ReadBackPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used -= p.window
	p.serve()
	p.report()
}

// serve lets in the waiters that fit now, first come first (p.mu held).
func (p *ReadBackPool) serve() {
	for e := p.line.Front(); e != nil && p.used+p.window <= p.limit; e = p.line.Front() {
		p.used += p.window
		p.line.Remove(e)
		close(e.Value.(chan struct{}))
	}
}

// report tells the gauge (p.mu held).
func (p *ReadBackPool) report() {
	if p.gauge != nil {
		p.gauge(float64(p.used), float64(p.line.Len()))
	}
}

// state is what the pool holds and how many wait, for tests.
func (p *ReadBackPool) state() (used int64, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used, p.line.Len()
}
