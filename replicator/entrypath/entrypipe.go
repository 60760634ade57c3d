// Package entrypath is the data path: it copies each stored entry of a
// local partition whole to the same partition on a remote cluster, over
// the project's binary-protocol client (replicator/wire), and
// acknowledges the local cursor only after the remote confirmed, in
// order. Everything that loss, duplicates and stalls depend on is here:
// a partition's replicator (partition.go), the rules of the pipe
// (entrypipe.go), one session of it (session.go) and how sessions follow
// one another (entrysessions.go), its two ends (entryends.go), the
// read-back of the remote that proves which copies are there
// (entryreadback.go), and the byte budgets that bound what is held
// (budgets.go, receivepool.go).
//
// It exists apart from the pair lifecycle (replicator) and from
// subscription sync (subsync) so that the rules that keep messages from
// being lost are read, tested and mutated in one place: the sync is fed
// through the Sync interface declared here, and never reached into.
//
// A Partition is run by one goroutine (Run), which starts and waits for
// the sync's and the acknowledger's. TargetBudgets, ByteBudget,
// ReceivePools and ReceivePool are safe for concurrent use and shared by
// the partitions of a target.
package entrypath

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The entry pipe (data_path: entries) forwards each stored entry of a
// local partition whole: it reads only the entry's metadata, decides on
// it (entryrule.SkipReason), appends replicated_from and the origin
// position to it (PatchMetadata: the rest of the bytes are copied, never
// re-encoded) and sends metadata and payload as one SEND carrying the
// entry's message count. A batch stays one batch; compression,
// encryption, chunks, keys, event and publish times, producer name,
// delivery times and schema versions pass through untouched, as with
// Pulsar's own replicator. The rules that keep nothing lost: acknowledge
// in order after the remote confirmed, end the session at the first
// failure (the next one starts from the cursor: entrysessions.go), skip
// only what is read back from the remote (entryreadback.go).

// entrySource is a partition's cursor in the entry pipe (a wire.Consumer):
// Receive from one goroutine, Ack and Release from another.
type entrySource interface {
	Receive(ctx context.Context) (wire.Entry, error)
	Ack(wire.MessageID) error
	// Release hands the entry's permits back (after the remote confirmed
	// it, or it was skipped), so that permits bound what is in flight.
	Release(wire.Entry) error
	// MarkDelete is the subscription's mark-delete position; ok is false
	// when the broker does not say.
	MarkDelete(ctx context.Context) (id wire.MessageID, ok bool, err error)
	Close() error
}

// entryTarget is a partition's producer on the remote (a wire.Producer).
// Callbacks run in send order.
type entryTarget interface {
	Send(ctx context.Context, out wire.Outgoing, done func(wire.Receipt, error)) error
	// LastSequenceID is the remote broker's last recorded sequence id for
	// the producer name (-1 without deduplication).
	LastSequenceID() int64
	Flush(ctx context.Context) error
	Close() error
}

// entryEndpoints opens a partition's cursor and producer for the entry
// pipe, and reads the remote back (copiedSince).
type entryEndpoints interface {
	openCursor(ctx context.Context, onActive func(active bool)) (entrySource, error)
	// openProducer opens the producer; onLink is told, from the
	// producer's goroutine and without blocking, when its link to the
	// remote is up (created, connection speaking) and when it is down
	// (reconnecting, or its connection silent), until Close.
	// The producer sends under the producer name of epoch (see
	// entrySeq).
	openProducer(ctx context.Context, epoch uint64, onLink func(up bool)) (entryTarget, error)
	// reachTarget asks the remote whether it answers from here (a fresh
	// lookup of the partition and a connection to its broker): nil when
	// it does. A stepped-down partition resubscribes only after that.
	reachTarget(ctx context.Context) error
	// copiedSince is the read-back's proof from from on; reach, when
	// above 0, is how many of the pair's copies the remote may hold from
	// from on (see recordReach), beyond the usual in-flight window.
	copiedSince(ctx context.Context, from marker.Position, reach int64) (copySet, error)
	// targetSchema returns the remote's version of the schema the local
	// partition knows as version (fetched here, registered there with
	// get-or-create on first use, remembered after).
	targetSchema(ctx context.Context, version []byte) ([]byte, error)
}

// Sync is the subscription sync of the partition as the entry pipe feeds
// it: every entry the pipe reads goes to DataAt or MarkerAt, in the order
// read, from the session's goroutine, while the sync's own goroutine
// (Run, started by the partition beside its sessions and outliving them,
// so that a snapshot in progress survives a reconnect) ticks, follows and
// applies. Implementations must be safe for that: one feeding goroutine
// at a time, beside Run.
type Sync interface {
	// DataAt feeds data read at pos: a copy of origin's entry at at when
	// the copy's origin is signed (marker.Origin.Signed), local data (or
	// a copy not proven one) when origin is "".
	DataAt(ctx context.Context, pos marker.Position, origin string, at marker.Position)
	// MarkerAt feeds a marker read at pos (entryrule.Marker): body is its
	// encoded form, from is where the entry says it was copied from
	// (entryrule.Origin), producer the name it was written under. It reports
	// whether the pipe forwards the entry to the remote.
	MarkerAt(ctx context.Context, pos marker.Position, body []byte, from marker.Origin, producer string) (forward bool)
	// BatchedMarker feeds a marker read at pos in an entry that cannot
	// hold one marker as written (a batch, compressed, encrypted); the
	// pipe skips it.
	BatchedMarker(pos marker.Position)
	// Takeover tells the sync that the pipe resumed past entries it did
	// not read itself (another instance processed them; see continues).
	Takeover()
	// StartsAt reports whether pos, the first entry the pipe reads since
	// the sync was built, is where the sync assumes reading starts: any
	// entry, unless the sync assumes it reads the partition from its
	// first entry (snapshot.Config.Fresh).
	StartsAt(pos marker.Position) bool
	// Run runs the sync until ctx is done; linkUp reports whether the
	// pipe has a producer to the remote open.
	Run(ctx context.Context, linkUp func() bool)
}

// forwardMetadata is the metadata a copy of e carries to the remote: e's
// own bytes (minus the transaction fields when dropTxn), replicated_from,
// the remote's schema version when schema is set, and last the origin
// (entryrule.OriginProps), whose signature covers everything before it and the
// payload.
func (p *Partition) forwardMetadata(e wire.Entry, dropTxn bool, schema []byte) ([]byte, error) {
	patch := wire.Patch{ReplicatedFrom: p.local, DropTxn: dropTxn, SchemaVersion: schema}
	md, err := wire.PatchMetadata(make([]byte, 0, len(e.Metadata)+160), e.Metadata, patch)
	if err != nil {
		return nil, err
	}
	return wire.AppendProperties(md, entryrule.OriginProps(p.keys, p.topic, p.local, p.remote, e.ID, md, e.Payload)...), nil
}

// entrySeq is the sequence id a copy of the entry at pos is sent with:
// the entry's position packed as ledger<<32 | entry (the ledger's low 31
// bits: see epochs below), so that the same entry carries the same id in
// every session and on every instance, and ids grow with positions. The
// remote's deduplication then stores each entry once and in order
// whichever session's copy arrives first, even when sends of a session
// given up on (a send timeout, a lost connection, an instance that lost
// the cursor) are still in the link and land after the next session's.
// Ids counted per session from the broker's record could not: the
// broker's record and the read-back's proof (copiedSince) are taken at
// different moments, so when old sends land in between, a new session
// numbers the next entries below ids already used for later ones, and a
// slow link gets copies stored twice and out of order.
//
// Ledger ids are BookKeeper's, counted across the whole cluster, so a
// long-lived cluster reaches 2^31 and beyond, while the broker's ids are
// signed (below 2^63) and 32 bits go to the entry: 31 bits of ledger fit.
// So ledger ids are cut into epochs of 2^31 (seqEpoch), and each epoch
// has a producer name of its own (epochProducerName): in epoch e the id
// is (ledger mod 2^31)<<32 | entry under the e-th name. Within an epoch
// ids grow with positions as before; at the step from one epoch to the
// next the packed ledger falls back to 0, which the broker would take for
// a duplicate of everything sent under the old name, so the new epoch
// starts under a name the broker has no record for. A session's producer
// belongs to one epoch: at the first entry of another one the session
// ends once what it sent is confirmed (errEpochChanged), and the next
// session opens the producer under that epoch's name. Epoch 0 (ledgers
// below 2^31) keeps the name and the packing of the versions before
// epochs, so the remotes' records for it stay valid. Every ledger id has
// an epoch (read as unsigned, even the ones no BookKeeper hands out), so
// every real position gets its packed id. The read-back (copiedSince)
// recognises copies by their signed origin whatever the producer name,
// so copies sent before the step are found after it; only recordReach
// reads the record of a name, the one of the epoch it asks for.
//
// Why not another packing under one name: no split of 63 bits holds any
// ledger id with 2^32 entries, a split giving the ledger more bits fails
// on large ledgers instead, and ids relative to some base need the base
// kept somewhere; a name per 2^31 ledger ids costs one session restart
// per partition each time the cluster counts another 2^31 ledgers.
//
// floor is the lowest id the broker takes as new: its record for the
// producer's name when the producer opened plus one, or the previous id
// sent plus one. An entry whose packed id is below it (the broker
// recorded a later entry of this partition whose copy the read-back did
// not find, or a record counted by an older version on a ledger 0), or
// whose entry id does not fit (2^32 entries in one ledger, only reachable by
// configuring ledgers that large), gets the floor instead: sent again
// under a new id, a possible duplicate but never taken for one. That
// takes the read-back's proof that the entry is not on the remote: a
// session whose read-back failed sends no entry under a counted id
// (see maxReadBackRetries). The caller sends it under the producer name
// of pos's epoch.
func entrySeq(pos marker.Position, floor uint64) (seq uint64, packed bool) {
	if pos.Entry < 0 || pos.Entry >= 1<<32 {
		return floor, false
	}
	id := (uint64(pos.Ledger)&epochLedgerMask)<<32 | uint64(pos.Entry)
	if id < floor {
		return floor, false
	}
	return id, true
}

// epochLedgerBits is how many low bits of a ledger id entrySeq packs;
// the bits above them are the ledger's epoch.
const epochLedgerBits = 31

const epochLedgerMask = 1<<epochLedgerBits - 1

// seqEpoch is the epoch of a ledger id (see entrySeq): 0 below 2^31.
func seqEpoch(ledger int64) uint64 { return uint64(ledger) >> epochLedgerBits }

// epochProducerName is the producer name the entry pipe sends the
// entries of epoch under (see entrySeq): base in epoch 0, as every
// version before epochs did, base + ".epoch<e>" after. Cluster names
// hold no dot, so no pair's base name ends like that; the prefix stays
// base's, which starts with marker.SidecarProducers.
func epochProducerName(base string, epoch uint64) string {
	if epoch == 0 {
		return base
	}
	return base + ".epoch" + strconv.FormatUint(epoch, 10)
}

// errEpochChanged ends a session at the first entry of another epoch than
// its producer's (see entrySeq), once every entry it sent was confirmed;
// Run starts the next session at once, which opens the producer under the
// new epoch's name.
var errEpochChanged = errors.New("ledger ids reached another sequence id epoch")

// errRefusedSkipped ends a session whose remote refused an entry for good
// with on_refused: skip: the entry was skipped, but the producer gave up
// with the refusal, so the next session (at once) sends what follows.
var errRefusedSkipped = errors.New("an entry the remote refuses for good was skipped (on_refused: skip)")

// recordReach is how many entries from pos on the remote's record for
// the producer name of pos's epoch (an id entrySeq packed) says the pair
// may have copied: the read-back must look back that far from the
// remote's end to see them all. Its usual window (max_pending_messages +
// 100) covers one session's sends in flight; copies from further back
// (an instance that ran ahead of a cursor whose acknowledgements were
// lost) would otherwise be missed and sent again under a counted id. 0
// when the record is not in pos's ledger (or not a packed id): the usual
// window then.
func recordReach(record int64, pos marker.Position) int64 {
	if record < 0 || pos.Entry < 0 {
		return 0
	}
	ledger, entry := uint64(record)>>32, record&(1<<32-1)
	if ledger != uint64(pos.Ledger)&epochLedgerMask || entry < pos.Entry {
		return 0
	}
	return entry - pos.Entry + 1
}

// Partition replicates one local partition to one remote, entry by
// entry: the unit of work. It owns its cursor and producer; one partition
// failing never stops another.
type Partition struct {
	local, remote string
	topic         string      // the partition, the same on both sides
	keys          marker.Keys // sign the copies' origins; zero: none
	ends          entryEndpoints
	budget        *ByteBudget
	maxPending    int              // the producer's window: entries sent and not confirmed
	skipRefused   bool             // on_refused: skip (an entry the remote refuses for good), not stop
	msgRate       *cluster.Limiter // shared by the pair's partitions; nil = unlimited
	byteRate      *cluster.Limiter
	m             *metrics.Metrics
	log           *zap.Logger
	// drainTimeout bounds how long a stopping session waits for in-flight
	// sends, so that SIGTERM exits within 10 s even when the remote is down.
	drainTimeout time.Duration
	// stepDownAfter is how long an active session may go without a
	// working link to the remote before it steps down (see
	// stepDownAfter); 0: never.
	stepDownAfter time.Duration

	// closing is closed when the last producer has finished closing. A new
	// producer waits for it: an abandoned producer that reconnected later
	// could otherwise write old entries after the new one's (closeWithin).
	closing chan struct{}

	// sync keeps subscriptions in step; nil when none are configured. It
	// sees every entry this pipe reads (entryrule.Marker, entryrule.Origin).
	sync Sync
	// linkUp is true while a producer to the remote is open.
	linkUp atomic.Bool
	// received, when set, is set on each entry read: the pair refreshes
	// the stats of a quiet topic early once it has traffic.
	received *atomic.Bool
	// activeOut, when set, mirrors the open session's active (see
	// Config.Active); false between sessions.
	activeOut *atomic.Bool
	// lastSeen is the last entry the sync saw (hasSeen): an entry that
	// does not follow it was resumed past entries another instance
	// processed (continues).
	lastSeen marker.Position
	hasSeen  bool
	// steppedDown is when the last session stepped down (zero: it did
	// not): the next one waits until the remote answers (awaitTarget).
	steppedDown time.Time
	// aheadAt is the entry the last sessions ended on with errStartAhead,
	// aheadRuns how many in a row (see maxStartAhead).
	aheadAt   marker.Position
	aheadRuns int
	// readBackFails counts the sessions in a row whose read-back of the
	// remote failed on a link error (see maxReadBackRetries).
	readBackFails int
	// awaitingReadBack is set while the partition waits for a read-back
	// that goes through (session.awaitReadBack).
	awaitingReadBack bool
}

// maxReadBackRetries is how many sessions in a row may end on a read-back
// of the remote that failed on a link error (a reset, a lost connection)
// before a session sends without it (a read-back refused for good, say
// a role that may not consume on the remote, is not retried so). A new
// session a backoff later almost always reads back whole.
//
// Without the proof a session sends each entry under its own packed
// sequence id (entrySeq) only: a remote with deduplication then drops
// the copies it holds and keeps the order. An entry that would need a
// counted id (the remote's record is at or past it, so it may hold the
// entry: sent under a counted id, it would be stored twice and after
// later ones) stops the session, and the partition waits for a
// read-back that goes through (session.awaitReadBack) rather than copy
// twice. A remote without deduplication has no record: there a session
// without the proof sends every entry in flight when the one before
// ended again (duplicates, never loss).
const maxReadBackRetries = 5

// errAwaitingReadBack ends a session without the read-back's proof at an
// entry the remote may hold already (see session.awaitReadBack).
var errAwaitingReadBack = errors.New("the remote's deduplication record may cover this entry and the read-back failed: waiting for one that goes through")

// continues reports whether pos, the next entry the sync sees, follows
// the entries it saw: the next entry of the same ledger, or one seen
// already (delivered again). For a sync that saw nothing yet and assumes
// it reads the partition from its start (snapshot.Config.Fresh), only the
// partition's first entry at start does. The first entry of another
// ledger does not: positions do not tell whether the ledger before ended
// where this sync stopped reading, and when another instance read on to
// its end and the topic was reloaded (a new ledger), a standby taking over
// there would answer requests with no watermark for the third origins the
// other instance had seen. A new ledger (at most one per 50,000 entries or 10
// minutes by default, and at each topic load) costs a bounded re-read.
func (p *Partition) continues(pos marker.Position) bool {
	if !p.hasSeen {
		return p.sync.StartsAt(pos)
	}
	last := p.lastSeen
	return pos.Compare(last) <= 0 || (pos.Ledger == last.Ledger && pos.Entry == last.Entry+1)
}

// What startAt makes of the first entry an active session receives.
const (
	startNext         = iota // the cursor's first unacknowledged entry
	startAcknowledged        // acknowledged already (our ack overtook its dispatch)
	startAhead               // a later entry, delivered before the first unacknowledged one
)

// errStartAhead ends a session whose cursor delivered a later entry before
// the first unacknowledged one. A Failover subscription does that when
// its active consumer changes while a read is pending: the broker hands
// the new consumer what that read returns (entries after the old one's
// last), and only then rewinds to the first unacknowledged entry. Sent,
// the later entry would land on the remote before the earlier ones (two
// instances killed and started under load are enough). The next session
// starts after the rewind.
var errStartAhead = errors.New("cursor delivered a later entry before the first unacknowledged one")

// maxStartAhead bounds how often in a row a session ends on the same
// entry with errStartAhead before that entry is taken as the start: an
// entry the broker never dispatches and never acknowledges (an entry
// filter's RESCHEDULE) must not stop the partition.
const maxStartAhead = 3

// startAt judges pos, the first entry an active session is to process,
// against the subscription's mark-delete position: the next entry is the
// one after it in the same ledger, or the first of a later ledger.
func (p *Partition) startAt(ctx context.Context, src entrySource, pos marker.Position) (int, error) {
	id, ok, err := src.MarkDelete(ctx)
	if err != nil || !ok {
		return startNext, err // a broker that does not say: as before
	}
	md := entryPos(id)
	next := (pos.Ledger == md.Ledger && pos.Entry == md.Entry+1) || (pos.Ledger > md.Ledger && pos.Entry == 0)
	switch {
	case pos.Compare(md) <= 0:
		return startAcknowledged, nil
	case next:
		p.aheadAt, p.aheadRuns = marker.Position{}, 0
		return startNext, nil
	}
	if pos != p.aheadAt {
		p.aheadAt, p.aheadRuns = pos, 0
	}
	if p.aheadRuns++; p.aheadRuns > maxStartAhead {
		p.log.Warn("the cursor keeps delivering an entry after its mark-delete position first; taking it as the start",
			zap.Stringer("entry", pos), zap.Stringer("mark_delete", md))
		return startNext, nil
	}
	p.log.Debug("a later entry came before the first unacknowledged one; starting again",
		zap.Stringer("entry", pos), zap.Stringer("mark_delete", md))
	return startAhead, nil
}

// stepDownAfter is how long an active cursor may go without a working
// link to the remote (its producer cannot be opened, or stays
// reconnecting or silent) before the session steps down: twice the
// remote's keep_alive. The wire client already takes up to 1.125
// keep_alive to notice a half-open link and then reconnects within
// seconds (backoff up to 5 s, a 10 s handshake timeout), so a link that
// blips, a broker restart or a topic moving between brokers is over well
// inside the bound and never moves the partition (a takeover costs a
// read-back and the broker's failover delay); a link that stays cut is
// handed to another instance within about one more keep_alive.
func stepDownAfter(keepAlive time.Duration) time.Duration { return 2 * keepAlive }

// errStandby ends a session whose cursor became a standby while it held
// the producer; Run starts the next one at once.
var errStandby = errors.New("cursor became a standby")

// errSteppedDown ends a session whose remote had no working link for
// stepDownAfter: its cursor is closed so that the broker makes another
// instance's consumer active (one that may reach the remote), and the
// partition subscribes again only once the remote answers (awaitTarget).
// With no other instance nothing moves meanwhile; the backlog waits on
// the cursor.
var errSteppedDown = errors.New("remote unreachable: stepped down")

// errProducerGaveUp ends a session whose producer gave up for good while
// its link was down (its reconnect refused with an error no retry
// changes: a terminated target topic, a revoked permission), found when
// the step-down fell due (see stepDown): the remote answers and refuses,
// so the partition does not step down. The next session opens a new
// producer at its next entry, whose refusal takes its usual route (a
// terminated topic stops the partition there).
var errProducerGaveUp = errors.New("the producer on the remote gave up")

// openTarget opens the producer. An attempt that fails without an answer
// from the remote (no connection, no reply in time) is tried again in
// the session, with the cursor kept, until the step-down fires: ending
// the session instead would close and reopen the cursor at each attempt,
// flipping the partition between this instance and a standby that could
// copy it. A broker's refusal ends the session as before.
func (p *Partition) openTarget(ctx context.Context, epoch uint64, down *stepDown, active *atomic.Bool) (entryTarget, error) {
	down.arm()
	bo := cluster.NewBackoff(200*time.Millisecond, 5*time.Second)
	var last string
	for {
		dst, err := p.ends.openProducer(ctx, epoch, down.link)
		if err == nil {
			return dst, nil
		}
		down.note(err)
		var be *wire.BrokerError
		if ctx.Err() != nil || p.stepDownAfter <= 0 || errors.As(err, &be) || !wire.IsRetryable(err) {
			return nil, err
		}
		if !active.Load() {
			return nil, errStandby
		}
		if msg := err.Error(); msg != last {
			p.log.Warn("cannot open the producer on the remote, retrying", zap.String("remote", p.remote), zap.Error(err))
			last = msg
		}
		if !cluster.Sleep(ctx, bo.Next()) {
			return nil, context.Cause(ctx)
		}
	}
}

// awaitTarget waits, after a step-down, until the remote answers
// (reachTarget), asking with capped backoff; it reports false when ctx
// ended first. Each question is bounded by half the step-down bound, so
// that a blackholed link does not hold one for the client's 30 s.
func (p *Partition) awaitTarget(ctx context.Context) bool {
	bo := cluster.NewBackoff(500*time.Millisecond, 5*time.Second)
	var last string
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, max(p.stepDownAfter/2, time.Second))
		err := p.ends.reachTarget(qctx)
		cancel()
		if err == nil {
			p.log.Info("remote reachable again: resubscribing",
				zap.String("remote", p.remote), zap.Duration("stepped_down_for", time.Since(p.steppedDown).Round(time.Millisecond)))
			return true
		}
		if msg := err.Error(); msg != last && ctx.Err() == nil {
			p.log.Debug("remote still unreachable", zap.String("remote", p.remote), zap.Error(err))
			last = msg
		}
		cluster.Sleep(ctx, bo.Next())
	}
	return false
}

// stepDown ends an active session (fire) once its remote has had no
// working link for after: from the first attempt to open the producer
// until the producer reports its link up, and from each report of the
// link going down until the next of it coming up. It watches only while
// armed (the session holds or opens a producer): a standby has nothing
// to step down from, and a closing producer's last reports are ignored.
// Safe for concurrent use: link runs on the producer's goroutine.
//
// When the bound passes, the producer is asked first whether it gave up
// for good (gaveUp: its reconnect was refused with an error no retry
// changes, such as a terminated target topic): then the remote answers
// and refuses, so the session ends with that error (quit) rather than
// step down, which would only move the partition, or watch on in
// silence until the next entry. Then reachable (if set) asks the
// remote whether it answers from here (a fresh lookup and a connection
// that is not silent); if it does, the watch starts over instead of
// firing. Another instance would meet the same remote, so stepping down
// would only move the partition: a producer waiting its turn among
// thousands being opened at once (wire.ClientOptions.MaxOpens), or a
// broker slow to load the topic, is not a remote this instance cannot
// reach.
type stepDown struct {
	after     time.Duration // 0: never fire
	fire      func()
	reachable func(ctx context.Context) error
	// quit ends the session with the error its producer gave up on.
	quit func(err error)

	mu      sync.Mutex
	armed   bool
	stopped bool
	since   time.Time // no working link since; zero: a working link
	timer   *time.Timer
	lastErr error
	downed  time.Duration // how long the link had been down when fired
	// gaveUp, set while a producer is open (watchProducer), returns the
	// error it gave up on for good, nil while it has not.
	gaveUp func() error
}

// arm starts watching a producer being opened: there is no working link
// until it reports one.
func (s *stepDown) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
	s.lostLocked()
}

// link is the producer's onLink.
func (s *stepDown) link(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed {
		return
	}
	if up {
		s.since, s.lastErr = time.Time{}, nil
		s.stopTimer()
		return
	}
	s.lostLocked()
}

func (s *stepDown) lostLocked() {
	if s.stopped || s.after <= 0 {
		return
	}
	if s.since.IsZero() {
		s.since = time.Now()
	}
	if s.timer == nil {
		since := s.since
		s.timer = time.AfterFunc(time.Until(since.Add(s.after)), func() { s.due(since) })
	}
}

// due runs when the bound of the watch that began at since passed.
func (s *stepDown) due(since time.Time) {
	current := func() bool { return !s.stopped && s.armed && s.since == since }
	s.mu.Lock()
	ok := current()
	gaveUp := s.gaveUp
	s.mu.Unlock()
	if !ok {
		return
	}
	if gaveUp != nil && s.quit != nil {
		if err := gaveUp(); err != nil {
			s.mu.Lock()
			ok := current()
			s.mu.Unlock()
			if ok {
				s.quit(err)
			}
			return
		}
	}
	if s.reachable != nil {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.after/2, reachProbeTimeout))
		err := s.reachable(ctx)
		cancel()
		if err == nil {
			s.mu.Lock()
			if current() {
				s.timer = time.AfterFunc(s.after, func() { s.due(since) })
			}
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	if !current() {
		s.mu.Unlock()
		return
	}
	s.downed = time.Since(since)
	s.mu.Unlock()
	s.fire()
}

// reachProbeTimeout bounds the question whether the remote answers, asked
// when a step-down is due: a blackholed link delays the step-down by at
// most this much.
const reachProbeTimeout = 5 * time.Second

func (s *stepDown) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// note keeps err as the latest reason the link is not working.
func (s *stepDown) note(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
}

// disarm stops watching: the producer is being closed.
func (s *stepDown) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.since, s.gaveUp = false, time.Time{}, nil
	s.stopTimer()
}

// watchProducer lets a due step-down ask dst whether it gave up for good
// (see stepDown), until disarm.
func (s *stepDown) watchProducer(dst entryTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaveUp = func() error { return gaveUp(dst) }
}

// gaveUp returns the error dst gave up on for good, nil while it has not
// (or was closed): a Flush that may not wait returns at once the
// producer's terminal error, and otherwise nothing or its context's.
func gaveUp(dst entryTarget) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := dst.Flush(ctx)
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, wire.ErrClosed) {
		return nil
	}
	return err
}

// stop ends the watch for good (the session is over).
func (s *stepDown) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.stopTimer()
}

// downFor is how long the link had been down when the step-down fired.
func (s *stepDown) downFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downed
}

func (s *stepDown) lastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// skip acknowledges an entry that is not copied, by a rule docs/data-paths.md
// and docs/guarantees.md state (reason: a skip reason), and counts its
// messages.
func (p *Partition) skip(src entrySource, e wire.Entry, reason string) {
	p.m.Skipped.WithLabelValues(p.local, p.remote, reason).Add(float64(max(e.NumMessages, 1)))
	_ = src.Ack(e.ID)
	_ = src.Release(e)
}
