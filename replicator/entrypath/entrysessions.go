package entrypath

// How a partition's sessions follow one another (Partition.Run): a
// session is one cursor + producer lifetime, and any failure ends it
// rather than being repaired inside it, because the next session starts
// from what is known for sure (the cursor's position and the read-back
// of the remote). This file holds what decides when the next one starts
// and what it may assume: the backoff, the errors that end a session at
// once, the refusals that stop the partition, and the producer's close.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// runSync runs s (if not nil) beside a partition's sessions until ctx is
// done; the returned function waits for it to end. The sync outlives the
// sessions, so that a snapshot in progress survives a reconnect.
func runSync(ctx context.Context, s Sync, linkUp func() bool) (wait func()) {
	if s == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, linkUp)
	}()
	return func() { <-done }
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

// runSessions runs session after session until ctx is done, with capped
// exponential backoff after a failure (reset by a session that made
// progress), logging an error when it changes. A message the remote
// refuses for good, and a target topic that takes nothing more, stop it
// (see refusedError).
func runSessions(ctx context.Context, log *zap.Logger, m *metrics.Metrics, local, remote string,
	session func(context.Context) (bool, error)) error {
	bo := cluster.NewBackoff(200*time.Millisecond, 10*time.Second)
	var lastErr string
	for ctx.Err() == nil {
		progress, err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var refused *refusedError
		if errors.As(err, &refused) {
			stopRefused(ctx, log, m, local, remote, refused)
			return nil
		}
		if progress {
			bo.Reset()
		}
		if err == nil || errors.Is(err, errStandby) || errors.Is(err, errRedelivered) || errors.Is(err, errSteppedDown) || errors.Is(err, errStartAhead) || errors.Is(err, errEpochChanged) || errors.Is(err, errRefusedSkipped) {
			log.Debug("partition session ended, starting the next", zap.Error(err))
			continue
		}
		if err.Error() != lastErr {
			log.Warn("partition session failed, retrying with backoff", zap.Error(err))
			lastErr = err.Error()
		}
		cluster.Sleep(ctx, bo.Next())
	}
	return nil
}

// stopRefused says once that the partition stops at a refusal, and waits
// for ctx: retrying would be refused again, skipping would lose the
// message, so the operator acts (on_refused: skip, then a restart). Apart
// from runSessions to keep a waiting goroutine's stack small (see
// session.next).
//
//go:noinline
func stopRefused(ctx context.Context, log *zap.Logger, m *metrics.Metrics, local, remote string, refused *refusedError) {
	fields := []zap.Field{zap.String("position", refused.pos.String()), zap.String("reason", refused.reason), zap.Error(refused.err)}
	if refused.schema != nil {
		fields = append(fields, zap.String("schema_version", schemaVersionString(refused.schema)))
	}
	switch refused.reason {
	case stopTargetTerminated:
		log.Error("the target topic is terminated and takes no message: this partition stops here until the operator acts and restarts the sidecar (on_refused does not apply: skip would drop every message)", fields...)
	case entryrule.SkipSourceSchemaMissing:
		log.Error("the source no longer serves a message's schema version: this partition stops here until the operator acts (on_refused: skip skips such messages)", fields...)
	default:
		log.Error("the remote refuses a message for good: this partition stops here until the operator acts (on_refused: skip skips such messages)", fields...)
	}
	g := m.PartitionsStopped.WithLabelValues(local, remote, refused.reason)
	g.Inc()
	<-ctx.Done()
	g.Dec()
}

// refusedError ends a session at a message the remote can never take
// (over its size limit, refused by its broker for good, a schema the
// source no longer serves) when the pair does not skip such messages
// (on_refused: stop, the default), or at a target topic that takes no
// message at all (stopTargetTerminated, whatever on_refused says).
type refusedError struct {
	pos    marker.Position
	reason string // a refusal's skip reason, or stopTargetTerminated (see refusal)
	schema []byte // the entry's schema version when the refusal is about it
	err    error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the remote refuses the message at %s for good (%s): %v", e.pos.String(), e.reason, e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

// stopTargetTerminated is the reason a partition stops at a target topic
// that was terminated (TopicTerminatedError, on a send or when the
// producer opens): the broker takes no message on it ever again, so
// on_refused: skip would acknowledge every message of the partition from
// there on, unsent. It is never a skip reason: the partition stops
// whatever on_refused says, its backlog waiting on the cursor, until the
// operator deletes or replaces the target topic and restarts the sidecar.
const stopTargetTerminated = "target-terminated"

// refusal classifies a send error: the skip reason of an entry the
// remote can never take, stopTargetTerminated for a target topic that
// takes none, or "" for any other error (retried).
//
// The broker's own codes classify the refusals: NotAllowed and
// IncompatibleSchema answer the same entry the same way however often it
// is sent, and a terminated topic every entry: retried as an ordinary
// error, they would end a session every 10 s for ever, with on_refused
// having no say. A schema version the source no longer serves
// (errSourceSchemaMissing) is gone for good too. Authentication and
// authorization are not refusals of the entry: a grant or a new token
// lets it through, and the sidecar reports those by name (noteOpen).
func refusal(err error) string {
	var be *wire.BrokerError
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return entryrule.SkipRejectedTooBig
	case errors.Is(err, errSourceSchemaMissing):
		return entryrule.SkipSourceSchemaMissing
	case errors.As(err, &be) && be.Code == wire.TopicTerminatedError:
		return stopTargetTerminated
	case errors.As(err, &be) && (be.Code == wire.NotAllowedError || be.Code == wire.MetadataError && strings.HasPrefix(be.Op, "send")):
		// MetadataError on a send: the entry's metadata refused by
		// policy, e.g. "Messages must be encrypted".
		return entryrule.SkipRejectedNotAllowed
	case errors.As(err, &be) && be.Code == wire.IncompatibleSchema:
		return entryrule.SkipRejectedSchema
	}
	return ""
}

// skips reports whether an entry refused for reason (see refusal) is
// skipped: on_refused: skip, and the reason is the entry's own.
func (p *Partition) skips(reason string) bool {
	return p.skipRefused && reason != stopTargetTerminated
}

// schemaVersionString is a schema version as an operator reads it:
// Pulsar's are 8-byte big-endian numbers, anything else is shown in hex.
func schemaVersionString(v []byte) string {
	if len(v) == 8 {
		return strconv.FormatUint(binary.BigEndian.Uint64(v), 10)
	}
	return hex.EncodeToString(v)
}

// errRedelivered ends a session whose cursor delivered an entry again
// (the client reconnected, or the cursor became active again, and the
// broker redelivered what was not acknowledged). Some of those entries
// may be in flight or on the remote already; rather than track which,
// Run starts the next session at once, and its read-back of the remote
// (copiedSince) sorts them out.
var errRedelivered = errors.New("cursor redelivered messages")

// errUnprovenDuplicate ends a session whose remote answered a send as a
// duplicate. The answer means the broker recorded a sequence id at or
// above the entry's for this producer name, which a later entry can
// have set; so the entry is not acknowledged on its word. The next
// session reads the remote back and acknowledges the entry only if it
// finds the copy there (copiedSince), and sends it again otherwise.
var errUnprovenDuplicate = errors.New("the remote answered a send as a duplicate; re-reading the remote before going on")
