package replicator

// A pair's continuous verifier (sidecar.verify, replicator/verify): one
// goroutine per pair, started and waited for by the pair, verifying the
// partitions the pair runs where this instance's cursor is the active
// one.

import (
	"context"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
)

// runVerifier starts the pair's verifier when sidecar.verify is set and
// returns what stops it: the caller cancels ctx first, then calls it, and
// it waits for the verifier to end.
func (p *pair) runVerifier(ctx context.Context) (wait func()) {
	if p.verify == nil {
		return func() {}
	}
	log := p.log.Named("verify")
	from, err1 := p.local.VerifyClient()
	to, err2 := p.remote.VerifyClient()
	if err1 != nil || err2 != nil {
		log.Error("continuous verifier not started: no client", zap.NamedError("source_error", err1), zap.NamedError("target_error", err2))
		return func() {}
	}
	v := verify.NewContinuous(verify.ContinuousConfig{
		Source: p.local.Name, Target: p.remote.Name,
		From:       verify.WireReader(from, p.cfg.Sidecar.CursorPrefix),
		To:         verify.WireReader(to, p.cfg.Sidecar.CursorPrefix),
		Keys:       p.keys,
		Partitions: p.assignedNow,
		Interval:   p.verify.Interval.Duration,
		Limiter:    p.verifyRate,
		Metrics:    p.m,
		Log:        log,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = v.Run(ctx)
	}()
	return func() { <-done }
}

// noteAssigned publishes the running partitions to the verifier (called
// by the pair's goroutine after each discovery).
func (p *pair) noteAssigned() {
	if p.verify == nil {
		return
	}
	list := make([]verify.Assigned, 0, len(p.running))
	for name, w := range p.running {
		list = append(list, verify.Assigned{Partition: name, Active: &w.active})
	}
	slices.SortFunc(list, func(a, b verify.Assigned) int { return strings.Compare(a.Partition, b.Partition) })
	p.assigned.Store(&list)
}

// assignedNow is the verifier's view of the pair's partitions.
func (p *pair) assignedNow() []verify.Assigned {
	if l := p.assigned.Load(); l != nil {
		return *l
	}
	return nil
}
