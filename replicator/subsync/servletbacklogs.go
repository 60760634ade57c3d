package subsync

// Backlogs from the brokers' positions servlet, for the subscription lag
// gauges (backlogs.go): one request per broker of the cluster, shared by
// every partition of it in the process, at most every lagServletAge,
// instead of a stats reading per partition (at 1,000 busy partitions the
// lag's stats readings were 36 of east's 43 admin requests a second in the
// bench, docs/design/subscription-follow.md §12.6).

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
)

// lagServletAge is how old the backlogs behind the lag gauges may be on
// the servlet path.
const lagServletAge = 5 * time.Second

// LagServletAge is lagServletAge for the pair's backlog gauges, which
// share the same readings.
const LagServletAge = lagServletAge

// servletBacklogs is a cluster's last backlogs reading.
type servletBacklogs struct {
	at    time.Time
	scope int
	ok    bool
	// counts are by topic, then subscription: each partition's lag (and
	// each topic's backlog gauges) looks up its own, where a scan of the
	// cluster's every subscription per call grew with the square of the
	// topics.
	counts map[string]map[string]int64
}

// Backlogs returns the backlogs of topic's subscriptions in scope from a
// reading of every broker less than maxAge old; ok is false when the
// reading failed, or when none of the brokers listed every one of subs
// (nil: any) on topic. A subscription a broker does not list there is
// not on that topic (or the topic is not loaded): the caller asks the
// admin API when it needs to tell them apart.
func (s *Servlet) Backlogs(ctx context.Context, topic string, subs []string, maxAge time.Duration) (map[string]int64, bool) {
	if s.noServletAnywhere() {
		return nil, false
	}
	select {
	case s.backlogTurn() <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	defer func() { <-s.backlogTurn() }()
	s.mu.Lock()
	r := s.backlogs
	// A failed reading stands as long as a good one: a broker without
	// the endpoint is not asked again by every partition's lag.
	fresh := !r.at.IsZero() && r.scope == s.scope && time.Since(r.at) < maxAge
	var namespaces, names []string
	scope := s.scope
	if !fresh {
		namespaces, names = slices.Sorted(maps.Keys(s.namespaces)), slices.Sorted(maps.Keys(s.subs))
	}
	s.mu.Unlock()
	if !fresh {
		r = s.readBacklogs(ctx, namespaces, names, scope)
		s.mu.Lock()
		s.backlogs = r
		s.mu.Unlock()
	}
	if !r.ok {
		return nil, false
	}
	out := maps.Clone(r.counts[topic])
	if len(out) == 0 {
		return nil, false // no broker listed the topic
	}
	for _, sub := range subs {
		if _, ok := out[sub]; !ok {
			return nil, false
		}
	}
	return out, true
}

// backlogTurn is the channel that lets one backlogs reading run at a
// time.
func (s *Servlet) backlogTurn() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backlogsTurn == nil {
		s.backlogsTurn = make(chan struct{}, 1)
	}
	return s.backlogsTurn
}

// readBacklogs asks every broker for the backlogs in scope.
func (s *Servlet) readBacklogs(ctx context.Context, namespaces, subs []string, scope int) servletBacklogs {
	r := servletBacklogs{at: time.Now(), scope: scope, counts: map[string]map[string]int64{}}
	if len(namespaces) == 0 || len(subs) == 0 || len(namespaces) > positions.MaxNamespaces || len(subs) > positions.MaxSubscriptions {
		return r
	}
	brokers, err := s.brokerList(ctx, r.at)
	if err != nil {
		return r
	}
	q := positions.Query{Namespaces: namespaces, Subscriptions: subs}
	for _, b := range brokers {
		got, err := s.Client.Backlogs(ctx, b, q)
		if err != nil {
			return r // a broker's topics would look missing: no reading
		}
		for k, n := range got {
			if r.counts[k.Topic] == nil {
				r.counts[k.Topic] = map[string]int64{}
			}
			r.counts[k.Topic][k.Subscription] = n
		}
	}
	r.ok = true
	return r
}
