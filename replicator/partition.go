package replicator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// source is what a partition needs of its cursor (a pulsar.Consumer on one
// local partition). Used from one goroutine for Receive and another for
// AckID, as pulsar.Consumer allows.
type source interface {
	Receive(ctx context.Context) (pulsar.Message, error)
	AckID(pulsar.MessageID) error
	Close()
}

// target is what a partition needs of its producer (a pulsar.Producer on
// the same partition of the remote). Callbacks run in send order.
type target interface {
	SendAsync(ctx context.Context, msg *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error))
	Flush() error
	Close()
}

// endpoints opens a partition's cursor and producer. onActive is told when
// the cursor becomes the active or a standby consumer of its Failover
// subscription (several sidecars beside one cluster share partitions this
// way).
type endpoints interface {
	openSource(ctx context.Context, onActive func(active bool)) (source, error)
	openTarget(ctx context.Context) (target, error)
	// copiedSince returns the origin positions, from from on, of the
	// copies this pair's producer wrote to the remote partition that it
	// could read back (tail.go). It is called with the producer open, so
	// no other writer of the pair can add to them meanwhile. The set is
	// proof even with an error: it holds only what was read.
	copiedSince(ctx context.Context, from marker.Position) (copySet, error)
}

// partition replicates one local topic partition to one remote: the unit of
// work. It owns its cursor and producer; one partition failing never stops
// another.
type partition struct {
	local, remote string
	ends          endpoints
	maxPending    int
	msgRate       *limiter // shared by the pair's partitions; nil = unlimited
	byteRate      *limiter
	m             *Metrics
	log           *zap.Logger

	// skipRefused skips a message the remote refuses for good instead of
	// stopping the partition (on_refused: skip).
	skipRefused bool

	// drainTimeout bounds how long a stopping session waits for in-flight
	// sends, so that SIGTERM exits within 10 s even when the remote is down.
	drainTimeout time.Duration

	// sync keeps subscriptions in step; nil when none are configured.
	sync *subSync
	// linkUp is true while a producer to the remote is open.
	linkUp atomic.Bool
	// received: see entryPartition.received.
	received *atomic.Bool
	// closing is closed when the last producer has finished closing. A new
	// producer waits for it: an abandoned producer that reconnected later
	// could otherwise write old messages after the new one's.
	closing chan struct{}
}

// Run replicates until ctx is done, rebuilding the cursor and producer with
// capped exponential backoff after any failure. It returns nil on a clean
// stop.
func (p *partition) Run(ctx context.Context) error {
	defer runSync(ctx, p.sync, p.linkUp.Load)()
	return runSessions(ctx, p.log, p.m, p.local, p.remote, p.session)
}

// runSync runs s (if not nil) beside a partition's sessions until ctx is
// done; the returned function waits for it to end. Both data paths use it.
func runSync(ctx context.Context, s *subSync, linkUp func() bool) (wait func()) {
	if s == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, linkUp)
	}()
	return func() { <-done }
}

// closeWithin runs closeProducer in its own goroutine and waits for it at
// most timeout (so that SIGTERM exits in time even when the remote is
// down). It returns a channel closed when closeProducer has returned: the
// next producer of the partition waits for it, because an abandoned
// producer that reconnected later could write old messages after the new
// one's. Both data paths close their producers this way.
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

// runSessions runs session after session until ctx is done, with capped
// exponential backoff after a failure (reset by a session that made
// progress), logging an error when it changes. A message the remote
// refuses for good stops it (see refusedError). Both data paths use it.
func runSessions(ctx context.Context, log *zap.Logger, m *Metrics, local, remote string,
	session func(context.Context) (bool, error)) error {
	bo := newBackoff(200*time.Millisecond, 10*time.Second)
	var lastErr string
	for ctx.Err() == nil {
		progress, err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var refused *refusedError
		if errors.As(err, &refused) {
			// Retrying would be refused again; skipping would lose the
			// message. Stop here, say so once, and wait for the operator
			// (on_refused: skip, then a restart).
			log.Error("the remote refuses a message for good: this partition stops here until the operator acts (on_refused: skip skips such messages)",
				zap.String("position", refused.pos.String()), zap.String("reason", refused.reason), zap.Error(refused.err))
			g := m.PartitionsStopped.WithLabelValues(local, remote, refused.reason)
			g.Inc()
			<-ctx.Done()
			g.Dec()
			return nil
		}
		if progress {
			bo.reset()
		}
		if err == nil || errors.Is(err, errStandby) || errors.Is(err, errRedelivered) || errors.Is(err, errSteppedDown) || errors.Is(err, errStartAhead) || errors.Is(err, errEpochChanged) || errors.Is(err, errRefusedSkipped) {
			log.Debug("partition session ended, starting the next", zap.Error(err))
			continue
		}
		if err.Error() != lastErr {
			log.Warn("partition session failed, retrying with backoff", zap.Error(err))
			lastErr = err.Error()
		}
		sleep(ctx, bo.next())
	}
	return nil
}

// errStandby ends a session whose cursor became a standby while it held
// the producer; Run starts the next one at once.
var errStandby = errors.New("cursor became a standby")

// refusedError ends a session at a message the remote can never take
// (over its size limit, or invalid there) when the pair does not skip
// such messages (on_refused: stop, the default).
type refusedError struct {
	pos    marker.Position
	reason string // a refusal's skip reason (see refusal)
	err    error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the remote refuses the message at %s for good (%s): %v", e.pos.String(), e.reason, e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

// refusal classifies a send error: the skip reason of a message the
// remote can never take, or "" for any other error (retried).
//
// The broker's own codes classify the entry path's refusals: NotAllowed
// and IncompatibleSchema answer the same entry the same way however often
// it is sent (before, they ended the session with an ordinary error,
// retried every 10 s for ever, and on_refused had no say). Authentication
// and authorization are not refusals of the entry: a grant or a new token
// lets it through, and the sidecar reports those by name (noteOpen).
func refusal(err error) string {
	var be *wire.BrokerError
	switch {
	case errors.Is(err, pulsar.ErrMessageTooLarge), errors.Is(err, wire.ErrTooLarge):
		return skipRejectedTooBig
	case errors.Is(err, pulsar.ErrInvalidMessage):
		return skipRejectedInvalid
	case errors.As(err, &be) && (be.Code == wire.NotAllowedError || be.Code == wire.MetadataError && strings.HasPrefix(be.Op, "send")):
		// MetadataError on a send: the entry's metadata refused by
		// policy, e.g. "Messages must be encrypted".
		return skipRejectedNotAllowed
	case errors.As(err, &be) && be.Code == wire.IncompatibleSchema:
		return skipRejectedSchema
	}
	return ""
}

// errRedelivered ends a session whose cursor delivered a message again
// (the client reconnected, or the cursor became active again, and the
// broker redelivered what was not acknowledged). Some of those messages
// may be in flight or on the remote already; rather than track which,
// Run starts the next session at once, and its read-back of the remote
// (copiedSince) sorts them out.
var errRedelivered = errors.New("cursor redelivered messages")

// errUnprovenDuplicate ends a session whose remote answered a send as a
// duplicate. The answer means the broker recorded a sequence id at or
// above the message's for this producer name, which a later message can
// have set; so the message is not acknowledged on its word. The next
// session reads the remote back and acknowledges the message only if it
// finds the copy there (copiedSince), and sends it again otherwise.
var errUnprovenDuplicate = errors.New("the remote answered a send as a duplicate; re-reading the remote before going on")

// inflight is one message sent and not yet confirmed.
type inflight struct {
	msg  pulsar.Message
	size int
	id   pulsar.MessageID
	err  error
}

// session runs one cursor + producer lifetime. It returns whether anything
// was replicated, and why it ended (nil when ctx ended it).
//
// Rules it keeps (see shared/notes/protocol.md, data path):
//   - the cursor is acknowledged only after the remote confirmed, in order;
//   - after the first failed send nothing later is acknowledged, and the
//     session ends: the next session resumes from the cursor;
//   - a message is skipped as already copied only when its copy was read
//     back from the remote partition (copiedSince), never because a later
//     copy is there or because the remote answered "duplicate";
//   - sequence ids are the producer's own: pulsar-client-go starts each
//     new producer at the broker's last recorded id for the producer name
//     plus one and counts up, so with deduplication on the remote a new
//     session's messages are never taken for duplicates, whatever their
//     positions at the origin. (Ids derived from the origin position
//     cannot do that: no 63-bit packing fits every ledger, entry and batch
//     index, and a fallback count restarted below the broker's record and
//     dropped every message of a new session past entry 131,071.)
func (p *partition) session(ctx context.Context) (bool, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// A standby must hold no producer, so that the active instance can
	// open its own under the same name: becoming inactive while holding one
	// ends the session, and the next one waits as a plain standby.
	var active, holding atomic.Bool
	active.Store(true)
	src, err := p.ends.openSource(sctx, func(a bool) {
		active.Store(a)
		if !a && holding.Load() {
			cancel(errStandby)
		}
	})
	if err != nil {
		return false, fmt.Errorf("open cursor: %w", err)
	}

	pair := []string{p.local, p.remote}
	results := make(chan *inflight, p.maxPending+1)
	slots := make(chan struct{}, p.maxPending)
	stopAcker := make(chan struct{})
	ackerDone := make(chan struct{})
	var progress atomic.Bool
	go func() {
		defer close(ackerDone)
		p.acker(src, results, slots, stopAcker, cancel, &progress)
	}()

	var dst target
	closeTarget := func(drain bool) {
		if dst == nil {
			return
		}
		d := dst
		dst = nil
		holding.Store(false)
		p.linkUp.Store(false)
		p.m.Connected.WithLabelValues(pair...).Dec()
		p.closing = closeWithin(p.drainTimeout, p.log, func() {
			if drain {
				_ = d.Flush()
			}
			d.Close()
		})
	}

	var copied copySet       // copies read back from the remote when the producer opened
	var last marker.Position // the newest position received in this session
	received := false
	for {
		msg, err := src.Receive(sctx)
		if err != nil {
			if sctx.Err() == nil {
				// The client closed the consumer (for instance after a
				// non-retriable reconnect error).
				cancel(fmt.Errorf("receive: %w", err))
			}
			break
		}
		if p.received != nil && !p.received.Load() {
			p.received.Store(true)
		}
		pos := positionOf(msg.ID())
		if received && pos.Compare(last) <= 0 {
			cancel(errRedelivered)
			break
		}
		last, received = pos, true
		if !active.Load() {
			// A standby holds no producer, so the active instance can open
			// its own under the same name. The broker redelivers what this
			// consumer got to the active one.
			closeTarget(true)
			continue
		}
		reason := decide(msg, p.remote)
		if p.sync != nil {
			if reason == skipMarker {
				if p.sync.marker(sctx, msg) {
					reason = ""
				}
			} else {
				p.sync.data(sctx, msg)
			}
		}
		if reason != "" {
			p.m.Skipped.WithLabelValues(p.local, p.remote, reason).Inc()
			_ = src.AckID(msg.ID())
			continue
		}
		if dst == nil {
			if p.closing != nil {
				select {
				case <-p.closing:
				case <-sctx.Done():
				}
				if sctx.Err() != nil {
					break
				}
			}
			if dst, err = p.ends.openTarget(sctx); err != nil {
				cancel(fmt.Errorf("open producer: %w", err))
				break
			}
			holding.Store(true)
			p.linkUp.Store(true)
			p.m.Connected.WithLabelValues(pair...).Inc()
			if !active.Load() {
				cancel(errStandby)
				break
			}
			if copied, err = p.ends.copiedSince(sctx, positionOf(msg.ID())); err != nil {
				p.log.Warn("cannot read back every copy on the remote; messages it may hold are sent again (duplicates, not loss)", zap.Error(err))
			}
		}
		if copied.has(pos) {
			// Already on the remote: an earlier session's copy, confirmed
			// but not acknowledged before it ended.
			delete(copied, pos)
			p.m.Skipped.WithLabelValues(p.local, p.remote, skipAlreadyCopied).Inc()
			_ = src.AckID(msg.ID())
			continue
		}
		if p.msgRate.wait(sctx, 1) != nil || p.byteRate.wait(sctx, float64(len(msg.Payload()))) != nil {
			break
		}
		pm := copyOf(msg, p.local)
		f := &inflight{msg: msg, size: len(msg.Payload())}
		select {
		case slots <- struct{}{}:
		case <-sctx.Done():
		}
		if sctx.Err() != nil {
			break
		}
		dst.SendAsync(sctx, pm, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			f.id, f.err = id, err
			results <- f
		})
	}

	// Drain in-flight sends only on a clean stop; after a failure the
	// producer may be broken and the next session resends anyway.
	closeTarget(ctx.Err() != nil && errors.Is(context.Cause(sctx), context.Cause(ctx)))
	close(stopAcker)
	<-ackerDone
	src.Close()
	if ctx.Err() != nil {
		return progress.Load(), nil
	}
	return progress.Load(), context.Cause(sctx)
}

// acker acknowledges the cursor in send order as confirmations arrive. After
// the first failure it acknowledges nothing more and ends the session.
func (p *partition) acker(src source, results <-chan *inflight, slots <-chan struct{},
	stop <-chan struct{}, fail context.CancelCauseFunc, progress *atomic.Bool) {
	failed := false
	// The per-message metrics, looked up once: WithLabelValues hashes
	// its labels on every call, three times per copied message.
	copied := p.m.Messages.WithLabelValues(p.local, p.remote)
	bytes := p.m.Bytes.WithLabelValues(p.local, p.remote)
	latency := p.m.Latency.WithLabelValues(p.local, p.remote)
	handle := func(f *inflight) {
		<-slots
		switch {
		case failed:
		case refusal(f.err) != "" && !p.skipRefused:
			// The remote can never take this message: stop the partition
			// (runSessions) rather than lose it.
			failed = true
			fail(&refusedError{pos: positionOf(f.msg.ID()), reason: refusal(f.err), err: f.err})
		case refusal(f.err) != "":
			// on_refused: skip. The operator accepts the loss of this
			// message; count it, log it, move on.
			p.m.Skipped.WithLabelValues(p.local, p.remote, refusal(f.err)).Inc()
			p.log.Error("remote refused a message for good; skipped (on_refused: skip)",
				zap.String("origin_id", positionOf(f.msg.ID()).String()), zap.Error(f.err))
			_ = src.AckID(f.msg.ID())
		case f.err != nil:
			failed = true
			p.m.SendErrors.WithLabelValues(p.local, p.remote).Inc()
			fail(fmt.Errorf("send: %w", f.err))
		case f.id != nil && f.id.LedgerID() < 0:
			// A duplicate receipt: not proof (errUnprovenDuplicate).
			failed = true
			p.m.DupsUnproven.WithLabelValues(p.local, p.remote).Inc()
			fail(errUnprovenDuplicate)
		default:
			copied.Inc()
			bytes.Add(float64(f.size))
			latency.Observe(time.Since(f.msg.PublishTime()).Seconds())
			_ = src.AckID(f.msg.ID())
			progress.Store(true)
		}
	}
	for {
		select {
		case f := <-results:
			handle(f)
		case <-stop:
			for {
				select {
				case f := <-results:
					handle(f)
				default:
					return
				}
			}
		}
	}
}
