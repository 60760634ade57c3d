// Package snapshot is the replicated-subscription snapshot rule
// (docs/replicated-subscriptions.md, How it works; the rule itself is
// below) as a pure state machine: one Machine per local
// topic partition and remote cluster, fed what the replicator reads from
// the local partition, in order, and returning the markers to write. No
// network, no clock of its own (Config.Now), so the hard part is unit tested
// and fuzzed without Pulsar.
//
// A snapshot between local A and remote B is a pair (a, b): every message at
// or before b in B's partition is at or before a in A's. When a subscription
// on A has consumed up to a, the same subscription on B may be moved to b.
//
// # The round
//
// A's Machine writes a request addressed to B ([Machine.Tick]); B's Machine
// reads it, forwarded, at b and answers with a response carrying b and, for
// every third origin C, the highest C-origin position B's partition held at
// or before b (its watermark). A's Machine reads the response at a and the
// snapshot completes at the first position a' >= a at which A's partition
// has shown every third origin up to the watermark B named: at a' then,
// every A-origin message at or before b was forwarded before the request,
// every B-origin one before the response, and every C-origin one has
// arrived. The completed pair (a', b) is written as a snapshot marker into
// A's partition; the snapshot enters A's cache as it completes, and again
// from that marker when it is read after a restart (or by another
// instance), which is how the cache is rebuilt.
//
// Third origins are only those whose messages reach both clusters
// ([Config.ThirdOrigins]). A message that reaches B but not A (Pulsar's
// replicate_to, or a topology in which its origin copies to B only)
// is never covered by a snapshot: a subscription moved on B may skip it,
// since A never had it to consume.
//
// # The cache
//
// Completed snapshots are kept sorted by their local position, at most
// [Config.CacheSize] of them. When a new one overflows the cache, the oldest
// and the newest are always kept, so the slowest subscription keeps the
// snapshot it will need next and the fastest the most recent one. From the
// middle, the entry evicted is the one whose removal leaves the smallest gap
// relative to its age: the entry i minimising (t[i+1] - t[i-1]) / (T -
// t[i-1]), where t are completion times and T the newest's. The survivors
// thin out geometrically with age: with 10 entries and a snapshot a second,
// after a day they sit about 0, 1, 4, 16, 80, 190, 790, 2200 and 20000 s
// back, plus the oldest, so a subscription lagging by d finds a snapshot
// about 2d old on average, 10d at worst. That means few duplicates after a
// failover for subscriptions close to the head, and still some coverage for
// slow ones. Evicting by absolute gap instead (say, the entry closest in
// time to its older neighbour) would spread the entries evenly over the
// cache's whole span and leave a subscription lagging a few seconds with a
// snapshot hours old. [Machine.Prune] drops what no subscription needs any
// more, which moves the oldest forward.
package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Defaults for zero or negative Config fields; the same as the config
// package's and Pulsar's.
const (
	defaultInterval  = 1 * time.Second
	defaultTimeout   = 30 * time.Second
	defaultCacheSize = 10
	// maxRetries bounds the requests written again after a timeout with
	// no new data: a remote that never answers (no sidecar there) costs
	// this many more requests per quiet spell, not one per interval.
	maxRetries = 3
	// lateFor is how long past its start, in Timeouts, a request that timed
	// out may still complete when its response comes (request.late), and
	// maxLate how many such requests are kept at once: with a copy
	// lagging more than Timeout behind its partition's head (a backlog
	// after an outage, a saturated bed), a request is read and forwarded
	// only after Timeout, and its response comes later still. Dropped at
	// Timeout, as before, no snapshot completed for as long as the lag
	// lasted (soak, seed 1382347120672031276: an Exclusive subscription's
	// copy on west left minutes behind east's). Ten Timeouts is 5 minutes
	// by default; a request every Timeout keeps at most ten late.
	lateFor = 10
	maxLate = 10
	// maxUnread bounds the snapshots completed here whose marker was not
	// read back yet (Machine.unread): a marker whose write failed is not
	// remembered for ever.
	maxUnread = 64
)

// Config is one Machine's setting.
type Config struct {
	// Topic is the partition's full topic name; markers carry it and
	// markers naming another topic are ignored.
	Topic string
	// Local is the cluster whose partition the machine reads; Remote the
	// other end of the pair.
	Local, Remote string
	// Interval is the least time between two snapshot requests; Timeout
	// how long a request waits for its response and watermarks before
	// another may start in its place (it may still complete if its
	// response comes within lateFor Timeouts). Zero or negative means 1 s
	// and 30 s, the config package's defaults.
	Interval, Timeout time.Duration
	// CacheSize bounds the completed snapshots kept; zero or negative
	// means 10, the config package's default.
	CacheSize int
	// MaxPending bounds the requests in flight at once; zero or negative
	// means 1: the next request waits for the last to complete or time
	// out. Pulsar's own controller starts one every interval whatever is
	// pending; here, with five in flight, a saturated test bed (1,000
	// busy topics both ways on 2 cores) took three times as long per
	// round trip, the markers being most of its work, and the follow's
	// p99 rose from 6.8 s to 19.3 s (docs/design/subscription-follow.md
	// §12.8). More than one helps only where the round trip is longer
	// than Interval for want of network rather than CPU.
	MaxPending int
	// ThirdOrigins are the clusters other than Local and Remote whose
	// messages are copied into both (from the shared config). Responses
	// carry their watermarks, and a snapshot completes only once Local has
	// seen each of them up to the responder's watermark (see The round
	// in the package doc). Origins that reach only one side are left
	// out: their messages are never covered. Local, Remote, empty names
	// and repeats are dropped.
	ThirdOrigins []string
	// Fresh says the cursor reading this partition was just created at the
	// earliest position, so every watermark is exact from the start. When
	// false (a cursor that already existed), the watermark of a third
	// origin is unknown until one message of that origin has been read,
	// and requests are not answered until every third origin is known: an
	// under-reported watermark could lose messages, a request left
	// unanswered only times out.
	Fresh bool
	// NewID returns a fresh snapshot id (at most marker.MaxSnapshotIDLen
	// bytes, never empty); Now the current time. Nil means a random UUID
	// and time.Now.
	NewID func() string
	Now   func() time.Time
}

// Snapshot is one completed pair: Local (a) in the local partition, Remote
// (b) in the remote's.
type Snapshot struct {
	ID     string
	Local  marker.Position
	Remote marker.Position
	Time   time.Time // when it completed (from the snapshot marker)
}

// Stats are counters for metrics, monotonically growing except LastRTT.
type Stats struct {
	Started, Completed, TimedOut int64
	// Late counts the completed requests that had timed out: their
	// response came after Timeout (a lagging copy) and still counted.
	Late int64
	// Unanswered counts requests from Remote not answered because a
	// third origin's watermark was unknown.
	Unanswered int64
	// LastRTT is the time from the last completed snapshot's request to
	// its completion.
	LastRTT time.Duration
}

// Machine is the snapshot state of one (partition, remote). Safe for
// concurrent use: the replicator's reader and its ticker call it from
// different goroutines.
type Machine struct {
	cfg Config // normalised by New: ThirdOrigins without repeats, Local, Remote

	mu sync.Mutex
	// seen is, per third origin, the highest origin position among its
	// messages read so far. An origin absent from it has its watermark
	// known-empty when cfg.Fresh, unknown otherwise.
	seen map[string]marker.Position
	// pending are the requests in flight, oldest first (started in
	// order, so answered in order): at most cfg.MaxPending that have not
	// timed out, and at most maxLate that have (request.late).
	pending []*request
	// Request pacing: whether and when the last request was started, and
	// whether a data message was read since (the newest pending request
	// does not cover it).
	requested   bool
	lastRequest time.Time
	dataSince   bool
	// retries counts the requests timed out in a row that were tried
	// again (tick): at most maxRetries.
	retries int

	// unread are the ids of snapshots completed (and cached) here whose
	// marker has not been read back yet, oldest first: read back, it is
	// not cached a second time.
	unread []string

	cache cache
	stats Stats
}

// request is a snapshot request of this machine waiting for its response,
// and then for its watermarks.
type request struct {
	id      string
	started time.Time
	// late: Timeout passed without the response and its watermarks. The
	// request no longer holds a place among Config.MaxPending and no
	// longer stands for the data since (tick), but it still completes
	// when its response comes, up to lateFor Timeouts after started.
	late bool
	// Set once the response is read: where (a), its b, and the watermarks
	// of our third origins it names.
	responded bool
	at        marker.Position
	remote    marker.Position
	need      map[string]marker.Position
}

// New returns a Machine for cfg.
func New(cfg Config) *Machine {
	if cfg.Interval <= 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = defaultCacheSize
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 1
	}
	if cfg.NewID == nil {
		cfg.NewID = newUUID
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var third []string
	for _, c := range cfg.ThirdOrigins {
		if c != "" && c != cfg.Local && c != cfg.Remote && !slices.Contains(third, c) {
			third = append(third, c)
		}
	}
	cfg.ThirdOrigins = third
	return &Machine{
		cfg:   cfg,
		seen:  make(map[string]marker.Position),
		cache: cache{size: cfg.CacheSize},
	}
}

// Data reports a data message (not a marker) read from the local
// partition at pos. origin is "" for a message produced on Local, else the
// origin cluster, with originPos its position there. It returns SNAPSHOT
// markers (kind 12) for snapshots whose watermarks this message completed;
// the caller writes them into the local partition.
//
// Every data message read must be reported, including those the
// replicator does not forward: the watermarks count them all.
func (m *Machine) Data(pos marker.Position, origin string, originPos marker.Position) []marker.Marker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data(pos, origin, originPos)
}

// Marker reports a verified marker read from the local partition at pos.
// Markers that do not concern this pair, or this topic, are ignored. It
// returns the markers to write into the local partition:
//   - a request from Remote: a response (kind 11) addressed to Remote,
//     carrying pos and the third origins' watermarks (none if a watermark
//     is unknown, see Config.Fresh);
//   - a response from Remote to a pending request: a SNAPSHOT marker (kind
//     12) once the watermarks are met (now or at a later Data call);
//   - a SNAPSHOT marker written by Local for Remote (read after a
//     restart, or written by another instance): nothing; the snapshot
//     enters the cache. Read back after this machine completed it (and
//     cached it then), it is ignored.
//
// Requests written by Local, responses to requests not pending (unknown,
// already answered, or dropped by Tick after Timeout) and updates (kind
// 13, the subscription package's) return nothing.
func (m *Machine) Marker(pos marker.Position, mk marker.Marker) []marker.Marker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marker(pos, mk)
}

// Learn raises the watermark of third origin c to at least p. It is how a
// restarted sidecar, whose cursor did not start fresh, comes to know the
// watermarks it must put in responses: reading the partition's retained
// history, it learns the origin position of every copy of c's messages,
// and from every response it wrote earlier for Remote the watermark it
// named for c (marker.NoneSeen: none). The latest such response and every
// copy after it are retained together, so their maximum is at least the
// true watermark; a watermark too high only makes the requester wait
// longer, one too low could lose messages (see The round in the package
// doc). Origins other than the third origins are ignored.
func (m *Machine) Learn(c string, p marker.Position) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.learn(c, p)
}

// Unknown returns the third origins whose watermark is not known yet:
// while any is, requests from Remote go unanswered. Nil for a Fresh
// cursor.
func (m *Machine) Unknown() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unknown()
}

// Tick lets time pass: pending requests older than Timeout time out
// (the data they were to cover counts as not covered: up to maxRetries
// requests in a row are tried again without new data, so the tail of a
// partition that went quiet is covered even when its last request got no
// answer; a timed-out request still completes if its response comes
// within lateFor Timeouts), and a request (kind 10) addressed to Remote
// is returned when one is due:
// new data was read since the last request, linkUp (the replicator towards
// Remote is connected), Interval has passed, and fewer than
// Config.MaxPending requests are pending.
func (m *Machine) Tick(linkUp bool) []marker.Marker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tick(linkUp)
}

// Covering returns the newest cached snapshot whose Local position is
// consumed by a subscription whose mark-delete position is md (compared at
// entry granularity: the whole entry holding Local is at or before md).
// md names an entry, as the admin API's mark-delete position does; its
// Batch is ignored.
func (m *Machine) Covering(md marker.Position) (Snapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.cache.covering(md)
	if i < 0 {
		return Snapshot{}, false
	}
	return m.cache.s[i], true
}

// Forget drops the third origins' watermarks and stops assuming that
// every message of the partition was read here (Config.Fresh): another
// reader processed messages this machine did not see (a takeover by a
// second instance, in either direction). Until Learn or Data raise them
// again, requests from Remote go unanswered (Unknown), never answered
// with a watermark too low.
func (m *Machine) Forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = map[string]marker.Position{}
	m.cfg.Fresh = false
}

// Fresh reports whether the machine assumes it read every message of the
// partition (Config.Fresh, until Forget).
func (m *Machine) Fresh() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Fresh
}

// Abandon drops the pending request id: its marker was not written (the
// write failed, or this instance turned standby), so no response will
// come, and the request would otherwise hold its place among
// Config.MaxPending for Timeout. The data it was to cover counts as not
// covered.
func (m *Machine) Abandon(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.IndexFunc(m.pending, func(p *request) bool { return p.id == id }); i >= 0 {
		m.pending = slices.Delete(m.pending, i, i+1)
		m.dataSince = true
	}
}

// Idle reports whether Tick has nothing to do until Data or a marker comes:
// no request is pending (timed-out ones aside: they need no tick to
// complete) and no data came since the last one.
func (m *Machine) Idle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live() == 0 && !m.dataSince
}

// Pending reports whether a request that has not timed out is waiting
// for its response or watermarks.
func (m *Machine) Pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live() > 0
}

// Newest returns the cached snapshot with the furthest Local position.
func (m *Machine) Newest() (Snapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.cache.s) == 0 {
		return Snapshot{}, false
	}
	return m.cache.s[len(m.cache.s)-1], true
}

// Prune drops cached snapshots that no tracked subscription needs any more:
// every snapshot older than the newest one covered by md, the slowest
// tracked subscription's mark-delete position.
func (m *Machine) Prune(md marker.Position) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cache.prune(md)
}

// Stats returns the counters.
func (m *Machine) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// newUUID returns a random (version 4) UUID string.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
