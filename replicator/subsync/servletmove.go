package subsync

// Moves through the brokers' positions servlet (the servlet route,
// subscription.RouteServlet): an update is applied as Pulsar's own
// replicated subscriptions apply one, a cumulative acknowledgement inside
// the broker (deploy/positions, Acknowledger.java), for any type, with
// consumers attached or not. The moves of every partition of the cluster
// that wait at the same time go to each broker in one request: a move
// that finds no request under way to its broker sends at once, and the
// moves that come while it runs go together in the next. Under a load of
// 1,000 topics that is a request per broker every few milliseconds, not
// one admin request (or three) per update.
//
// The broker is the one the last poll found owning the partition (it
// lists the pair's cursor there: servlet.go). Where none is known, where
// the broker has no acknowledge endpoint, or where it answers that the
// topic or the subscription is not there, the move is left to the other
// routes (subscription.ErrUnavailable).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// ackTimeout bounds one request of moves; the moves it carried fail with
// it (and are retried by the next update).
const ackTimeout = 10 * time.Second

// ackSpacing is the least time between two requests of moves to one
// broker: a move that finds none under way goes at once, the ones that
// come within ackSpacing of the last request wait for the next. At 1,000
// busy topics sending as soon as the last answer came made 7 requests a
// second carrying 23 moves each (bench, subs row); a quarter of a second
// bounds that to 4, for at most that much more latency per update.
const ackSpacing = 250 * time.Millisecond

// ackWait is one move waiting for its broker's answer.
type ackWait struct {
	ack  positions.Ack
	done chan ackDone
}

type ackDone struct {
	res positions.AckResult
	err error
}

// ackQueue is one broker's moves not sent yet, and whether a sender runs.
type ackQueue struct {
	waiting []ackWait
	sending bool
	// noEndpointAt is when the broker answered that it has no acknowledge
	// endpoint (an older NAR): its moves take the other routes until
	// noServletRetry has passed.
	noEndpointAt time.Time
}

// owner returns the broker whose last answer listed cursor on topic (mu
// held).
func (s *Servlet) owner(topic, cursor string) (string, bool) {
	for broker, b := range s.views {
		if !b.ok || b.scope != s.scope {
			continue
		}
		if _, ok := b.known[positions.Key{Topic: topic, Subscription: cursor}]; ok {
			return broker, true
		}
	}
	return "", false
}

// CanMove reports whether a move of topic's subscriptions can go to the
// servlet now: a broker owning topic is known (cursor listed) and has not
// refused the endpoint lately.
func (s *Servlet) CanMove(topic, cursor string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	broker, ok := s.owner(topic, cursor)
	if !ok {
		return false
	}
	q := s.acks[broker]
	return q == nil || q.noEndpointAt.IsZero() || time.Since(q.noEndpointAt) >= noServletRetry
}

// acknowledge moves sub on topic to at (everything up to and including it
// acknowledged) through the broker that owns topic, batched with the
// other moves to that broker.
func (s *Servlet) acknowledge(ctx context.Context, topic, cursor, sub string, at marker.Position) (positions.AckResult, error) {
	w := ackWait{ack: positions.Ack{Topic: topic, Subscription: sub, At: at}, done: make(chan ackDone, 1)}
	s.mu.Lock()
	broker, ok := s.owner(topic, cursor)
	if !ok {
		s.mu.Unlock()
		return positions.AckResult{}, fmt.Errorf("no broker known to own %s: %w", topic, subscription.ErrUnavailable)
	}
	if s.acks == nil {
		s.acks = map[string]*ackQueue{}
	}
	q := s.acks[broker]
	if q == nil {
		q = &ackQueue{}
		s.acks[broker] = q
	}
	if !q.noEndpointAt.IsZero() && time.Since(q.noEndpointAt) < noServletRetry {
		s.mu.Unlock()
		return positions.AckResult{}, fmt.Errorf("broker %s has no acknowledge endpoint: %w", broker, subscription.ErrUnavailable)
	}
	q.waiting = append(q.waiting, w)
	start := !q.sending
	q.sending = true
	s.mu.Unlock()
	if start {
		go s.sendAcks(broker, q)
	}
	select {
	case d := <-w.done:
		return d.res, d.err
	case <-ctx.Done():
		// The move may still land; the caller counts it failed, and its
		// outcome unknown (the echo fence's endUnsure).
		return positions.AckResult{}, ctx.Err()
	}
}

// sendAcks sends q's waiting moves to broker, at most MaxAcks a request
// and one move per subscription a request, until none waits.
func (s *Servlet) sendAcks(broker string, q *ackQueue) {
	var last time.Time
	for {
		if !last.IsZero() {
			time.Sleep(time.Until(last.Add(ackSpacing)))
		}
		s.mu.Lock()
		batch, rest := takeAcks(q.waiting)
		q.waiting = rest
		if len(batch) == 0 {
			q.sending = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()

		acks := make([]positions.Ack, len(batch))
		for i, w := range batch {
			acks[i] = w.ack
		}
		last = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		res, err := s.Client.Acknowledge(ctx, broker, acks)
		cancel()
		if s.Metrics != nil && s.Metrics.PositionsAckRequests != nil {
			outcome := "ok"
			if err != nil {
				outcome = "error"
			}
			s.Metrics.PositionsAckRequests.WithLabelValues(s.Cluster, outcome).Inc()
		}
		if errors.Is(err, positions.ErrNoServlet) {
			s.mu.Lock()
			if q.noEndpointAt.IsZero() {
				s.Log.Warn("a broker's positions servlet has no acknowledge endpoint (an older NAR): updates there take the protocol or admin route",
					zap.String("cluster", s.Cluster), zap.String("broker", broker))
			}
			q.noEndpointAt = time.Now()
			s.mu.Unlock()
			err = fmt.Errorf("%w: %w", err, subscription.ErrUnavailable)
		}
		for i, w := range batch {
			if err != nil {
				w.done <- ackDone{err: err}
				continue
			}
			w.done <- ackDone{res: res[i]}
		}
	}
}

// takeAcks splits waiting into the next request (at most MaxAcks, a
// subscription once) and the rest, in order.
func takeAcks(waiting []ackWait) (batch, rest []ackWait) {
	seen := map[positions.Key]bool{}
	for _, w := range waiting {
		k := positions.Key{Topic: w.ack.Topic, Subscription: w.ack.Subscription}
		if len(batch) >= positions.MaxAcks || seen[k] {
			rest = append(rest, w)
			continue
		}
		seen[k] = true
		batch = append(batch, w)
	}
	return batch, rest
}

// servletMover is the servlet route's subscription.Mover for one
// partition: cursor is the pair's own cursor there, which tells the
// broker owning it.
type servletMover struct {
	s      *Servlet
	cursor string
}

// Move acknowledges d.At; see subscription.Movers.Servlet for what its
// answers mean.
func (m servletMover) Move(ctx context.Context, topic, sub string, d subscription.Decision) (subscription.Moved, error) {
	r, err := m.s.acknowledge(ctx, topic, m.cursor, sub, d.At)
	if err != nil {
		return subscription.Moved{}, err
	}
	switch r.Outcome {
	case positions.Moved:
		return subscription.Moved{After: r.MarkDelete}, nil
	case positions.NotForward:
		return subscription.Moved{Before: r.MarkDelete, After: r.MarkDelete, HasBefore: true}, nil
	case positions.NoSubscription, positions.NotHere:
		return subscription.Moved{}, fmt.Errorf("the servlet answered %s: %w", r.Outcome, subscription.ErrUnavailable)
	}
	if r.HasMarkDelete {
		return subscription.Moved{}, fmt.Errorf("the servlet answered %s (mark-delete position %s)", r.Outcome, r.MarkDelete)
	}
	return subscription.Moved{}, fmt.Errorf("the servlet answered %s", r.Outcome)
}
