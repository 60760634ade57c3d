package subsync

// Whether every tracked subscription of a partition has reached the
// newest snapshot, told by the topic's shared stats reading alone, with
// no internal-stats call: the call a follow made on each partition after
// each completed snapshot, most of what the sync asked of the cluster
// whose applications consume.
//
// The newest snapshot's local position a is an entry this sync read (the
// snapshot completed there); it counts the entries it reads (distinct,
// positions increasing), so it knows L, how many entries after a it had
// read before the reading was sent: all of them existed when the broker
// computed the reading. The reading gives each subscription's precise
// backlog B, the entries after its mark-delete position md not
// acknowledged one by one. If md were before a, a and those L entries
// would all lie after md; with no entry acknowledged one by one past md
// (nonContiguousDeletedMessagesRanges 0) they would all count, B ≥ L + 1.
// So B ≤ L with no such ranges proves md ≥ a, and the update for the
// newest snapshot is the one a position read would give. The broker
// computes the backlog before the ranges (PersistentSubscription.getStats,
// 4.0.7): ranges found 0 after the backlog mean any acknowledged one by
// one then were merged into md since, past every entry still counted, and
// the proof holds. Entries this sync did not read (another instance's, a
// restart's re-read) are not counted: L only gets smaller, the proof
// rarer, never wrong.
//
// The count is here (entryCount); the proof is the follow's (adminpath.go:
// Sync.reached, beside entryCount.after, the one question it asks of the
// count).

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// entryCount counts the entries a sync reads. The entry path (one
// goroutine at a time, as it feeds the sync) calls read and completed;
// follow calls sample and after, concurrently with it.
type entryCount struct {
	n       atomic.Int64 // distinct entries read, positions increasing
	last    marker.Position
	hasLast bool // last: the entry path's alone

	mu sync.Mutex
	// at is n when a snapshot completed at a position (the entry read
	// there included), and when; order bounds it.
	at    map[marker.Position]countSample
	order []marker.Position
	// samples are (time, n) pairs taken by follow, the newest last.
	samples []countSample
}

type countSample struct {
	t time.Time
	n int64
}

const (
	// completedKept bounds the positions at which completions are
	// remembered (the snapshot cache holds 10 by default).
	completedKept = 16
	// samplesKept bounds the samples: a follow uses a reading at most a
	// few follows old.
	samplesKept = 8
)

// read counts the entry read at pos, unless it was counted already (a
// cursor delivering again after a reconnect).
func (c *entryCount) read(pos marker.Position) {
	if c.hasLast && pos.Compare(c.last) <= 0 {
		return
	}
	c.n.Add(1)
	c.last, c.hasLast = pos, true
}

// completed records that a snapshot completed at pos, an entry counted.
func (c *entryCount) completed(pos marker.Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pos.Batch = -1
	if c.at == nil {
		c.at = map[marker.Position]countSample{}
	}
	if _, ok := c.at[pos]; !ok {
		if len(c.order) >= completedKept {
			delete(c.at, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, pos)
	}
	at := countSample{t: time.Now(), n: c.n.Load()}
	c.at[pos] = at
	// The completion is a sample too: a reading sent after it, before any
	// entry was read and before the loop sampled (the shared reading of a
	// topic whose snapshots complete together, asked for by another
	// partition), proves with L = 0 instead of not at all. Without it,
	// such readings made every partition of the bench's 40 read its
	// positions each second for 12 s (39 internal-stats calls a second).
	c.addSample(at)
}

// addSample appends a sample, dropping the oldest past samplesKept.
// c.mu is held.
func (c *entryCount) addSample(s countSample) {
	if len(c.samples) >= samplesKept {
		c.samples = c.samples[1:]
	}
	c.samples = append(c.samples, s)
}

// completedAt is when a snapshot completed at a (ok: recorded).
func (c *entryCount) completedAt(a marker.Position) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a.Batch = -1
	at, ok := c.at[a]
	return at.t, ok
}

// sample records how many entries were read by now: the count first,
// the time after it, so that every entry counted was read before the
// time.
func (c *entryCount) sample() {
	n := c.n.Load()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addSample(countSample{t: now, n: n})
}
