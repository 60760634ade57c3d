package entrypath

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// cursorWindowBytes bounds, per partition, the entries received from the
// cursor and not yet confirmed by the target plus what the broker may
// still send (wire.ConsumerOptions.MaxBytes); the sends among them also
// count in the process-wide byte budget. It is what one partition can
// have on the way to the target in one round trip, so it caps throughput
// at about three quarters of it per round trip (permits come back in
// batches of half the window): 8 MiB held a partition to about 35 MB/s at
// 150 ms (0.36 of its 0 ms figure in make bench's WAN rows); 32 MiB keeps
// it near the link's own limit there. With many cursors open it is less
// (ReceivePool.window).
const cursorWindowBytes = 32 << 20

// admitIdleAfter is how long a pool's line may stand still, with less
// held in entries than the pool holds, before its first waiter is let in
// past the pool's size (see ReceivePool).
const admitIdleAfter = time.Second

// ReceivePools splits the receive budget (sidecar.receive_budget, 512 MiB
// by default) evenly among the target clusters of the process, as
// TargetBudgets splits the send budget: the cursors of the pairs to one
// target share one ReceivePool. The receive budget is what the cursors of
// the process may hold (entries received, not yet confirmed by the
// target) and be sent together: a drain after an outage over a thousand
// partitions at cursorWindowBytes each would hold 32 GiB. With one target
// and the default, up to 16 cursors each get the whole cursorWindowBytes.
// With one pool for the process, a target that stops confirming sends
// would let its cursors hold all of it in entries they cannot release,
// and the cursors of every other target would wait.
type ReceivePools struct {
	byTarget map[string]*ReceivePool
}

// NewReceivePools gives each of targets (duplicates ignored) an equal
// share of total. With m, each pool reports its bytes and its waiters
// under the target's name.
func NewReceivePools(total int64, targets []string, m *metrics.Metrics) *ReceivePools {
	distinct := map[string]bool{}
	for _, t := range targets {
		distinct[t] = true
	}
	share := total / int64(max(len(distinct), 1))
	p := &ReceivePools{byTarget: map[string]*ReceivePool{}}
	for t := range distinct {
		var gauge func(used, waiting float64)
		if m != nil {
			used, waiting := m.ReceiveBytes.WithLabelValues(t), m.ReceiveWaiting.WithLabelValues(t)
			gauge = func(u, w float64) { used.Set(u); waiting.Set(w) }
		}
		p.byTarget[t] = newReceivePool(share, gauge)
	}
	return p
}

// Of returns the pool of target, nil for a target not given at start.
func (p *ReceivePools) Of(target string) *ReceivePool { return p.byTarget[target] }

// ReceivePool is one target's share of the receive budget: the
// replication cursors of its pairs reserve from it before they grant
// permits (wire.ConsumerOptions.Budget), and count in it the entries they
// received until the target confirms them. So what they hold plus what
// their brokers may still send them stays within limit, at the cursors'
// size estimates (each permit at the size per message of its partition's
// largest recent entries, plus one whole entry past the last permit: the
// broker's batch overdraft), but for:
//
//   - entries larger than the estimates were when their permits were
//     granted: the first window of a partition (4 permits at 64 KiB, at
//     most a quarter of its window, until an entry arrives) or permits
//     granted before a larger entry came. Each such permit can bring up
//     to the broker's maximum message size (5 MB by default) more than
//     was reserved; what arrives is held whatever the room, and keeps
//     waiters out until released;
//   - a waiter let in while nothing at all is reserved or held, with one
//     entry larger than the whole pool;
//   - permits out on partitions gone idle. Pulsar has no way to take
//     permits back, so a partition that drained its backlog keeps its
//     window reserved until new entries use it, and enough of them would
//     keep every waiter out for good: when the line has not moved for
//     admitIdleAfter and the entries held leave room for the first
//     waiter's least (what is reserved beyond them is only permits that
//     may never be used), it is let in past limit with what the entries
//     leave, its window at most. Partitions let in that way that go idle
//     too add their windows; a pool full of entries that cannot be
//     released (a target that confirms nothing) lets no one in.
//
// Waiters are served in the order they came (no partition starves behind
// busy ones), and a cursor holding something takes no room while one
// waits (wire.Consumer's grant). Safe for concurrent use.
type ReceivePool struct {
	limit int64
	// open counts the cursors open on the pool (join), for window.
	open  atomic.Int64
	gauge func(used, waiting float64) // nil: none

	mu    sync.Mutex
	used  int64     // reserved for permits, plus held
	held  int64     // entries received and not released
	line  list.List // of *poolWaiter, first come first
	moved time.Time // when the line last moved: its first waiter came or was served
	timer *poolTimer
	// admits are the admissions to call, in order; dispatching is set
	// while a goroutine calls them (see dispatch).
	admits      []poolAdmission
	dispatching bool
}

type poolWaiter struct {
	least, most int64
	admit       func(int64)
	elem        *list.Element // nil once out of the line
}

type poolAdmission struct {
	admit func(int64)
	got   int64
}

var _ wire.ByteBudget = (*ReceivePool)(nil)

func newReceivePool(limit int64, gauge func(used, waiting float64)) *ReceivePool {
	p := &ReceivePool{limit: limit, gauge: gauge}
	p.report()
	return p
}

// Limit is the pool's size in bytes.
func (p *ReceivePool) Limit() int64 { return p.limit }

// window is one cursor's window in bytes now (wire.ConsumerOptions.
// MaxBytes): the pool shared by the cursors open, at most
// cursorWindowBytes. Windows granted when fewer cursors were open shrink
// as their permits are used.
func (p *ReceivePool) window() int64 {
	return max(min(cursorWindowBytes, p.limit/max(p.open.Load(), 1)), 1)
}

// join counts one more open cursor until leave (which may be called more
// than once).
func (p *ReceivePool) join() (leave func()) {
	p.open.Add(1)
	var once sync.Once
	return func() { once.Do(func() { p.open.Add(-1) }) }
}

func (p *ReceivePool) TryAcquire(n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line.Len() > 0 || p.used+n > p.limit {
		return false
	}
	p.used += n
	p.report()
	return true
}

func (p *ReceivePool) Acquire(least, most int64, admit func(int64)) (int64, func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line.Len() == 0 {
		if got := p.fit(least, most); got > 0 {
			p.report()
			return got, nil
		}
		p.moved = time.Now()
	}
	w := &poolWaiter{least: least, most: most, admit: admit}
	w.elem = p.line.PushBack(w)
	p.arm(false)
	p.report()
	return 0, func() bool { return p.cancel(w) }
}

// cancel takes w out of the line. It runs with the waiter's consumer
// lock held, so it admits no one itself: when w was first, the timer
// serves the line at once.
func (p *ReceivePool) cancel(w *poolWaiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.elem == nil {
		return false
	}
	first := p.line.Front() == w.elem
	p.line.Remove(w.elem)
	w.elem = nil
	if first {
		p.moved = time.Now()
	}
	p.arm(first)
	p.report()
	return true
}

func (p *ReceivePool) Release(n int64) {
	p.mu.Lock()
	p.used -= n
	p.serve()
	p.arm(false)
	p.report()
	p.dispatch()
}

func (p *ReceivePool) Hold(n int64) {
	p.mu.Lock()
	p.used += n
	p.held += n
	if n > 0 {
		// Under the consumer's lock: no admission here.
		p.report()
		p.mu.Unlock()
		return
	}
	p.serve()
	p.arm(false)
	p.report()
	p.dispatch()
}

// fit reserves for a waiter what fits of least..most now (p.mu held): 0
// when least does not fit, least whatever the room when nothing at all
// is reserved or held.
func (p *ReceivePool) fit(least, most int64) int64 {
	var got int64
	switch {
	case p.used == 0:
		got = max(least, min(most, p.limit))
	case p.used+least <= p.limit:
		got = min(most, p.limit-p.used)
	default:
		return 0
	}
	p.used += got
	return got
}

// serve lets in the waiters that fit now, first come first (p.mu held).
func (p *ReceivePool) serve() {
	for e := p.line.Front(); e != nil; e = p.line.Front() {
		w := e.Value.(*poolWaiter)
		got := p.fit(w.least, w.most)
		if got == 0 {
			break
		}
		p.letIn(w, got)
	}
}

// letIn takes w, the first waiter, out of the line with got bytes
// reserved for it (p.mu held); dispatch calls its admit.
func (p *ReceivePool) letIn(w *poolWaiter, got int64) {
	p.line.Remove(w.elem)
	w.elem = nil
	p.moved = time.Now()
	p.admits = append(p.admits, poolAdmission{w.admit, got})
}

// arm keeps the timer set while someone waits (p.mu held): for when the
// line will have stood still for admitIdleAfter, or at once.
func (p *ReceivePool) arm(now bool) {
	if p.line.Len() == 0 || now {
		if p.timer != nil {
			p.timer.t.Stop()
			p.timer = nil
		}
	}
	if p.line.Len() == 0 || p.timer != nil {
		return
	}
	d := time.Duration(0)
	if !now {
		d = max(time.Until(p.moved.Add(admitIdleAfter)), 0)
	}
	tok := new(poolTimer)
	tok.t = time.AfterFunc(d, func() { p.tick(tok) })
	p.timer = tok
}

// poolTimer is the pool's timer; tick compares it to the one set.
type poolTimer struct{ t *time.Timer }

// tick serves the line, and is the idle valve (see ReceivePool): the
// first waiter is let in past limit once the line has stood still for
// admitIdleAfter while the entries held leave room for its least.
func (p *ReceivePool) tick(t *poolTimer) {
	p.mu.Lock()
	if p.timer == t {
		p.timer = nil
	}
	p.serve()
	if e := p.line.Front(); e != nil && time.Since(p.moved) >= admitIdleAfter {
		w := e.Value.(*poolWaiter)
		if p.held+w.least <= p.limit {
			got := max(w.least, min(w.most, p.limit-p.held))
			p.used += got
			p.letIn(w, got)
		} else {
			p.moved = time.Now() // entries held fill the pool: look again later
		}
	}
	p.arm(false)
	p.report()
	p.dispatch()
}

// dispatch calls the admissions due, in order, with p.mu not held, and
// unlocks p.mu. An admit func may release bytes itself (a cursor let in
// that no longer needs them): that Release queues the admissions it makes
// for the goroutine already dispatching, so admit funcs never nest.
func (p *ReceivePool) dispatch() {
	if p.dispatching {
		p.mu.Unlock()
		return
	}
	p.dispatching = true
	for len(p.admits) > 0 {
		a := p.admits[0]
		p.admits = p.admits[1:]
		p.mu.Unlock()
		a.admit(a.got)
		p.mu.Lock()
	}
	p.dispatching = false
	p.mu.Unlock()
}

// report tells the gauge (p.mu held).
func (p *ReceivePool) report() {
	if p.gauge != nil {
		p.gauge(float64(p.used), float64(p.line.Len()))
	}
}

// state is what the pool holds and how many wait, for tests.
func (p *ReceivePool) state() (used, held int64, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used, p.held, p.line.Len()
}
