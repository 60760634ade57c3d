package subsync

// "Did it move" (docs/design/subscription-follow.md §6): one stats
// reading per (cluster, topic), shared by the syncs of every partition of
// the topic, tells each partition's sync whether a tracked subscription's
// mark-delete moved; only then does the sync read positions (MarkDeletes,
// one internal-stats call). The same reading gives the backlogs of the
// lag gauges, so a follow of a partitioned topic of N partitions of which
// k moved costs 1 + k requests instead of 3N.

import (
	"context"
	"errors"
	"sync"
	"time"
)

// SubStat is one subscription of one partition as a stats reading shows it.
type SubStat struct {
	// Backlog is the precise backlog, in entries.
	Backlog int64
	// MarkDeleteAdvanced is the broker's lastMarkDeleteAdvancedTimestamp
	// (ms): set by acknowledgements and expiry, not by reset-cursor, skip
	// or clear-backlog, and 0 after the topic is loaded again.
	MarkDeleteAdvanced int64
	// Consumers is how many consumers are attached.
	Consumers int
	// Ranges is the broker's nonContiguousDeletedMessagesRanges: ranges
	// acknowledged one by one past the mark-delete position (count.go).
	Ranges int
}

// Reading is one stats reading of a topic: per partition (its full
// name; the topic itself when it is not partitioned), per subscription.
type Reading struct {
	At         time.Time // when the request was sent
	Partitions map[string]map[string]SubStat
}

// StatsSource reads the subscription stats of every partition of a topic
// in one admin request (partitioned-stats with perPartition, or stats for
// a topic that is not partitioned). Implementations must be safe for
// concurrent use.
type StatsSource interface {
	SubStats(ctx context.Context, topic string, partitioned bool) (map[string]map[string]SubStat, error)
}

// Poller shares the stats reading of one topic on one cluster among the
// syncs of its partitions: a reading young enough is handed out again,
// and callers asking at the same time share one request. Safe for
// concurrent use; it runs no goroutine.
type Poller struct {
	src         StatsSource
	topic       string
	partitioned bool
	budget      *AdminRate

	mu       sync.Mutex
	last     *Reading
	inflight *pollCall
}

// pollCall is a request in flight; done closes when r or err is set.
type pollCall struct {
	done chan struct{}
	r    *Reading
	err  error
}

// NewPoller returns the poller of topic over src, whose requests take
// tokens from budget (nil: none).
func NewPoller(src StatsSource, topic string, partitioned bool, budget *AdminRate) *Poller {
	return &Poller{src: src, topic: topic, partitioned: partitioned, budget: budget}
}

// Read returns a reading of the topic sent less than maxAge ago: the last
// one if it is that young, else a new one (shared with whoever asks
// meanwhile). priority orders the request in the cluster's budget.
func (p *Poller) Read(ctx context.Context, maxAge time.Duration, priority float64) (*Reading, error) {
	for {
		p.mu.Lock()
		if p.last != nil && time.Since(p.last.At) < maxAge {
			r := p.last
			p.mu.Unlock()
			return r, nil
		}
		c := p.inflight
		if c == nil {
			c = &pollCall{done: make(chan struct{})}
			p.inflight = c
			p.mu.Unlock()
			p.fetch(ctx, c, priority)
			return c.r, c.err
		}
		p.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if c.err == nil {
			return c.r, nil
		}
		if !errors.Is(c.err, context.Canceled) && !errors.Is(c.err, context.DeadlineExceeded) {
			return nil, c.err
		}
		// The caller that sent it went away: ask again under our ctx.
	}
}

// fetch sends the request of c and publishes its answer.
func (p *Poller) fetch(ctx context.Context, c *pollCall, priority float64) {
	defer func() {
		p.mu.Lock()
		if c.err == nil {
			p.last = c.r
		}
		p.inflight = nil
		p.mu.Unlock()
		close(c.done)
	}()
	if c.err = p.budget.Take(ctx, priority); c.err != nil {
		return
	}
	at := time.Now()
	parts, err := p.src.SubStats(ctx, p.topic, p.partitioned)
	if err != nil {
		c.err = err
		return
	}
	c.r = &Reading{At: at, Partitions: parts}
}

// Pollers holds one Poller per (cluster, topic) and one AdminRate per
// cluster, shared by every pair of a sidecar: the east→west and east→far
// syncs of a partition share east's reading, and west→east's reading of
// the same topic is east→west's remote half of the lag. Safe for
// concurrent use.
type Pollers struct {
	rate  float64
	burst int
	// waiting, if set, receives each cluster's number of waiters.
	waiting func(cluster string, n int)

	mu       sync.Mutex
	budgets  map[string]*AdminRate
	pollers  map[string]*pollerRef
	servlets map[string]*Servlet
}

type pollerRef struct {
	p    *Poller
	refs int
}

// NewPollers returns the registry; each cluster's budget allows rate
// admin requests a second, burst at once.
func NewPollers(rate float64, burst int, waiting func(cluster string, n int)) *Pollers {
	return &Pollers{rate: rate, burst: burst, waiting: waiting,
		budgets: map[string]*AdminRate{}, pollers: map[string]*pollerRef{}}
}

// AdminRate returns cluster's admin rate; nil for a nil registry.
func (ps *Pollers) AdminRate(cluster string) *AdminRate {
	if ps == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.budgetLocked(cluster)
}

func (ps *Pollers) budgetLocked(cluster string) *AdminRate {
	b, ok := ps.budgets[cluster]
	if !ok {
		var waiting func(int)
		if ps.waiting != nil {
			waiting = func(n int) { ps.waiting(cluster, n) }
		}
		b = NewAdminRate(ps.rate, ps.burst, waiting)
		ps.budgets[cluster] = b
	}
	return b
}

// Servlet returns cluster's positions servlet follower (servlet.go),
// built by mk on first use: one per cluster, shared by the syncs of all
// its partitions. Nil for a nil registry.
func (ps *Pollers) Servlet(cluster string, mk func() *Servlet) *Servlet {
	if ps == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	s, ok := ps.servlets[cluster]
	if !ok {
		if ps.servlets == nil {
			ps.servlets = map[string]*Servlet{}
		}
		s = mk()
		ps.servlets[cluster] = s
	}
	return s
}

// Acquire returns the poller of topic on cluster (built over src on first
// use) and the func that gives it back; the last one given back is
// dropped. Nil for a nil registry.
func (ps *Pollers) Acquire(cluster string, src StatsSource, topic string, partitioned bool) (*Poller, func()) {
	if ps == nil {
		return nil, func() {}
	}
	key := cluster + "\x00" + topic
	ps.mu.Lock()
	defer ps.mu.Unlock()
	r, ok := ps.pollers[key]
	if !ok {
		r = &pollerRef{p: NewPoller(src, topic, partitioned, ps.budgetLocked(cluster))}
		ps.pollers[key] = r
	}
	r.refs++
	var once sync.Once
	return r.p, func() {
		once.Do(func() {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			if r.refs--; r.refs == 0 && ps.pollers[key] == r {
				delete(ps.pollers, key)
			}
		})
	}
}

// Offer gives the poller a reading made for someone else (the pairs'
// backlog gauges read a quiet topic's stats every 30 minutes): kept when
// it is newer than the last, so that a resting follow sees it without a
// request of its own (Sync.resting).
func (p *Poller) Offer(r *Reading) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil || r.At.After(p.last.At) {
		p.last = r
	}
}

// Latest returns the last reading, without a request; nil when there is
// none.
func (p *Poller) Latest() *Reading {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Offer gives topic's poller on cluster, if there is one (a sync follows
// one of its partitions), a reading made elsewhere (Poller.Offer).
func (ps *Pollers) Offer(cluster, topic string, r *Reading) {
	if ps == nil {
		return
	}
	ps.mu.Lock()
	ref, ok := ps.pollers[cluster+"\x00"+topic]
	ps.mu.Unlock()
	if ok {
		ref.p.Offer(r)
	}
}
