package subsync

// The admin request budget of one cluster (docs/design/subscription-follow.md
// §6): a token bucket shared by every sync of the cluster, whose waiters
// are served most behind first, so that when the budget is short the
// partitions a failover would cost most are followed first and the others
// later (more redelivered after a failover, never a loss). A waiter gains
// priority as it waits (ageing), so later ones never starve it.

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// AdminRate is a token bucket of admin requests (sidecar.admin_rate). Take waits for a token; the
// waiter with the highest priority gets the next one (the oldest on
// ties), a waiter's priority growing by agePerSecond for every second it
// waited. A nil *AdminRate never waits. Safe for concurrent use; it runs no
// goroutine of its own (a timer wakes the queue while someone waits).
type AdminRate struct {
	rate  float64 // tokens per second
	burst float64
	// waiting, if set, is told how many wait (a gauge).
	waiting func(n int)

	mu      sync.Mutex
	born    time.Time // the epoch of the waiters' keys (set at the first Take)
	tokens  float64
	at      time.Time // when tokens was computed
	queue   waiters
	seq     uint64
	armed   bool
	started bool
}

// NewAdminRate returns a bucket of rate requests a second holding at most
// burst, full at first. waiting, if not nil, is called with the number of
// waiters whenever it changes.
func NewAdminRate(rate float64, burst int, waiting func(n int)) *AdminRate {
	return &AdminRate{rate: rate, burst: float64(max(burst, 1)), waiting: waiting}
}

// agePerSecond is the priority a waiter gains per second of waiting.
//
// Without it, under traffic on 1,000 topics (issue 23's bench, a budget
// of 50/s), 42 of 50 probes were not followed within a minute while a
// round over every topic takes about 20 s: a partition just followed
// measured a large lag (the update it sent not applied yet, markers
// counted), so it won the next token again, while one not followed for a
// minute had only its entries read since to show. With ageing, a minute
// of waiting outweighs a lag of 300 entries: the queue turns about first
// come, first served when every partition is behind, and stays most behind
// first among those that became due together.
const agePerSecond = 5

// waiter is one Take waiting for a token.
type waiter struct {
	// priority is the key: the priority Take was given, less
	// agePerSecond for each second from born to the Take (those who
	// waited longer are ahead by what they waited).
	priority float64
	seq      uint64
	granted  bool
	index    int
	ch       chan struct{}
}

// waiters is a max-heap by priority, then min by seq.
type waiters []*waiter

func (w waiters) Len() int { return len(w) }
func (w waiters) Less(i, j int) bool {
	if w[i].priority != w[j].priority {
		return w[i].priority > w[j].priority
	}
	return w[i].seq < w[j].seq
}
func (w waiters) Swap(i, j int) {
	w[i], w[j] = w[j], w[i]
	w[i].index, w[j].index = i, j
}
func (w *waiters) Push(x any) {
	it := x.(*waiter)
	it.index = len(*w)
	*w = append(*w, it)
}
func (w *waiters) Pop() any {
	old := *w
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*w = old[:len(old)-1]
	it.index = -1
	return it
}

// refill adds the tokens earned since the last call (b.mu held).
func (b *AdminRate) refill(now time.Time) {
	if !b.started {
		b.tokens, b.at, b.started = b.burst, now, true
		return
	}
	b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
}

// Take waits for one token: at once when one is left and nobody waits,
// else in the queue by priority (the redelivery a failover would cost
// now: higher first). It returns ctx's error if ctx ends first.
func (b *AdminRate) Take(ctx context.Context, priority float64) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	now := time.Now()
	b.refill(now)
	if len(b.queue) == 0 && b.tokens >= 1 {
		b.tokens--
		b.mu.Unlock()
		return nil
	}
	if b.born.IsZero() {
		b.born = now
	}
	b.seq++
	w := &waiter{priority: priority - agePerSecond*now.Sub(b.born).Seconds(), seq: b.seq, ch: make(chan struct{})}
	heap.Push(&b.queue, w)
	b.arm()
	n := len(b.queue)
	b.mu.Unlock()
	b.tell(n)
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.granted {
		b.mu.Unlock()
		return nil // the token came with the cancellation: use it
	}
	heap.Remove(&b.queue, w.index)
	n = len(b.queue)
	b.mu.Unlock()
	b.tell(n)
	return ctx.Err()
}

// arm sets the timer for the next token (b.mu held).
func (b *AdminRate) arm() {
	if b.armed {
		return
	}
	b.armed = true
	wait := time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
	time.AfterFunc(max(wait, time.Millisecond), b.dispatch)
}

// dispatch hands the tokens earned to the waiters, best first.
func (b *AdminRate) dispatch() {
	b.mu.Lock()
	b.armed = false
	b.refill(time.Now())
	for len(b.queue) > 0 && b.tokens >= 1 {
		w := heap.Pop(&b.queue).(*waiter)
		b.tokens--
		w.granted = true
		close(w.ch)
	}
	if len(b.queue) > 0 {
		b.arm()
	}
	n := len(b.queue)
	b.mu.Unlock()
	b.tell(n)
}

func (b *AdminRate) tell(n int) {
	if b.waiting != nil {
		b.waiting(n)
	}
}
