// Package replicator is geo-sidecar's embeddable entry point (New, Run)
// and the orchestration of its work: what to replicate, and for how long.
// The work itself is done by the packages below it.
//
// A Sidecar runs one pair per replication entry and target cluster
// (pair.go): it discovers the entry's topics and makes sure each exists on
// the target with the same partitions (topics.go), runs one replicator per
// partition (replicator/entrypath) with, when the entry keeps
// subscriptions in step, its subscription sync (replicator/subsync), and
// starts and stops them as topics come and go, so that one partition
// failing never stops another. stats.go reads the replication state from
// the source clusters for the status command and the backlog gauges. With
// sidecar.verify, each pair also runs a continuous verifier of its copies
// (pairverify.go, replicator/verify).
//
// Below it: replicator/cluster holds the clients of each cluster, their
// credentials and the admin control plane; replicator/metrics the
// Prometheus metrics, built from an injected Registerer; replicator/wire
// the binary protocol. The on-topic contract (markers, the copies' signed
// origins, the producer names) is marker's.
//
// A Sidecar's methods are safe for concurrent use: Status, Ready and
// NotReady may be called while Run runs.
package replicator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/entrypath"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync"
)

// Options are what the embedding program supplies. No globals: two
// sidecars can run in one process (tests do).
type Options struct {
	Log      *zap.Logger
	Registry prometheus.Registerer // nil: metrics are not registered
	// Cluster, when set, limits this process to the replication entries
	// whose source is that cluster: the deployment "beside" one cluster.
	Cluster string
	// StopTimeout bounds Run's stop, from ctx's end to Run's return
	// (stopWithin); 0: DefaultStopTimeout.
	StopTimeout time.Duration
	// Security is told about each cluster's security events (refused
	// credentials, permissions and certificates, tokens read and
	// expired), for metrics kept outside this package.
	Security cluster.SecurityEvents
}

// DefaultStopTimeout is Options.StopTimeout's default: well within the
// Helm chart's 30 s grace period, past which the pod is killed.
const DefaultStopTimeout = 10 * time.Second

// Sidecar runs every replication pair of one config.
type Sidecar struct {
	cfg     *config.Config
	log     *zap.Logger
	m       *metrics.Metrics
	cluster string
	// security is Options.Security, given to each cluster's clients.
	security cluster.SecurityEvents
	// stopTimeout bounds the stop (Options.StopTimeout).
	stopTimeout time.Duration
	keys        marker.Keys // marker keys; zero when none is configured
	applied     subsync.Applied
	// pollers share each topic's stats reading among the syncs of its
	// partitions, and hold each cluster's admin budget.
	pollers *subsync.Pollers
	// history bounds the start-up re-reads of every sync at once.
	history *subsync.HistoryGate
	// instance names this process's subscription moves' consumer.
	instance string
	// budgets bound the bytes the entry pipe holds in flight, a share of
	// the process's budget per target cluster.
	budgets *entrypath.TargetBudgets
	// pools bound what the cursors hold and may be sent, a share of the
	// receive budget per target cluster.
	pools *entrypath.ReceivePools
	// readBacks bound what the read-backs of the remote partitions hold,
	// a share of the read-back budget per target cluster.
	readBacks *entrypath.ReadBackPools
	// verifyRate bounds what the continuous verifiers of every pair read
	// together (sidecar.verify.max_messages_per_second); nil when
	// sidecar.verify is off.
	verifyRate *cluster.Limiter

	ready atomic.Bool
	mu    sync.Mutex
	pairs []*pair
}

// New checks that opts.Cluster names a source of cfg and builds the
// sidecar; nothing connects until Run.
func New(cfg *config.Config, opts Options) (*Sidecar, error) {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Cluster != "" {
		if _, ok := cfg.Cluster(opts.Cluster); !ok {
			return nil, fmt.Errorf("--cluster %q: not a cluster of the config", opts.Cluster)
		}
	}
	key, err := cfg.MarkerKey()
	if err != nil {
		return nil, err
	}
	accepted, err := cfg.MarkerKeyAccepted()
	if err != nil {
		return nil, err
	}
	m := metrics.New(opts.Registry)
	var targets []string
	for _, r := range cfg.Replication {
		if opts.Cluster == "" || r.Source == opts.Cluster {
			targets = append(targets, r.Targets...)
		}
	}
	ar := cfg.Sidecar.AdminRate
	if ar.RequestsPerSecond <= 0 || ar.Burst < 1 { // a config built in code, not validated
		ar = config.AdminRate{RequestsPerSecond: config.DefaultAdminRate, Burst: config.DefaultAdminBurst}
	}
	var verifyRate *cluster.Limiter
	if v := cfg.Sidecar.Verify; v != nil {
		verifyRate = cluster.NewLimiter(v.MaxMessagesPerSecond)
	}
	pollers := subsync.NewPollers(ar.RequestsPerSecond, ar.Burst, func(c string, n int) { m.AdminBudgetWaiting.WithLabelValues(c).Set(float64(n)) })
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	return &Sidecar{cfg: cfg, log: opts.Log, m: m, cluster: opts.Cluster, security: opts.Security, stopTimeout: opts.StopTimeout, keys: marker.NewKeys(key, accepted), instance: uuid.NewString()[:8], pollers: pollers,
		history:   subsync.HistoryGateOf(int64(cfg.Sidecar.ReceiveBudget)),
		budgets:   entrypath.NewTargetBudgets(int64(cfg.Sidecar.SendBudget), targets, m.InflightBytes.Set),
		pools:     entrypath.NewReceivePools(int64(cfg.Sidecar.ReceiveBudget), targets, m),
		readBacks: entrypath.NewReadBackPools(int64(cfg.Sidecar.ReadBackBudget), targets, m), verifyRate: verifyRate}, nil
}

// Metrics returns the sidecar's metrics.
func (s *Sidecar) Metrics() *metrics.Metrics { return s.m }

// Ready reports whether every pair has completed one topic discovery.
func (s *Sidecar) Ready() bool { return s.NotReady() == "" }

// NotReady says why the sidecar is not ready, "" when it is: a pair that
// cannot replicate at all (each named, see pair.checkTarget), or a first
// topic discovery not completed by every pair.
func (s *Sidecar) NotReady() string {
	s.mu.Lock()
	pairs := s.pairs
	s.mu.Unlock()
	var problems []string
	for _, p := range pairs {
		if msg := p.Problem(); msg != "" {
			problems = append(problems, msg)
		}
	}
	switch {
	case len(problems) > 0:
		return strings.Join(problems, "; ")
	case !s.ready.Load():
		return "topic discovery has not completed yet"
	}
	return ""
}

// Check asks the live clusters what every pair needs before it can
// replicate (validate --live): the source namespace's topics can be
// listed, and the target namespace exists and its topics can be listed
// with the pair's credentials (pair.checkTarget). It returns one sentence
// per problem, each naming the pair; nil when every pair can start.
func (s *Sidecar) Check(ctx context.Context) ([]string, error) {
	pairs, conns, err := s.build()
	if err != nil {
		return nil, err
	}
	defer conns.Close()
	var problems []string
	for _, p := range pairs {
		name := fmt.Sprintf("%s->%s %s", p.local.Name, p.remote.Name, p.rep.Namespace)
		if _, _, err := p.local.Control.Topics(ctx, p.rep.Namespace); err != nil {
			problems = append(problems, fmt.Sprintf("%s: cannot list the topics of %s on %s: %v", name, p.rep.Namespace, p.local.Name, err))
		}
		if err := p.checkTarget(ctx); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
	return problems, nil
}

// Run connects to the clusters and replicates until ctx is done, then stops
// under one deadline (Options.StopTimeout, see stopWithin): every
// partition (in-flight sends finish or are abandoned, to be resent by the
// next run), then the connections. It returns nil, or why the stop did
// not end in time.
func (s *Sidecar) Run(ctx context.Context) error {
	pairs, conns, err := s.build()
	if err != nil {
		return err
	}
	if len(pairs) == 0 {
		conns.Close()
		return errors.New("no replication entry has this cluster as its source")
	}

	var wg sync.WaitGroup
	var discovered atomic.Int32
	for _, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(ctx, func() {
				if int(discovered.Add(1)) == len(pairs) {
					s.ready.Store(true)
				}
			})
		}()
	}
	s.log.Info("sidecar started", zap.Int("pairs", len(pairs)))
	<-ctx.Done()
	stopped := time.Now()
	pairsDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(pairsDone)
	}()
	err = stopWithin(s.log, s.stopTimeout, pairsDone, conns)
	s.log.Info("sidecar stopped", zap.Duration("took", time.Since(stopped).Round(time.Millisecond)), zap.Error(err))
	return err
}

// connections are what a stop ends after the pairs.
type connections interface {
	// Exiting makes the closes of cursors and producers stop waiting for
	// the brokers' replies (wire.Client.Exiting).
	Exiting()
	// Close closes the connections.
	Close()
}

// stopWithin ends a run whose context is done, within timeout, in reverse
// order of creation: the pairs (pairsDone is closed when every one has
// ended), then the connections. At once, closes stop waiting for broker
// replies (conns.Exiting): the partitions still drain what their targets
// confirm in time (bounded by the entry path), then close their cursors
// and producers, writing the close and moving on. With 10,000 partitions
// both ways, waiting for each reply (30 s each at most) and no deadline
// over the whole kept the process past its grace period. When the pairs
// have not ended by stopCut of timeout, the connections are closed under
// them: whatever still waits for a broker ends with its connection. That
// acknowledges nothing: what was in flight is sent again by the next run
// (whose read-back, with a marker key, skips what had reached the
// target). The error (nil when
// both ended in time) names what had not ended at the deadline; Run does
// not wait for it longer.
func stopWithin(log *zap.Logger, timeout time.Duration, pairsDone <-chan struct{}, conns connections) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	cut := time.NewTimer(timeout * stopCut / 100)
	defer cut.Stop()
	conns.Exiting()
	select {
	case <-pairsDone:
	case <-cut.C:
		log.Warn("partitions still stopping; closing the connections under them (what is in flight is sent again by the next run)",
			zap.Duration("stop_timeout", timeout))
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conns.Close()
	}()
	for pairsDone != nil || closed != nil {
		select {
		case <-pairsDone:
			pairsDone = nil
		case <-closed:
			closed = nil
		case <-deadline.C:
			var left []string
			if pairsDone != nil {
				left = append(left, "partitions still stopping")
			}
			if closed != nil {
				left = append(left, "connections still closing")
			}
			return fmt.Errorf("stop deadline (%s) passed with %s", timeout, strings.Join(left, " and "))
		}
	}
	return nil
}

// stopCut is the share of the stop's timeout, in percent, after which
// the connections are closed under pairs still stopping: past the entry
// path's own drain bound (4 s of 10), with time left for what waited on
// the connections to end.
const stopCut = 70

// clusterClients are the clients of each cluster a sidecar dialed, by
// cluster name.
type clusterClients map[string]*cluster.Clients

// Exiting tells every cluster's clients that the process exits.
func (cs clusterClients) Exiting() {
	for _, c := range cs {
		c.Exiting()
	}
}

// Close closes every cluster's clients, the clusters at once.
func (cs clusterClients) Close() {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
}

// build dials the clusters the pairs need and builds one pair per
// (replication entry, target); the caller closes the connections.
func (s *Sidecar) build() ([]*pair, clusterClients, error) {
	conns := clusterClients{}
	conn := func(name string) (*cluster.Clients, error) {
		if c, ok := conns[name]; ok {
			return c, nil
		}
		cc, _ := s.cfg.Cluster(name)
		c, err := cluster.Dial(cc, s.log, s.security)
		if err != nil {
			return nil, err
		}
		c.CountAdmin(s.m)
		conns[name] = c
		return c, nil
	}
	var pairs []*pair
	for i, r := range s.cfg.Replication {
		if s.cluster != "" && r.Source != s.cluster {
			continue
		}
		local, err := conn(r.Source)
		if err != nil {
			conns.Close()
			return nil, nil, err
		}
		msgRate, byteRate := cluster.NewLimiter(r.RateLimit.MessagesPerSecond), cluster.NewLimiter(r.RateLimit.BytesPerSecond)
		for _, t := range r.Targets {
			remote, err := conn(t)
			if err != nil {
				conns.Close()
				return nil, nil, err
			}
			rc, _ := s.cfg.Cluster(t)
			pairs = append(pairs, &pair{
				entry: i, rep: r, local: local, remote: remote,
				subscription: s.cfg.Sidecar.CursorName(t),
				maxPending:   rc.MaxPendingMessages,
				interval:     s.cfg.Sidecar.DiscoveryInterval.Duration,
				msgRate:      msgRate, byteRate: byteRate,
				m:           s.m,
				cfg:         s.cfg,
				keys:        s.keys,
				applied:     &s.applied,
				pollers:     s.pollers,
				history:     s.history,
				followName:  subsync.FollowName(followPrefix(s.cfg.Sidecar), s.instance),
				budget:      s.budgets.Of(t),
				pool:        s.pools.Of(t),
				readBack:    s.readBacks.Of(t),
				log:         s.log.Named("replicator").With(zap.String("source", r.Source), zap.String("target", t), zap.String("namespace", r.Namespace)),
				verify:      s.cfg.Sidecar.Verify,
				verifyRate:  s.verifyRate,
				running:     map[string]*worker{},
				quiet:       map[string]time.Time{},
				gauged:      map[string]bool{},
				asked:       map[string]time.Time{},
				news:        map[string]bool{},
				layoutReads: make(chan struct{}, layoutReadsAtOnce),
			})
		}
	}
	s.mu.Lock()
	s.pairs = pairs
	s.mu.Unlock()
	return pairs, conns, nil
}

// Status reads the replication state of every topic of every pair, from the
// source clusters' admin APIs. It works whether or not Run is running (the
// status command calls it on a sidecar that never runs).
func (s *Sidecar) Status(ctx context.Context) ([]PairStatus, error) {
	s.mu.Lock()
	pairs := s.pairs
	s.mu.Unlock()
	if pairs == nil {
		var conns clusterClients
		var err error
		if pairs, conns, err = s.build(); err != nil {
			return nil, err
		}
		defer conns.Close()
	}
	var out []PairStatus
	for _, p := range pairs {
		st, err := p.status(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, st...)
	}
	return out, nil
}
