package entrypath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// session is one cursor and producer lifetime of a Partition: it opens
// the cursor (open), takes its entries in order (receive), decides on
// each and feeds the subscription sync (route), opens the producer and
// reads the remote back when it has none (target), sends (send), and at
// the first failure ends, closing what it opened (close). Run's next
// session starts from the cursor (entrysessions.go).
//
// A session is used by the partition's goroutine, but for what the
// producer's callbacks and the cursor's active-change reports touch: the
// atomics, the receipts' acknowledging (acks) and cancel.
type session struct {
	p    *Partition
	ctx  context.Context // the partition's: done when it stops
	sctx context.Context // the session's: ends at its first failure (cancel)
	// cancel ends the session with its cause.
	cancel context.CancelCauseFunc
	down   *stepDown
	pair   []string // the metrics' labels: local, remote

	// active: the cursor is the subscription's active consumer;
	// holding: a producer is open (a standby then ends the session).
	active, holding atomic.Bool
	src             entrySource
	dst             entryTarget // nil while no producer is open

	// acks acknowledges the entries in send order as their receipts
	// come; progress is set when it acknowledged something.
	acks     *acks
	progress atomic.Bool
	// halted is set when a send failed or was answered as a duplicate:
	// acks is ending the session.
	halted atomic.Bool

	copied   copySet         // the read-back's proof, for the producer open
	last     marker.Position // the last entry received (hasLast)
	hasLast  bool
	started  bool   // the session's first entry to process was checked (startAt)
	seq      uint64 // the lowest id the remote takes as new (entrySeq)
	epoch    uint64 // the producer's epoch (entrySeq)
	unpacked bool   // an entry of this producer got a counted id (logged once)
	// unproven is why the read-back failed when the session sends
	// without it (nil: it went through); an entry that would need a
	// counted sequence id then waits for one that goes through
	// (awaitReadBack).
	unproven error
}

// verdict is what a step of the session decided about the entry at hand.
type verdict int

const (
	proceed    verdict = iota // go on with this entry
	nextEntry                 // this entry is dealt with: take the next
	endSession                // the session ends (its cause is set)
)

func (p *Partition) session(ctx context.Context) (bool, error) {
	if !p.steppedDown.IsZero() {
		if !p.awaitTarget(ctx) {
			return false, nil
		}
		p.steppedDown = time.Time{}
	}
	s := &session{p: p, ctx: ctx, pair: []string{p.local, p.remote}}
	s.sctx, s.cancel = context.WithCancelCause(ctx)
	defer s.cancel(nil)
	s.down = &stepDown{after: p.stepDownAfter, fire: func() { s.cancel(errSteppedDown) }, reachable: p.ends.reachTarget,
		quit: func(err error) { s.cancel(fmt.Errorf("%w: %w", errProducerGaveUp, err)) }}
	defer s.down.stop()

	if err := s.open(); err != nil {
		return false, fmt.Errorf("open cursor: %w", err)
	}
	for s.next() {
	}
	return s.close()
}

// next takes one entry through the session; false ends it.
//
// An idle partition's goroutine waits inside receive, with next, the
// session loop and runSessions below it. Their frames are kept small
// (the work on an entry is in forward, received and stopRefused, not
// inlined) so that what a waiting goroutine uses stays under a quarter
// of 16 KiB: the runtime then shrinks its stack to 8 KiB at the next
// garbage collection, where the frames that were here kept about 4.7 KiB
// in use and every idle partition and direction at 16 KiB (12.4 KiB per
// goroutine on average at 1,000 topics both ways, the subs bench row).
func (s *session) next() bool {
	e, pos, v := s.receive()
	if v != proceed {
		return v == nextEntry
	}
	return s.forward(e, pos)
}

// forward takes a received entry through routing, the producer and the
// send (see next for why it is a function of its own).
//
//go:noinline
func (s *session) forward(e wire.Entry, pos marker.Position) bool {
	md, v := s.route(e, pos)
	if v != proceed {
		return v == nextEntry
	}
	if v := s.target(e, pos); v != proceed {
		return v == nextEntry
	}
	return s.send(e, pos, &md) == nextEntry
}

// open opens the cursor and readies the acknowledging of receipts.
func (s *session) open() error {
	p := s.p
	s.setActive(true)
	src, err := p.ends.openCursor(s.sctx, func(a bool) {
		s.setActive(a)
		if !a && s.holding.Load() {
			s.cancel(errStandby)
		}
	})
	if err != nil {
		s.setActive(false)
		return err
	}
	s.src = src
	s.acks = p.newAcks(src, s.cancel, &s.progress)
	return nil
}

// setActive records whether the cursor is the active consumer, for the
// session and for the partition's Config.Active.
func (s *session) setActive(a bool) {
	s.active.Store(a)
	s.p.tellActive(a)
}

// tellActive sets Config.Active to a and, when that changes it, tells the
// sync at once: a resting partition's sync sleeps for minutes, and until
// it looks, a standby keeps the marker producer (which reconnects by
// itself after an unload or a broker restart) and the active instance's
// markers are refused, or the newly active one holds its updates.
func (p *Partition) tellActive(a bool) {
	if p.activeOut != nil && p.activeOut.Swap(a) != a && p.sync != nil {
		p.sync.ActiveChanged()
	}
}

// receive takes the cursor's next entry and checks where it stands: a
// redelivery ends the session, a standby's entry is handed back, and the
// session's first entry to process is judged against the mark-delete
// position (startAt).
func (s *session) receive() (wire.Entry, marker.Position, verdict) {
	e, err := s.src.Receive(s.sctx)
	if err != nil {
		if s.sctx.Err() == nil {
			s.cancel(fmt.Errorf("receive: %w", err))
		}
		return e, marker.Position{}, endSession
	}
	pos := entryPos(e.ID)
	return e, pos, s.received(e, pos)
}

// received checks where a received entry stands (see receive; apart
// from it to keep a waiting goroutine's stack small, see next).
//
//go:noinline
func (s *session) received(e wire.Entry, pos marker.Position) verdict {
	p := s.p
	if p.received != nil && !p.received.Load() {
		p.received.Store(true)
	}
	if ce := p.log.Check(zap.DebugLevel, "entry received"); ce != nil {
		ce.Write(zap.Stringer("id", e.ID), zap.Int32("messages", e.NumMessages), zap.Uint32("redeliveries", e.RedeliveryCount), zap.Bool("active", s.active.Load()))
	}
	if s.hasLast && pos.Compare(s.last) <= 0 {
		s.cancel(errRedelivered)
		return endSession
	}
	s.last, s.hasLast = pos, true
	if !s.active.Load() {
		s.closeTarget(true)
		p.readBackWorks() // another instance's cursor sends now
		_ = s.src.Release(e)
		return nextEntry
	}
	if !s.started {
		switch at, err := p.startAt(s.sctx, s.src, pos); {
		case err != nil:
			s.cancel(fmt.Errorf("mark-delete position: %w", err))
		case at == startAcknowledged:
			_ = s.src.Release(e)
			return nextEntry
		case at == startAhead:
			s.cancel(errStartAhead)
		}
		if s.sctx.Err() != nil {
			_ = s.src.Release(e)
			return endSession
		}
		s.started = true
	}
	return proceed
}

// route decides on the entry from its metadata (entryrule.SkipReason),
// feeds it to the subscription sync, and skips what is not forwarded.
func (s *session) route(e wire.Entry, pos marker.Position) (wire.Metadata, verdict) {
	p := s.p
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		// The broker stored it, so it parsed there: a malformed entry
		// here is a bug on our side. Stop rather than skip it.
		s.cancel(fmt.Errorf("entry %s: %w", e.ID, err))
		return md, endSession
	}
	reason := entryrule.SkipReason(&md, p.remote)
	if p.sync != nil {
		if !p.continues(pos) {
			p.sync.Takeover()
		}
		if !p.hasSeen || pos.Compare(p.lastSeen) > 0 {
			p.lastSeen, p.hasSeen = pos, true
		}
		from := entryrule.Origin(&md, e, p.keys, p.topic, p.local)
		if body, ok := entryrule.Marker(&md, e.Payload); ok {
			reason = entryrule.SkipMarker
			if body == nil {
				p.sync.BatchedMarker(pos)
			} else if p.sync.MarkerAt(s.sctx, pos, body, from, md.ProducerName) {
				reason = ""
			}
		} else if from.Signed {
			p.sync.DataAt(s.sctx, pos, from.Cluster, from.At)
		} else {
			p.sync.DataAt(s.sctx, pos, "", marker.Position{})
		}
	}
	if reason != "" {
		s.skip(e, reason)
		return md, nextEntry
	}
	return md, proceed
}

// target makes sure a producer of the entry's epoch is open: an entry of
// another epoch ends the session once what was sent is confirmed; with
// none open, it opens one (after the previous one has closed) and reads
// the remote back (copiedSince).
func (s *session) target(e wire.Entry, pos marker.Position) verdict {
	p := s.p
	if s.dst != nil && seqEpoch(pos.Ledger) != s.epoch {
		// The entry's copy goes under another producer name (entrySeq):
		// end the session once every entry sent was confirmed (and so
		// acknowledged), so that the next one opens the producer of the
		// entry's epoch and starts with this entry.
		_ = s.src.Release(e)
		if err := s.dst.Flush(s.sctx); err != nil {
			if s.sctx.Err() == nil {
				s.cancel(inDoubt("flush before the producer name changes", err))
			}
			return endSession
		}
		if s.halted.Load() {
			<-s.sctx.Done() // the acker ends the session on that receipt
			return endSession
		}
		p.log.Info("ledger ids reached another sequence id epoch: the next session sends under its producer name",
			zap.Stringer("id", e.ID), zap.Uint64("epoch", seqEpoch(pos.Ledger)), zap.Uint64("previous_epoch", s.epoch))
		s.cancel(errEpochChanged)
		return endSession
	}
	if s.dst != nil {
		return proceed
	}
	if p.closing != nil {
		select {
		case <-p.closing:
		case <-s.sctx.Done():
		}
		if s.sctx.Err() != nil {
			return endSession
		}
	}
	s.epoch = seqEpoch(pos.Ledger)
	dst, err := p.openTarget(s.sctx, s.epoch, s.down, &s.active)
	if err != nil {
		if refusal(err) == stopTargetTerminated {
			// The broker refuses every producer of a terminated topic:
			// the entry at hand is where the partition stops.
			s.cancel(&refusedError{pos: pos, reason: stopTargetTerminated, err: fmt.Errorf("open producer: %w", err)})
			return endSession
		}
		s.cancel(fmt.Errorf("open producer: %w", err))
		return endSession
	}
	s.dst = dst
	s.down.watchProducer(dst)
	s.holding.Store(true)
	p.linkUp.Store(true)
	p.m.Connected.WithLabelValues(s.pair...).Inc()
	if !s.active.Load() {
		s.cancel(errStandby)
		return endSession
	}
	// Sequence ids follow from positions (entrySeq), above the remote's
	// record for the producer name (the epoch's): with deduplication on,
	// nothing new is ever taken for a duplicate.
	s.seq = uint64(dst.LastSequenceID() + 1)
	s.unpacked = false
	s.unproven = nil
	if s.copied, err = p.ends.copiedSince(s.sctx, pos, recordReach(dst.LastSequenceID(), pos)); err != nil {
		if s.sctx.Err() != nil {
			return endSession
		}
		if wire.IsRetryable(err) && p.readBackFails < maxReadBackRetries {
			p.readBackFails++
			s.cancel(fmt.Errorf("read back the remote: %w", err))
			return endSession
		}
		// Sending on without the proof is safe under the entries' own
		// (packed) sequence ids: a remote with deduplication drops what
		// it holds, in order. An entry its record may cover waits
		// (awaitReadBack).
		s.unproven = err
		p.log.Warn("cannot read back the remote: sending on without its proof, each entry under its own sequence id; an entry the remote's deduplication record may cover waits for a read-back that goes through",
			zap.Error(err), zap.Int64("last_sequence_id", dst.LastSequenceID()))
	} else {
		p.readBackWorks()
	}
	p.readBackFails = 0
	p.log.Debug("producer open", zap.Uint64("epoch", s.epoch), zap.Int64("last_sequence_id", dst.LastSequenceID()), zap.Int("copies_found", len(s.copied)))
	return proceed
}

// send skips an entry the read-back found on the remote, and sends any
// other under its position's sequence id, with the remote's schema
// version and the signed origin, within the rate limits and the byte
// budget; acks takes its receipt.
func (s *session) send(e wire.Entry, pos marker.Position, md *wire.Metadata) verdict {
	p := s.p
	if s.copied.has(pos) {
		delete(s.copied, pos)
		s.skip(e, entryrule.SkipAlreadyCopied)
		return nextEntry
	}
	if s.unproven != nil {
		if _, packed := entrySeq(pos, s.seq); !packed {
			s.awaitReadBack(pos)
			return endSession
		}
	}
	var schema []byte
	if len(md.SchemaVersion) > 0 {
		// Schema versions are per cluster: typed consumers on the remote
		// need the remote's version of the same schema.
		var err error
		if schema, err = p.ends.targetSchema(s.sctx, md.SchemaVersion); err != nil {
			if reason := refusal(err); reason != "" {
				if p.skips(reason) {
					p.log.Error("an entry's schema cannot be had on the remote for good; skipped (on_refused: skip)", zap.Stringer("id", e.ID),
						zap.String("reason", reason), zap.String("schema_version", schemaVersionString(md.SchemaVersion)), zap.Error(err))
					s.skip(e, reason)
					return nextEntry
				}
				s.cancel(&refusedError{pos: pos, reason: reason, schema: bytes.Clone(md.SchemaVersion), err: fmt.Errorf("schema: %w", err)})
				return endSession
			}
			s.cancel(fmt.Errorf("entry %s: schema: %w", e.ID, err))
			return endSession
		}
	}
	patched, err := p.forwardMetadata(e, md.HasTxnID, schema)
	if err != nil {
		s.cancel(fmt.Errorf("entry %s: patch metadata: %w", e.ID, err))
		return endSession
	}
	if p.msgRate.Wait(s.sctx, float64(max(e.NumMessages, 1))) != nil || p.byteRate.Wait(s.sctx, float64(len(e.Payload))) != nil {
		return endSession
	}
	published := time.UnixMilli(int64(md.PublishTime))
	size := int64(len(patched) + len(e.Payload))
	if err := p.budget.acquire(s.sctx, size); err != nil {
		return endSession
	}
	if s.halted.Load() {
		// A send failed or was answered as a duplicate: acks is ending
		// the session. Sending on would put more entries on the
		// remote beyond the cursor's position than the next session's
		// read-back reaches (max_pending_messages + 100 entries back from
		// the remote's end): the window freed by a run of duplicate
		// receipts lets more through, and the read-back then misses the
		// oldest copies and sends them again.
		p.budget.release(size)
		<-s.sctx.Done()
		return endSession
	}
	id, packed := entrySeq(pos, s.seq)
	if !packed && !s.unpacked {
		s.unpacked = true
		p.log.Warn("entry sent under a counted sequence id, not its position's: should an earlier session's copy of it still arrive, the remote stores it twice",
			zap.Stringer("id", e.ID), zap.Uint64("floor", s.seq))
	}
	out := wire.Outgoing{Metadata: patched, Payload: e.Payload, NumMessages: max(e.NumMessages, 1), SequenceID: id, PayloadCRC: e.PayloadCRC}
	s.seq = id + 1
	err = s.dst.Send(s.sctx, out, func(r wire.Receipt, err error) {
		p.budget.release(size)
		if err != nil || isDuplicate(r) {
			s.halted.Store(true) // before the window slot frees (see above)
		}
		s.acks.receipt(e, published, r, err)
	})
	if err != nil {
		p.budget.release(size)
		if reason := refusal(err); reason != "" {
			if p.skips(reason) {
				p.log.Error("remote refused an entry for good; skipped (on_refused: skip)", zap.Stringer("id", e.ID), zap.String("reason", reason), zap.Error(err))
				s.skip(e, reason)
				return nextEntry
			}
			s.cancel(&refusedError{pos: pos, reason: reason, err: err})
			return endSession
		}
		if s.sctx.Err() == nil {
			s.cancel(inDoubt("send", err))
		}
		return endSession
	}
	return nextEntry
}

// awaitReadBack ends a session that sends without the read-back's proof
// (unproven) at the entry at pos, which would need a counted sequence id
// (entrySeq): the remote's deduplication record is at or past its
// position, so the remote may hold its copy. Skipped, it could be lost
// (a newer copy proves nothing of an older entry); sent under its own
// id, it would be answered as a duplicate, which proves nothing either;
// sent under a counted id, it would be stored twice, after later
// entries. So nothing more is sent or acknowledged: the partition waits,
// counted in partitions_awaiting_readback, and each next session reads
// the remote back again until one goes through.
func (s *session) awaitReadBack(pos marker.Position) {
	p := s.p
	if !p.awaitingReadBack {
		p.awaitingReadBack = true
		p.m.PartitionsAwaitingReadBack.WithLabelValues(s.pair...).Inc()
		p.log.Error("cannot read back the remote, and its deduplication record says it may hold this entry already: the partition sends nothing until a read-back goes through (retried with backoff)",
			zap.Stringer("entry", pos), zap.Uint64("floor", s.seq), zap.Error(s.unproven))
	}
	s.cancel(fmt.Errorf("%w: entry %s: %w", errAwaitingReadBack, pos.String(), s.unproven))
}

// readBackWorks ends a wait for a read-back (awaitReadBack): one went
// through, or the partition no longer sends (a standby, stopped).
func (p *Partition) readBackWorks() {
	if !p.awaitingReadBack {
		return
	}
	p.awaitingReadBack = false
	p.m.PartitionsAwaitingReadBack.WithLabelValues(p.local, p.remote).Dec()
	p.log.Info("the partition no longer waits for a read-back of the remote")
}

// skip acknowledges an entry that is not copied (see Partition.skip).
func (s *session) skip(e wire.Entry, reason string) { s.p.skip(s.src, e, reason) }

// closeTarget closes the producer, if one is open, in its own goroutine
// (closeWithin), after draining what it sent when drain is set.
func (s *session) closeTarget(drain bool) {
	if s.dst == nil {
		return
	}
	p := s.p
	d := s.dst
	s.dst = nil
	s.down.disarm()
	s.holding.Store(false)
	p.linkUp.Store(false)
	p.m.Connected.WithLabelValues(s.pair...).Dec()
	p.closing = closeWithin(p.drainTimeout, p.log, func() {
		if drain {
			fctx, fcancel := context.WithTimeout(context.Background(), p.drainTimeout)
			_ = d.Flush(fctx)
			fcancel()
		}
		_ = d.Close()
	})
}

// close ends the session: the producer is closed (drained when the
// partition stops), receipts stop being acknowledged, the cursor closes. It returns whether anything was acknowledged, and why the
// session ended (nil when the partition stops).
func (s *session) close() (bool, error) {
	p := s.p
	s.closeTarget(s.ctx.Err() != nil && errors.Is(context.Cause(s.sctx), context.Cause(s.ctx)))
	s.acks.stop()
	_ = s.src.Close()
	p.tellActive(false)
	if s.ctx.Err() != nil {
		return s.progress.Load(), nil
	}
	cause := context.Cause(s.sctx)
	if errors.Is(cause, errSteppedDown) {
		p.steppedDown = time.Now()
		p.m.Links.StepDowns.WithLabelValues(p.remote).Inc()
		p.log.Warn("remote unreachable from this instance: stepped down (cursor closed, another instance's becomes active); resubscribing once the remote answers",
			zap.String("remote", p.remote), zap.Duration("without_link", s.down.downFor().Round(time.Millisecond)),
			zap.Duration("step_down_after", p.stepDownAfter), zap.NamedError("last_error", s.down.lastError()))
	}
	return s.progress.Load(), cause
}

// isDuplicate reports whether a receipt is the broker's answer for a send
// its deduplication dropped (message id -1:-1).
func isDuplicate(r wire.Receipt) bool {
	return r.MessageID.Ledger == math.MaxUint64 || int64(r.MessageID.Ledger) < 0
}

// acks acknowledges a session's entries in send order as the remote
// confirms them, and hands their permits and bytes back. After the first
// failure (or a duplicate receipt, which is no proof) nothing more is
// acknowledged. It runs on the producer's callbacks (in send order, on
// the connection's goroutine), not on a goroutine of its own: what it
// does only queues commands and never blocks, and a goroutine per
// partition and direction was a third of the sidecar's at 1,000
// partitions with replicated subscriptions (issue 23's goal: at most two).
type acks struct {
	p                       *Partition
	src                     entrySource
	fail                    context.CancelCauseFunc
	progress                *atomic.Bool
	copiedMsgs, copiedBytes prometheus.Counter
	latency                 prometheus.Observer

	// mu orders receipts that could come from two goroutines (a
	// connection's and a reconnect's failing of what was pending) and
	// the session's stop.
	mu      sync.Mutex
	failed  bool
	stopped bool // the session closed: later receipts are not acted on
}

func (p *Partition) newAcks(src entrySource, fail context.CancelCauseFunc, progress *atomic.Bool) *acks {
	return &acks{
		p: p, src: src, fail: fail, progress: progress,
		copiedMsgs:  p.m.Messages.WithLabelValues(p.local, p.remote),
		copiedBytes: p.m.Bytes.WithLabelValues(p.local, p.remote),
		latency:     p.m.Latency.WithLabelValues(p.local, p.remote),
	}
}

// stop ends the acknowledging: a receipt that comes later (the producer
// drains after the session ended) is not acted on; the next session reads
// the remote back from the cursor's position.
func (a *acks) stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
}

// receipt acts on the remote's answer to e, published at the origin at
// published.
func (a *acks) receipt(e wire.Entry, published time.Time, r wire.Receipt, err error) {
	p := a.p
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopped || a.failed:
	case errors.Is(err, wire.ErrInDoubt):
		// The producer lost the remote's deduplication record with this
		// entry and the ones behind it unconfirmed: not acknowledged, and
		// not a failure; the next session reads the remote back.
		a.failed = true
		a.fail(inDoubt("send", err))
	case err != nil:
		a.failed = true
		p.m.SendErrors.WithLabelValues(p.local, p.remote).Inc()
		// The first failure in send order is the entry the broker
		// answered with SEND_ERROR; the wire producer fails the ones
		// behind it with the same error when it gives up.
		reason := refusal(err)
		switch {
		case reason != "" && p.skips(reason):
			p.log.Error("remote refused an entry for good; skipped (on_refused: skip)", zap.Stringer("id", e.ID), zap.String("reason", reason), zap.Error(err))
			p.skip(a.src, e, reason)
			a.progress.Store(true)
			// The producer gave up with the refusal: the next session
			// sends what came after the skipped entry.
			a.fail(errRefusedSkipped)
		case reason != "":
			a.fail(&refusedError{pos: entryPos(e.ID), reason: reason, err: err})
		default:
			a.fail(fmt.Errorf("send: %w", err))
		}
	case isDuplicate(r):
		a.failed = true
		p.m.DupsUnproven.WithLabelValues(p.local, p.remote).Inc()
		a.fail(errUnprovenDuplicate)
	default:
		a.copiedMsgs.Add(float64(max(e.NumMessages, 1)))
		a.copiedBytes.Add(float64(len(e.Payload)))
		a.latency.Observe(time.Since(published).Seconds())
		_ = a.src.Ack(e.ID)
		_ = a.src.Release(e)
		a.progress.Store(true)
	}
}

// closeWithin runs closeProducer in its own goroutine and waits for it at
// most timeout (so that SIGTERM exits in time even when the remote is
// down). It returns a channel closed when closeProducer has returned: the
// next producer of the partition waits for it, because an abandoned
// producer that reconnected later could write old entries after the new
// one's.
func closeWithin(timeout time.Duration, log *zap.Logger, closeProducer func()) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		closeProducer()
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		log.Warn("producer did not close in time; unconfirmed messages will be resent")
	}
	return done
}
