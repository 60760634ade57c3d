package subsync

// Positions from the brokers' positions servlet (sidecar.positions:
// servlet; docs/design/subscription-follow.md §12): one Servlet per
// cluster, shared by the syncs of every partition of that cluster in the
// process (Pollers.Servlet), asks each broker of the cluster for the
// positions of every subscription in scope, only what changed since its
// last answer (positions.View), at most every Every. A follow whose
// partition one of them reports takes its positions from the last poll,
// with no admin request (follow.go, servletPositions); one that no broker
// reports (a broker without the plugin, a failed request, a topic not
// loaded, a name not in scope) keeps the admin path.
//
// Which broker owns a partition is learned from the answers themselves:
// the scope includes the pair's own replication cursor, which every
// replicated partition has, so a broker that lists it for a topic has
// that topic loaded and answers for all its subscriptions in scope
// (one missing from its answer does not exist there).
//
// A state is the broker's in-memory cursor (what internalStats reads,
// over the same admin transport and authorization: §12.3), so it is used
// as a position read is, with the same echo rule and confirming read
// (echo.go, confirm.go); the stats-reading heuristics of the admin path
// (resting, kept positions, reached proofs, ourMove) are not used for it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
)

const (
	// brokersRefresh is how often the cluster's broker list is read
	// again (brokers come and go rarely; a topic whose broker is not
	// polled yet keeps the admin path meanwhile).
	brokersRefresh = time.Minute
	// noServletRetry is how long a broker that answered 404 is left to
	// the admin path before it is asked again (a broker restarted with
	// the plugin).
	noServletRetry = 10 * time.Minute
)

// BrokerLister returns the web service URLs ("http://host:port") of a
// cluster's active brokers.
type BrokerLister func(ctx context.Context) ([]string, error)

// ServletConfig is what a Servlet is built from.
type ServletConfig struct {
	Cluster string
	// Client asks one broker; it sends over the cluster's admin
	// transport (its TLS settings and credentials).
	Client  *positions.Client
	Brokers BrokerLister
	// Every is the least pause between two polls of the brokers: follows
	// asking within it share the last one.
	Every   time.Duration
	Log     *zap.Logger
	Metrics *metrics.Metrics // nil: none
}

// Servlet follows the positions of one cluster's subscriptions in scope
// through its brokers' positions servlet. Safe for concurrent use: one
// poll runs at a time, the callers that ask meanwhile wait for it and
// share it.
type Servlet struct {
	ServletConfig

	// turn is held by the poll under way.
	turn chan struct{}

	mu         sync.Mutex
	namespaces map[string]bool
	subs       map[string]bool
	scope      int // grows with namespaces and subs: views are rebuilt
	brokers    []string
	brokersAt  time.Time
	views      map[string]*brokerView
	// wakers are the follows to wake when a poll sees a change on their
	// partition, by topic (Register).
	wakers map[string]map[int]func()
	nextID int
	// at is when the last poll began (its requests were sent after it).
	at     time.Time
	polled bool
	// polledScope is the scope the last poll asked for: a poll of an
	// older one is not reused.
	polledScope int
	// overLimits: the scope went over the servlet's limits (logged once).
	overLimits bool
	// acks are the moves waiting per broker (servletmove.go).
	acks map[string]*ackQueue
	// backlogs is the last backlogs reading, backlogsTurn held by the
	// one under way (servletbacklogs.go).
	backlogs     servletBacklogs
	backlogsTurn chan struct{}
}

// brokerView is one broker's view and what the last poll of it found.
type brokerView struct {
	v     *positions.View
	scope int
	// known mirrors v (which only the poll touches), for lookups while a
	// poll runs.
	known map[positions.Key]positions.State
	// ok: the last poll of this broker succeeded, so known is its state
	// as of that poll.
	ok bool
	// noServletAt is when it answered 404 (zero: it did not).
	noServletAt time.Time
	lastErr     string
}

// NewServlet returns the cluster's servlet follower; nothing is asked
// before a follow asks (Positions).
func NewServlet(c ServletConfig) *Servlet {
	return &Servlet{ServletConfig: c, turn: make(chan struct{}, 1),
		namespaces: map[string]bool{}, subs: map[string]bool{}, views: map[string]*brokerView{},
		wakers: map[string]map[int]func(){}}
}

// Register has wake called (it must not block) whenever a poll, made for
// any follow, sees a subscription of topic change: the partition's
// follow then runs at once instead of at its pace, so a move on a
// partition with no data and no new snapshot (the acknowledgements that
// pass the last snapshot, a rewind) is followed within a poll of the
// busy partitions' follows. The returned func unregisters it.
func (s *Servlet) Register(topic string, wake func()) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	if s.wakers[topic] == nil {
		s.wakers[topic] = map[int]func(){}
	}
	s.wakers[topic][id] = wake
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.wakers[topic], id)
		if len(s.wakers[topic]) == 0 {
			delete(s.wakers, topic)
		}
	}
}

// Watch puts subscriptions named subs on the topics of namespace
// ("tenant/ns") in scope. The next poll asks each broker again in full
// when the scope grew.
func (s *Servlet) Watch(namespace string, subs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	grew := false
	if namespace != "" && !s.namespaces[namespace] {
		s.namespaces[namespace], grew = true, true
	}
	for _, sub := range subs {
		if sub != "" && !s.subs[sub] {
			s.subs[sub], grew = true, true
		}
	}
	if grew {
		s.scope++
	}
}

// Positions returns the states of topic's subscriptions in scope, from a
// poll begun less than maxAge (or Every) ago and not before after, and
// when that poll began; ok is false when no broker polled then reports
// topic (cursor, the pair's own replication cursor on it, not listed):
// the caller reads positions from the admin API. cursor must be in scope
// (Watch). A poll that must begin after `after` waits until Every has
// passed since the last one, so that the brokers are asked at most once
// every Every however many follows ask.
func (s *Servlet) Positions(ctx context.Context, topic, cursor string, maxAge time.Duration, after time.Time) (states map[string]positions.State, at time.Time, ok bool) {
	if s.noServletAnywhere() {
		return nil, time.Time{}, false // no poll to wait for
	}
	if err := s.poll(ctx, maxAge, after); err != nil {
		return nil, time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	broker, ok := s.owner(topic, cursor)
	if !ok {
		return nil, time.Time{}, false
	}
	b := s.views[broker]
	out := map[string]positions.State{}
	for sub := range s.subs {
		if sub == cursor {
			continue
		}
		if st, ok := b.known[positions.Key{Topic: topic, Subscription: sub}]; ok {
			out[sub] = st
		}
	}
	return out, s.at, true
}

// noServletAnywhere reports whether every broker of the last poll
// answered 404 less than noServletRetry ago: a cluster without the
// plugin, whose follows then take the admin path at once instead of
// waiting for polls that cannot help.
func (s *Servlet) noServletAnywhere() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.polled || len(s.views) == 0 {
		return false
	}
	for _, b := range s.views {
		if b.noServletAt.IsZero() || time.Since(b.noServletAt) >= noServletRetry {
			return false
		}
	}
	return true
}

// errNoScope: nothing to ask yet.
var errNoScope = errors.New("no namespace or subscription in scope")

// poll asks every broker, unless a poll began less than maxAge (or
// Every) ago and not before after; callers that come while one runs wait
// for it.
func (s *Servlet) poll(ctx context.Context, maxAge time.Duration, after time.Time) error {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.turn }()
	s.mu.Lock()
	since := time.Since(s.at)
	if s.polled && since < max(maxAge, s.Every) && !s.at.Before(after) && s.polledScope == s.scope {
		s.mu.Unlock()
		return nil
	}
	if s.polled && since < s.Every {
		s.mu.Unlock()
		t := time.NewTimer(s.Every - since)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		s.mu.Lock()
	}
	if len(s.namespaces) == 0 || len(s.subs) == 0 {
		s.mu.Unlock()
		return errNoScope
	}
	if len(s.namespaces) > positions.MaxNamespaces || len(s.subs) > positions.MaxSubscriptions {
		if !s.overLimits {
			s.overLimits = true
			s.Log.Warn("the positions servlet's scope is over its limits: every follow of the cluster reads positions from the admin API",
				zap.String("cluster", s.Cluster), zap.Int("namespaces", len(s.namespaces)), zap.Int("subscriptions", len(s.subs)))
		}
		s.mu.Unlock()
		return fmt.Errorf("positions: scope of %d namespaces and %d subscriptions is over the servlet's limits", len(s.namespaces), len(s.subs))
	}
	scope := s.scope
	namespaces, subs := slices.Sorted(maps.Keys(s.namespaces)), slices.Sorted(maps.Keys(s.subs))
	s.mu.Unlock()

	at := time.Now()
	brokers, err := s.brokerList(ctx, at)
	if err != nil {
		return err
	}
	for _, broker := range brokers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.pollBroker(ctx, broker, at, scope, namespaces, subs)
	}
	s.mu.Lock()
	for broker := range s.views {
		if !slices.Contains(brokers, broker) {
			delete(s.views, broker)
		}
	}
	s.at, s.polled, s.polledScope = at, true, scope
	s.countBrokers()
	s.mu.Unlock()
	return nil
}

// pollBroker asks one broker (the poll's turn is held).
func (s *Servlet) pollBroker(ctx context.Context, broker string, at time.Time, scope int, namespaces, subs []string) {
	s.mu.Lock()
	b := s.views[broker]
	if b == nil {
		b = &brokerView{}
		s.views[broker] = b
	}
	if !b.noServletAt.IsZero() && at.Sub(b.noServletAt) < noServletRetry {
		b.ok = false
		s.mu.Unlock()
		return
	}
	if b.v == nil || b.scope != scope {
		b.v, b.scope, b.known = positions.NewView(namespaces, subs), scope, map[positions.Key]positions.State{}
	}
	v := b.v
	s.mu.Unlock()

	a, err := s.Client.Get(ctx, broker, v.Query())
	var changed []positions.State
	if err == nil {
		changed = v.Apply(a)
	}

	var wake []func()
	defer func() {
		for _, w := range wake {
			w()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		b.ok = false
		msg := err.Error()
		switch {
		case errors.Is(err, positions.ErrNoServlet):
			if b.noServletAt.IsZero() {
				s.Log.Warn("a broker has no positions servlet: the follows of its topics read positions from the admin API",
					zap.String("cluster", s.Cluster), zap.String("broker", broker))
			}
			b.noServletAt = at
		case ctx.Err() != nil:
		case msg != b.lastErr:
			s.Log.Warn("asking a broker's positions servlet failed: the follows of its topics read positions from the admin API meanwhile",
				zap.String("cluster", s.Cluster), zap.String("broker", broker), zap.Error(err))
		}
		b.lastErr = msg
		return
	}
	if b.lastErr != "" {
		s.Log.Info("a broker's positions servlet answers again", zap.String("cluster", s.Cluster), zap.String("broker", broker))
	}
	b.ok, b.lastErr, b.noServletAt = true, "", time.Time{}
	woken := map[string]bool{}
	for _, st := range changed {
		k := positions.Key{Topic: st.Topic, Subscription: st.Subscription}
		if st.Gone {
			delete(b.known, k)
		} else {
			b.known[k] = st
		}
		if !woken[st.Topic] {
			woken[st.Topic] = true
			for _, w := range s.wakers[st.Topic] {
				wake = append(wake, w)
			}
		}
	}
}

// brokerList returns the cluster's brokers, read again every
// brokersRefresh (the last list stands while a read fails).
func (s *Servlet) brokerList(ctx context.Context, now time.Time) ([]string, error) {
	s.mu.Lock()
	list, readAt := s.brokers, s.brokersAt
	s.mu.Unlock()
	if list != nil && now.Sub(readAt) < brokersRefresh {
		return list, nil
	}
	got, err := s.Brokers(ctx)
	if err != nil || len(got) == 0 {
		if err == nil {
			err = errors.New("no active broker listed")
		}
		if list == nil {
			return nil, fmt.Errorf("positions: list the brokers of %s: %w", s.Cluster, err)
		}
		s.Log.Debug("listing the cluster's brokers failed; the last list stands", zap.String("cluster", s.Cluster), zap.Error(err))
		got = list
	}
	s.mu.Lock()
	s.brokers, s.brokersAt = got, now
	s.mu.Unlock()
	return got, nil
}

// countBrokers sets the brokers gauge (mu held).
func (s *Servlet) countBrokers() {
	if s.Metrics == nil || s.Metrics.PositionsBrokers == nil {
		return
	}
	n := 0
	for _, b := range s.views {
		if b.ok {
			n++
		}
	}
	s.Metrics.PositionsBrokers.WithLabelValues(s.Cluster, "servlet").Set(float64(n))
	s.Metrics.PositionsBrokers.WithLabelValues(s.Cluster, "admin").Set(float64(len(s.views) - n))
}

// TopicNamespace is "tenant/ns" of a topic's full name
// ("persistent://tenant/ns/name"); "" when it has none.
func TopicNamespace(topic string) string {
	_, rest, ok := strings.Cut(topic, "://")
	if !ok {
		return ""
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return ""
	}
	return rest[:i]
}
