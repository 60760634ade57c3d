package replicator

// A pair's lifecycle: discovery of the entry's topics, one partition
// replicator (and subscription sync) per partition, started and stopped
// as topics come and go; and what the pair reports of its topics: their
// status and the backlog gauges (read through stats.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/entrypath"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync"
	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// pair is one (replication entry, target cluster): it discovers the
// entry's topics and keeps one partition replicator per partition running.
type pair struct {
	entry         int
	rep           config.Replication
	local, remote *cluster.Clients
	subscription  string
	maxPending    int
	interval      time.Duration
	msgRate       *cluster.Limiter
	byteRate      *cluster.Limiter
	m             *metrics.Metrics
	log           *zap.Logger

	running map[string]*worker   // by partition topic name
	refused map[string]string    // topic -> reason, logged once
	checked remoteChecks         // topics found right on the remote
	quiet   map[string]time.Time // topics caught up at their last stats refresh
	gauged  map[string]bool      // topics with backlog series
	asked   map[string]time.Time // when each topic's stats were last asked for
	news    map[string]bool      // topics whose cursors read something since
	// setup holds the partitions listed by the first discovery pass that
	// are still listed: the backlog that existed when replication was set
	// up, which start: latest skips. nil until that pass succeeded.
	setup map[string]bool

	cfg     *config.Config
	keys    marker.Keys
	applied *subsync.Applied
	pollers *subsync.Pollers     // nil: every follow reads positions and backlogs itself
	history *subsync.HistoryGate // the process's bound on start-up re-reads
	budget  *entrypath.ByteBudget
	pool    *entrypath.ReceivePool // the target's share of the receive budget
	// readBack is the target's share of the read-back budget.
	readBack *entrypath.ReadBackPool

	// followName names the consumer of this process's subscription moves;
	// noMoveClient logs once that there is no client for them.
	followName   string
	noMoveClient sync.Once

	// layoutReads bounds the start-up layout reads of the pair's
	// partitions in flight (newSync). They were read one after another
	// on the pair's goroutine: a partition's start waited for every
	// earlier one's admin round trip (at 30 ms, 10,000 partitions wait
	// 5 minutes). Without it (a test's pair), reads are not bounded.
	layoutReads chan struct{}

	// problem is why the pair cannot replicate at all, in a sentence
	// naming the pair and what is missing (see checkTarget); nil when
	// nothing is known to be wrong.
	problem atomic.Pointer[string]

	// verify runs the continuous verifier (pairverify.go) when set;
	// verifyRate is the process's bound on what it reads. assigned is
	// the running partitions as the verifier sees them, replaced
	// whole after each discovery.
	verify     *config.Verify
	verifyRate *cluster.Limiter
	assigned   atomic.Pointer[[]verify.Assigned]
}

// Problem returns why the pair cannot replicate at all, "" when nothing is
// known to be wrong.
func (p *pair) Problem() string {
	if s := p.problem.Load(); s != nil {
		return *s
	}
	return ""
}

// errPairSetup marks a discovery failure that stops the whole pair: the
// target namespace is missing, or the credentials may not use it.
var errPairSetup = errors.New("pair cannot replicate")

// checkTarget asks the remote for the namespace's topics, as the pair's
// topic checks will: a namespace that does not exist there (Pulsar answers
// 404) or credentials that may not administer it (401, 403) stop every
// partition of the pair. Without this check a non-partitioned topic would
// pass discovery (the remote's metadata for it is simply absent until its
// producer creates it), the partition would start, and the first sign of
// trouble would be a producer retrying TopicNotFound once a message came,
// at debug level with readiness at ok.
func (p *pair) checkTarget(ctx context.Context) error {
	_, _, err := p.remote.Control.Topics(ctx, p.rep.Namespace)
	var re rest.Error
	if !errors.As(err, &re) {
		return err
	}
	switch re.Code {
	case 404:
		return fmt.Errorf("%w: namespace %s does not exist on %s (create it there, e.g. pulsar-admin namespaces create %s)",
			errPairSetup, p.rep.Namespace, p.remote.Name, p.rep.Namespace)
	case 401, 403:
		return fmt.Errorf("%w: the credentials for %s may not administer namespace %s there (HTTP %d): the pair creates and checks topics on the target",
			errPairSetup, p.remote.Name, p.rep.Namespace, re.Code)
	}
	return err
}

// worker is a running partition replicator that can be stopped alone.
type worker struct {
	topic  string
	cancel context.CancelFunc
	done   chan struct{}
	// received is set by the replicator on each entry or message read.
	received atomic.Bool
	// active is true while this instance's cursor is the partition's
	// active consumer (entrypath.Config.Active).
	active atomic.Bool
}

func (p *pair) run(ctx context.Context, discoveredOnce func()) {
	defer p.runVerifier(ctx)()
	first := true
	var lastErr string
	var topics []topicInfo
	var discovered, refreshed time.Time
	for {
		// Discovery every discovery_interval (and again soon after a
		// failure); the stats gauges every statsInterval in between, from
		// the last list.
		if time.Since(discovered) >= p.interval || lastErr != "" {
			found, err := p.discover(ctx)
			discovered = time.Now()
			switch {
			case errors.Is(err, errPairSetup) && ctx.Err() == nil:
				if err.Error() != lastErr {
					p.log.Error("pair cannot replicate; checking again every discovery", zap.Error(err))
					lastErr = err.Error()
				}
				msg := fmt.Sprintf("%s->%s %s: %v", p.local.Name, p.remote.Name, p.rep.Namespace, err)
				p.problem.Store(&msg)
				p.m.PairProblems.WithLabelValues(p.local.Name, p.remote.Name).Set(1)
			case err != nil && ctx.Err() == nil:
				if err.Error() != lastErr {
					p.log.Warn("topic discovery failed", zap.Error(err))
					lastErr = err.Error()
				}
			case err == nil:
				if p.problem.Swap(nil) != nil {
					p.log.Info("pair can replicate again")
					p.m.PairProblems.WithLabelValues(p.local.Name, p.remote.Name).Set(0)
				}
				lastErr, topics = "", found
				if first {
					first = false
					discoveredOnce()
				}
			}
		}
		if !first && time.Since(refreshed) >= min(p.interval, statsInterval) {
			p.refreshStats(ctx, topics)
			refreshed = time.Now()
		}
		if !cluster.Sleep(ctx, min(p.interval, statsInterval)) {
			break
		}
	}
	for _, w := range p.running {
		w.cancel()
	}
	for name, w := range p.running {
		<-w.done
		delete(p.running, name)
	}
	p.m.Partitions.WithLabelValues(p.local.Name, p.remote.Name).Set(0)
	p.m.Topics.WithLabelValues(p.local.Name, p.remote.Name).Set(0)
}

// statsInterval is how often backlog and oldest-message age are refreshed
// when the discovery interval is longer.
const statsInterval = 10 * time.Second

// discover lists the entry's topics, makes sure each exists on the remote
// with the same partition count, and starts or stops partition replicators
// to match. It returns the topics it found.
func (p *pair) discover(ctx context.Context) ([]topicInfo, error) {
	topics, err := listTopics(ctx, p.local.Control, p.rep)
	if err != nil {
		return nil, fmt.Errorf("list topics of %s on %s: %w", p.rep.Namespace, p.local.Name, err)
	}
	if err := p.checkTarget(ctx); errors.Is(err, errPairSetup) {
		return nil, err
	}
	p.noteListed(topics)
	want := map[string]string{} // partition topic -> topic
	var refused int
	failed := p.checked.ensureAll(ctx, p.remote.Control, topics)
	for _, t := range topics {
		if err := failed[t.name]; err != nil {
			if p.hasRunning(t) && !errors.Is(err, errPartitionMismatch) {
				// The remote is unreachable, not disagreeing: its running
				// replicators keep their cursors and producers and resume
				// by themselves (stopping them would abandon producers with
				// messages in flight).
				for _, pt := range t.partitionNames() {
					if _, ok := p.running[pt]; ok {
						want[pt] = t.name
					}
				}
				continue
			}
			refused++
			if p.refused == nil {
				p.refused = map[string]string{}
			}
			if p.refused[t.name] != err.Error() {
				p.log.Error("topic not replicated", zap.String("topic", t.name), zap.Error(err))
				p.refused[t.name] = err.Error()
			}
			continue
		}
		delete(p.refused, t.name)
		for _, pt := range t.partitionNames() {
			want[pt] = t.name
		}
	}
	for name, w := range p.running {
		if _, ok := want[name]; !ok {
			p.log.Info("partition gone, stopping its replicator", zap.String("partition", name))
			w.cancel()
			<-w.done
			delete(p.running, name)
		}
	}
	for name, topic := range want {
		if _, ok := p.running[name]; !ok && ctx.Err() == nil {
			p.start(ctx, name, topic)
		}
	}
	p.noteAssigned()
	p.m.Partitions.WithLabelValues(p.local.Name, p.remote.Name).Set(float64(len(p.running)))
	p.m.Topics.WithLabelValues(p.local.Name, p.remote.Name).Set(float64(len(topics) - refused))
	p.m.TopicsRefused.WithLabelValues(p.local.Name, p.remote.Name).Set(float64(refused))
	return topics, nil
}

// noteListed records the partitions of a discovery pass: all of the
// first pass's, and later only which of those are still listed (a topic
// deleted and created again is new).
func (p *pair) noteListed(topics []topicInfo) {
	listed := map[string]bool{}
	for _, t := range topics {
		for _, pt := range t.partitionNames() {
			listed[pt] = true
		}
	}
	if p.setup == nil {
		p.setup = listed
		return
	}
	for pt := range p.setup {
		if !listed[pt] {
			delete(p.setup, pt)
		}
	}
}

// startsLatest reports whether a new replication cursor on partitionTopic
// starts at the newest message. start: latest skips only the backlog that
// existed when replication was set up (the first discovery pass): a topic
// or partition that appears later is copied from its first message, as
// Pulsar's own replicator does. At latest, the cursor would be created up
// to a discovery interval after the topic began to take messages, and
// those messages would never be copied.
func (p *pair) startsLatest(partitionTopic string) bool {
	return p.rep.Start == config.StartLatest && p.setup[partitionTopic]
}

func (p *pair) hasRunning(t topicInfo) bool {
	for _, pt := range t.partitionNames() {
		if _, ok := p.running[pt]; ok {
			return true
		}
	}
	return false
}

func (p *pair) start(ctx context.Context, partitionTopic, topic string) {
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{topic: topic, cancel: cancel, done: make(chan struct{})}
	p.running[partitionTopic] = w
	p.log.Info("replicating partition", zap.String("partition", partitionTopic))
	c := p.entryPartition(partitionTopic)
	c.Received, c.Active = &w.received, &w.active
	tracks, latest := p.tracksSubscriptions(), p.startsLatest(partitionTopic)
	go func() {
		defer close(w.done)
		// The sync is built here, not on the pair's goroutine: its layout
		// read (before the cursor exists, which it tells apart) waits
		// for the broker, and the partitions' reads go on in parallel.
		if tracks {
			if s := p.newSync(wctx, partitionTopic, topic, latest); s != nil {
				s.Active = w.active.Load
				c.Sync = s
			}
		}
		_ = entrypath.New(c).Run(wctx)
	}()
}

// acquireLayoutRead waits for a place among the layout reads in flight;
// false when ctx ended first (the layout is then unknown).
func (p *pair) acquireLayoutRead(ctx context.Context) bool {
	if p.layoutReads == nil {
		return ctx.Err() == nil
	}
	select {
	case p.layoutReads <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *pair) releaseLayoutRead() {
	if p.layoutReads != nil {
		<-p.layoutReads
	}
}

// layoutReadsAtOnce is how many partitions of a pair read their layout at
// start at once: enough to overlap the broker's answers, few enough not
// to flood its admin API when thousands of partitions start together.
const layoutReadsAtOnce = 16

// entryPartition is the configuration of the entry path's replicator of
// one partition.
func (p *pair) entryPartition(partitionTopic string) entrypath.Config {
	start := wire.Earliest
	if p.startsLatest(partitionTopic) {
		start = wire.Latest
	}
	return entrypath.Config{
		Local: p.local, Remote: p.remote, Topic: partitionTopic,
		Subscription: p.subscription, Start: start, MaxPending: p.maxPending,
		Keys: p.keys, ReaderPrefix: p.cfg.Sidecar.CursorPrefix,
		Budget: p.budget, Pool: p.pool, ReadBack: p.readBack, SkipRefused: p.rep.OnRefused == config.OnRefusedSkip,
		MsgRate: p.msgRate, ByteRate: p.byteRate,
		Metrics: p.m, Log: p.log.WithLazy(zap.String("partition", partitionTopic)),
	}
}

// newSync returns the subscription sync of one partition, or nil when the
// entry keeps no subscription in step; latest is whether its cursor starts at the
// latest entry (startsLatest, read on the pair's goroutine). It runs on
// the partition's goroutine, so it reads nothing the pair's discovery
// changes.
func (p *pair) newSync(ctx context.Context, partitionTopic, topic string, latest bool) *subsync.Sync {
	if !p.tracksSubscriptions() {
		return nil
	}
	var layout *cluster.Layout
	if p.acquireLayoutRead(ctx) {
		var err error
		if layout, err = p.local.Control.Layout(ctx, partitionTopic); err != nil {
			layout = nil // unknown: the re-read starts at the oldest entry
		}
		p.releaseLayoutRead()
	}
	s := p.syncFor(partitionTopic, topic, layout, latest)
	s.LayoutNow = func(ctx context.Context) (*cluster.Layout, error) {
		return p.local.Control.Layout(ctx, partitionTopic)
	}
	if p.pollers != nil {
		partitioned := partitionTopic != topic
		local, releaseLocal := p.pollers.Acquire(p.local.Name, subsync.NewStatsSource(p.local.Admin, followPrefix(p.cfg.Sidecar)), topic, partitioned)
		remote, releaseRemote := p.pollers.Acquire(p.remote.Name, subsync.NewStatsSource(p.remote.Admin, followPrefix(p.cfg.Sidecar)), topic, partitioned)
		s.Stats, s.RemoteStats, s.AdminRate = local, remote, p.pollers.AdminRate(p.local.Name)
		s.Release = func() { releaseLocal(); releaseRemote() }
		p.useServlet(s)
	}
	return s
}

// useServlet has s take positions from the local cluster's positions
// servlet (sidecar.positions: servlet), shared by every sync of that
// cluster in the process: the entry's namespace, its named subscriptions
// and the pair's cursor (which tells the broker owning the partition)
// are put in its scope.
func (p *pair) useServlet(s *subsync.Sync) {
	if !p.servletInUse() {
		return
	}
	sv := p.pollers.Servlet(p.local.Name, p.newLocalServlet)
	sv.Watch(p.rep.Namespace, append(slices.Clone(p.rep.Subscriptions), p.subscription)...)
	s.Servlet, s.Cursor, s.ServletNamesKnown = sv, p.subscription, len(p.rep.SubscriptionPatterns) == 0
	if remote := p.remote; remote.Positions() != nil {
		// The remote's, for the lag's remote backlogs alone: its named
		// subscriptions in scope.
		rsv := p.pollers.Servlet(remote.Name, func() *subsync.Servlet {
			return subsync.NewServlet(subsync.ServletConfig{
				Cluster: remote.Name, Client: remote.Positions(), Brokers: remote.Brokers,
				Every: p.cfg.Sidecar.Snapshot.Interval.Duration / 2,
				Log:   p.log.Named("positions"), Metrics: p.m,
			})
		})
		if len(p.rep.Subscriptions) > 0 {
			rsv.Watch(p.rep.Namespace, p.rep.Subscriptions...)
		}
		s.RemoteServlet = rsv
	}
}

// newLocalServlet makes the local cluster's servlet follower, shared by
// every pair of that cluster in the process (Pollers.Servlet makes it
// once). An eighth of an interval between polls: a follow waits for a
// poll begun after its snapshot completed, and usually for one more that
// shows the application's acknowledgement of the snapshot's marker (under
// traffic at 100 topics, two polls were 0.4 s of a 2 s follow at 250 ms);
// a poll is one request per broker, answered with what changed.
func (p *pair) newLocalServlet() *subsync.Servlet {
	return subsync.NewServlet(subsync.ServletConfig{
		Cluster: p.local.Name, Client: p.local.Positions(), Brokers: p.local.Brokers,
		Every: p.cfg.Sidecar.Snapshot.Interval.Duration / 8,
		Log:   p.log.Named("positions"), Metrics: p.m,
	})
}

// followPrefix starts the names of the consumers of subscription moves
// (subsync.FollowName): "<cursor_prefix>.follow-".
func followPrefix(s config.Sidecar) string { return s.OwnCursorPrefix() + "follow-" }

// moveClient is the local cluster's client for subscription moves (the
// protocol route); nil when it cannot be built (then updates take the
// admin route alone, and the log says why once per pair).
func (p *pair) moveClient() subsync.MoveClient {
	if p.local.Config.ServiceURL == "" {
		return nil // a test's cluster without a service
	}
	c, err := p.local.MoveClient()
	if err != nil {
		p.noMoveClient.Do(func() {
			p.log.Warn("no client for subscription moves over the protocol: updates use reset-cursor only, never with consumers attached", zap.Error(err))
		})
		return nil
	}
	return c
}

// syncFor builds the subscription sync of one partition, given the
// partition's layout at start (nil if unknown).
func (p *pair) syncFor(partitionTopic, topic string, layout *cluster.Layout, latest bool) *subsync.Sync {
	var cursors []string
	if layout != nil {
		cursors = layout.Cursors
		if cursors == nil {
			cursors = []string{}
		}
	}
	sc := p.cfg.Sidecar.Snapshot
	// A cursor that does not exist yet and starts at the earliest message
	// reads every message: the watermarks are exact from the start.
	fresh := !latest && cursors != nil && !slices.Contains(cursors, p.subscription)
	localSubs := subsync.NewSubAdmin(p.local.Admin, followPrefix(p.cfg.Sidecar))
	remoteSubs := subsync.NewSubAdmin(p.remote.Admin, followPrefix(p.cfg.Sidecar))
	return subsync.New(subsync.Config{
		Local: p.local.Name, Remote: p.remote.Name, Topic: partitionTopic, Keys: p.keys,
		Interval: sc.Interval.Duration,
		Tracked:  func(sub string) bool { return p.rep.Tracks(p.cfg.Sidecar, sub) },
		Machine: snapshot.New(snapshot.Config{
			Topic: partitionTopic, Local: p.local.Name, Remote: p.remote.Name,
			Interval: sc.Interval.Duration, Timeout: sc.Timeout.Duration, CacheSize: sc.CacheSize,
			ThirdOrigins: p.cfg.ThirdOrigins(p.rep.Namespace, shortName(topic), p.local.Name, p.remote.Name),
			Fresh:        fresh,
			NewID:        uuid.NewString, Now: time.Now,
		}),
		Planner:        subscription.NewPlanner(),
		Writer:         subsync.NewWireMarkerWriter(p.local.WireClient, partitionTopic, marker.MarkerProducerName(p.local.Name, p.remote.Name), p.keys),
		LocalAdmin:     p.local.Control,
		RemoteAdmin:    p.remote.Control,
		SubAdmin:       localSubs,
		SubStates:      localSubs,
		RemoteStates:   remoteSubs,
		RemoteSubs:     remoteSubs,
		Moves:          p.moveClient(),
		FollowName:     p.followName,
		History:        subsync.NewHistory(p.local.WireClient, partitionTopic, p.cfg.Sidecar.CursorPrefix, p.history),
		Metrics:        p.m,
		Log:            p.log.WithLazy(zap.String("partition", partitionTopic)),
		Applied:        p.applied,
		CursorsAtStart: cursors,
		LayoutAtStart:  layout,
		HistoryEntries: sc.HistoryEntries,
	})
}

func (p *pair) status(ctx context.Context) ([]PairStatus, error) {
	topics, err := listTopics(ctx, p.local.Control, p.rep)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []PairStatus
	for _, t := range topics {
		st, err := inspect(ctx, p.local.Admin, t, p.subscription, now)
		if err != nil {
			return out, err
		}
		st.Source, st.Target = p.local.Name, p.remote.Name
		if len(p.rep.Subscriptions) > 0 || len(p.rep.SubscriptionPatterns) > 0 {
			st.Subscriptions = p.subStatus(ctx, t)
		}
		out = append(out, st)
	}
	return out, nil
}

// subStatus compares the tracked subscriptions' backlogs on both sides.
func (p *pair) subStatus(ctx context.Context, t topicInfo) []SubStatus {
	local, err1 := subBacklogs(ctx, p.local.Admin, t)
	remote, err2 := subBacklogs(ctx, p.remote.Admin, t)
	if err1 != nil || err2 != nil {
		return nil
	}
	var out []SubStatus
	for name, lb := range local {
		if !p.rep.Tracks(p.cfg.Sidecar, name) {
			continue
		}
		rb, ok := remote[name]
		if !ok {
			rb = -1
		}
		out = append(out, SubStatus{Name: name, SourceBacklog: lb, TargetBacklog: rb, Lag: subscription.Lag(lb, max(rb, 0))})
	}
	slices.SortFunc(out, func(a, b SubStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// refreshStats sets the backlog and oldest-age gauges of topics, the
// entry's topics as discovery just listed them, asking the source's admin
// API for at most statsPerRound topics a round, most needed first:
//
//  1. topics never asked about (no series yet);
//  2. topics with news (a cursor read something since they were last
//     asked) or not caught up at their last refresh (a backlog, or a
//     cursor without its consumer), least recently asked first;
//  3. caught-up topics last asked quietRefresh ago or more, at most
//     quietPerRound of them.
//
// A backlog can only grow on a caught-up topic by new messages, which its
// cursors read (news), unless a cursor lost its consumer meanwhile
// (connected_partitions shows that at once). Asking every topic on a
// fixed period, or every topic with news in one round, was most of the
// CPU of an idle sidecar with many topics (docs/benchmark.md, History).
// With more due topics than the budget, a topic's gauges are
// refreshed every len/statsPerRound rounds.
func (p *pair) refreshStats(ctx context.Context, topics []topicInfo) {
	now := time.Now()
	// A topic gone from the namespace (deleted, or no longer matching)
	// takes its series with it.
	listed := make(map[string]bool, len(topics))
	for _, t := range topics {
		listed[t.name] = true
	}
	for name := range p.gauged {
		if !listed[name] {
			labels := []string{p.local.Name, p.remote.Name, metrics.TopicLabel(name)}
			p.m.Backlog.DeleteLabelValues(labels...)
			p.m.OldestAge.DeleteLabelValues(labels...)
			delete(p.gauged, name)
			delete(p.quiet, name)
		}
	}
	for name := range p.asked {
		if !listed[name] {
			delete(p.asked, name)
			delete(p.news, name)
		}
	}
	type due struct {
		t     topicInfo
		rank  int
		asked time.Time
	}
	var dues []due
	for _, t := range topics {
		if p.received(t) {
			p.news[t.name] = true
		}
		at, quiet := p.quiet[t.name]
		d := due{t: t, asked: p.asked[t.name]}
		switch {
		case !p.gauged[t.name]:
			d.rank = 0
		case p.news[t.name] || !quiet:
			d.rank = 1
		case now.Sub(at) >= quietRefresh:
			d.rank = 2
		default:
			continue
		}
		dues = append(dues, d)
	}
	slices.SortStableFunc(dues, func(a, b due) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.asked.Compare(b.asked)
	})
	// Where partitions keep subscriptions in step, a topic's stats request
	// (with precise backlogs) is their syncs' stats reading too: a resting
	// sync asks none of its own.
	syncs := p.pollers != nil && p.tracksSubscriptions()
	quietAsked := 0
	for i, d := range dues {
		if i >= statsPerRound || ctx.Err() != nil {
			break
		}
		if d.rank == 2 {
			if quietAsked >= quietPerRound {
				break
			}
			quietAsked++
		}
		t := d.t
		delete(p.news, t.name)
		p.asked[t.name] = now
		if p.caughtUpByServlet(ctx, t) {
			// Nothing to copy: no backlog, no oldest message, and the
			// syncs take positions from the servlet, not this reading.
			p.setBacklogGauges(t, 0, 0)
			continue
		}
		sent := time.Now()
		st, subs, err := inspectSubs(ctx, p.local.Admin, t, p.subscription, now, syncs)
		if err == nil && syncs {
			p.pollers.Offer(p.local.Name, t.name, subsync.ReadingOf(sent, subs, followPrefix(p.cfg.Sidecar)))
		}
		if err != nil {
			p.log.Debug("stats refresh failed", zap.String("topic", t.name), zap.Error(err))
			delete(p.quiet, t.name)
			continue
		}
		p.setBacklogGauges(t, st.Backlog, st.OldestAge)
		if st.Backlog == 0 && st.Connected == max(t.partitions, 1) {
			p.quiet[t.name] = now
		} else {
			delete(p.quiet, t.name)
		}
	}
}

// setBacklogGauges sets t's backlog and oldest-age gauges.
func (p *pair) setBacklogGauges(t topicInfo, backlog int64, oldest time.Duration) {
	labels := []string{p.local.Name, p.remote.Name, metrics.TopicLabel(t.name)}
	p.gauged[t.name] = true
	p.m.Backlog.WithLabelValues(labels...).Set(float64(backlog))
	p.m.OldestAge.WithLabelValues(labels...).Set(oldest.Seconds())
}

// servletInUse reports whether the local cluster's positions come from
// its brokers' positions servlet (sidecar.positions: servlet, and a
// cluster whose clients can reach it).
func (p *pair) servletInUse() bool {
	return p.cfg.Sidecar.Positions == config.PositionsServlet && p.local.Positions() != nil
}

// caughtUpByServlet reports whether the local brokers' positions servlet
// (sidecar.positions: servlet, with subscriptions kept in step: it is
// then polled anyway) shows the pair's cursor on every partition of t
// with no backlog, in a reading shared by the cluster's partitions (one
// request per broker every few seconds). A busy topic's stats request
// served only the backlog gauges while the copy kept up: under traffic
// on 300 topics, 10–13 admin requests a second per cluster, most of the
// admin cost per message with the servlet (e2e/bench, subs row). False
// when the servlet is not in use or does not report a partition: the
// stats request then reads it.
func (p *pair) caughtUpByServlet(ctx context.Context, t topicInfo) bool {
	if p.pollers == nil || !p.tracksSubscriptions() || !p.servletInUse() {
		return false
	}
	sv := p.pollers.Servlet(p.local.Name, p.newLocalServlet)
	sv.Watch(p.rep.Namespace, p.subscription) // the syncs put it there too
	for _, pt := range t.partitionNames() {
		b, ok := sv.Backlogs(ctx, pt, []string{p.subscription}, subsync.LagServletAge)
		if !ok || b[p.subscription] != 0 {
			return false
		}
	}
	return true
}

// quietRefresh is how often the stats of a caught-up topic whose cursors
// read nothing are asked for (at the most: see quietPerRound): what
// bounds how long a backlog the cursors are not told of goes unseen, and
// with subscriptions kept in step, how often a resting sync's rest is
// confirmed (subsync.Sync.resting). At 1,000 quiet topics, one request
// every 1.8 s per cluster.
const quietRefresh = 30 * time.Minute

// tracksSubscriptions reports whether the pair keeps subscriptions in
// step (newSync makes syncs).
func (p *pair) tracksSubscriptions() bool {
	return !p.keys.IsZero() && (len(p.rep.Subscriptions) > 0 || len(p.rep.SubscriptionPatterns) > 0)
}

// statsPerRound bounds the stats requests of one refresh round (every
// statsInterval): 10 a second. quietPerRound bounds, within it, those for
// caught-up topics with no news: with 10,000 idle topics, 2 a second
// (each asked about every 83 minutes instead of every 10).
const (
	statsPerRound = 100
	quietPerRound = 20
)

// received reports whether a cursor of t read anything since the last
// call, and clears that.
func (p *pair) received(t topicInfo) bool {
	got := false
	for _, pt := range t.partitionNames() {
		if w, ok := p.running[pt]; ok && w.received.Swap(false) {
			got = true
		}
	}
	return got
}
