package entrypath

// How a partition's sessions follow one another (Partition.Run): a
// session is one cursor + producer lifetime, and any failure ends it
// rather than being repaired inside it, because the next session starts
// from what is known for sure (the cursor's position and the read-back
// of the remote). This file runs them: the sync beside them, the
// backoff, and the stop at a refusal; sessionend.go says which errors
// start the next session at once and which refusals stop the partition.

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
)

// runSync runs s (if not nil) beside a partition's sessions until ctx is
// done; the returned function waits for it to end. The sync outlives the
// sessions, so that a snapshot in progress survives a reconnect.
func runSync(ctx context.Context, s SyncFeed, linkUp func() bool) (wait func()) {
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

// runSessions runs session after session until ctx is done, with capped
// exponential backoff after a failure (reset by a session that made
// progress), logging an error when it changes; a session that ended for
// a cause that is no failure (restartsAtOnce) is followed at once. A
// message the remote refuses for good, and a target topic that takes
// nothing more, stop it (see refusedError).
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
		if restartsAtOnce(err) {
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

// Run replicates until ctx is done; see runSessions.
func (p *Partition) Run(ctx context.Context) error {
	defer runSync(ctx, p.sync, p.linkUp.Load)()
	defer p.readBackWorks()
	return runSessions(ctx, p.log, p.m, p.local, p.remote, p.session)
}
