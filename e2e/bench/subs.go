package main

// The scale row with replicated subscriptions (issue 11): one sidecar
// replicating many partitions east<->west, each with one tracked
// subscription, measured idle, under spread traffic and idle again. What it
// is for is the admin load: the sidecar's sync, stats and discovery must
// cost admin calls in proportion to activity, not to the partition count.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
	"github.com/geo-sidecar/geo-sidecar/marker"
)

// subsSizes are the knobs of the scale row with subscriptions.
type subsSizes struct {
	Topics int // non-partitioned topics, each on both clusters
	// Settle is the pause after start-up before the idle window: the
	// first follows after the start-up snapshots are over.
	Settle time.Duration
	// Idle is each idle window. An idle partition is followed every
	// 5 minutes (replicator idleFollow), so a shorter window than that
	// misses or over-counts those calls.
	Idle time.Duration
	// IdleAfter is the idle window after the traffic (0: Idle).
	IdleAfter time.Duration
	Rate      int           // messages per second of spread traffic, half on each cluster
	Warm      time.Duration // traffic before its window is measured
	Traffic   time.Duration // the measured traffic window
	Probes    int           // follow-latency probes per phase
	// ProbeParallel probes run at once (each polls west's admin API).
	ProbeParallel int
	// Growth are larger topic counts measured after the row, start-up
	// and idle only (no traffic, no probes), each idle for GrowthIdle:
	// how start-up, memory, goroutines and idle admin requests grow from
	// Topics upward (issue 23 asks for 10,000).
	Growth     []int
	GrowthIdle time.Duration
	// AdminRate, when more than 0, is the sidecar's
	// sidecar.admin_rate.requests_per_second (else its default): what
	// the follow latency under traffic gets for more admin requests.
	AdminRate float64
	// Positions, when set, is the sidecar's sidecar.positions (admin or
	// servlet; else its default, admin).
	Positions string
	// Builtin runs the row's built-in arm beside the sidecar's (issue
	// 36, subsbuiltin.go): as many topics again in a namespace that
	// Pulsar's own geo-replication copies east<->west with replicated
	// subscriptions, with an application, spread traffic and probes of
	// its own, at the same time. Not in the growth runs.
	Builtin bool
}

// Where the row works. A tenant of its own, not the run's, so that a run
// with -keep leaves topics (and their subscriptions) that the next run
// reuses instead of creating 2,000 topics again; a namespace per topic
// count, so that a small run (the smoke test) never picks up a big run's
// topics through its pattern.
const (
	subsTenant = "geobench-subs"
	subsSub    = "app" // the application's subscription, tracked by the sidecar
)

func subsNamespace(topics int) string { return fmt.Sprintf("%s/n%d", subsTenant, topics) }

func (e *env) subsNS() string { return subsNamespace(e.subsTopics) }

func (e *env) subsTopic(i int) string { return fmt.Sprintf("persistent://%s/t-%04d", e.subsNS(), i) }

// subsPhase is one measured window.
type subsPhase struct {
	Name string
	// Window is the time between the reads of the sidecar's counters,
	// its CPU and the proxies' counts; BrokerWindow between the reads of
	// the brokers' counters (around it).
	Window, BrokerWindow time.Duration
	// Admin is the sidecar's own count (admin_requests_total) per cluster.
	Admin map[string]float64
	// Broker is the brokers' jetty_requests_total per cluster: every HTTP
	// request the broker served, the bench's own included.
	Broker map[string]float64
	// Paths counts the sidecar's admin requests by cluster and request
	// shape (method, path with tenant, namespace and topic elided, query).
	Paths      map[string]map[string]int64
	CPU        time.Duration
	RSS        int64
	Goroutines int
	Sent       int // messages published in the window on the sidecar's topics
	// SentBuiltin is what was published in the window on the built-in
	// arm's topics (subsSizes.Builtin).
	SentBuiltin int
}

func (p subsPhase) perSec(n float64) float64 { return n / p.Window.Seconds() }

func (p subsPhase) brokerPerSec(n float64) float64 { return n / p.BrokerWindow.Seconds() }

func (p subsPhase) cpuPct() float64 { return 100 * p.CPU.Seconds() / p.Window.Seconds() }

// probeSet is the follow latency of one phase: from the east consumer's
// acknowledgement of a message to west's subscription having passed the
// copy of it (its mark-delete position there, polled every probePoll).
type probeSet struct {
	Phase  string
	Lat    []time.Duration // sorted
	Failed int
}

const probePoll = 200 * time.Millisecond

// quantile is the q-quantile of every probe, a failed one counting as
// longer than any: "> probeTimeout" when it falls among those.
func (p probeSet) quantile(q float64) string {
	n := len(p.Lat) + p.Failed
	if n == 0 {
		return "—"
	}
	i := max(int(q*float64(n)+0.5)-1, 0) // nearest rank, as quantile
	if i >= len(p.Lat) {
		return "> " + probeTimeout.String()
	}
	return fmt.Sprintf("%.1f s", p.Lat[i].Seconds())
}

// probeTimeout bounds one probe; one that takes longer counts as failed
// (the report gives the count): under heavy admin load a follow can lag by
// minutes, and the probes must not hold the run up that long.
const probeTimeout = time.Minute

type subsResult struct {
	Topics int
	// StartOnly: a growth run (subsSizes.Growth), start-up and one idle
	// window only.
	StartOnly bool
	// AdminRate is the sidecar's admin budget when the run set one
	// (-subs-admin-rate), else 0 (the default).
	AdminRate float64
	// Positions is the sidecar's sidecar.positions when the run set one
	// (-subs-positions).
	Positions string
	Reused    int           // topics found on both clusters from an earlier run
	Setup     time.Duration // topics and subscriptions created
	Ready     time.Duration // process start to /readyz
	Connected time.Duration // process start until every partition of both pairs is connected
	// FirstSnap is process start until east->west completed or timed
	// out as many snapshots as there are partitions (each partition held
	// one new message at start); SnapDone and SnapTimedOut say which.
	FirstSnap              time.Duration
	SnapDone, SnapTimedOut int
	Replicated             time.Duration // process start until those messages were confirmed on west
	Phases                 []subsPhase
	Probes                 []probeSet
	HWM                    int64
	Threads                int
	// Stop is SIGTERM to exit; StopKilled says the bench killed the
	// process instead (stopWait).
	Stop       time.Duration
	StopKilled bool
	// Builtin is the built-in arm, measured at the same time (nil when
	// it did not run: subsSizes.Builtin off, or a growth run).
	Builtin *subsBuiltinResult
}

// subsArm is one replicator's topics in the subs row, the sidecar's or
// the built-in's, with the application on east and the producers.
type subsArm struct {
	name   string // armSidecar or armBuiltin
	topics []string
	app    *subsApp
	prods  map[string][]pulsar.Producer // by cluster, one per topic
	sent   atomic.Int64                 // spread traffic published
}

// subs runs the row over n topics (start-up and one idle window only
// when startOnly); a broker restart meanwhile voids it (measured again).
func (e *env) subs(n int, startOnly bool) (*subsResult, error) {
	e.subsTopics = n
	var res *subsResult
	err := e.attempt(fmt.Sprintf("scale with subscriptions, %d topics", n), func() error {
		var err error
		if res, err = e.subsOnce(n, startOnly); err == nil && e.restarted() {
			err = errRestarted
		}
		return err
	})
	if !e.o.Keep {
		e.dropSubs()
	} else if res != nil && res.Builtin != nil {
		e.logf("subs: keeping %s and %s for the next run (-keep)", e.subsNS(), subsBuiltinNamespace(n))
	} else {
		e.logf("subs: keeping %s for the next run (-keep)", e.subsNS())
	}
	return res, err
}

func (e *env) subsOnce(n int, startOnly bool) (*subsResult, error) {
	z := e.o.Sizes.Subs
	res := &subsResult{Topics: n, StartOnly: startOnly, AdminRate: e.o.Sizes.Subs.AdminRate, Positions: e.o.Sizes.Subs.Positions}
	t0 := time.Now()
	reused, err := e.subsSetup(n)
	if err != nil {
		return nil, err
	}
	res.Reused, res.Setup = reused, time.Since(t0)
	e.logf("subs: %d topics with subscription %q on east and west (%d reused) in %s", n, subsSub, reused, res.Setup.Round(time.Second))

	arms := []*subsArm{{name: armSidecar, topics: make([]string, n), app: newSubsApp(), prods: map[string][]pulsar.Producer{}}}
	for i := range n {
		arms[0].topics[i] = e.subsTopic(i)
	}
	// The built-in arm runs in the growth runs too (start-up only): the
	// start-up goal is the built-in's on the same bed (issue 36).
	if z.Builtin {
		if res.Builtin, err = e.subsBuiltinSetup(n); err != nil {
			return nil, err
		}
		arms = append(arms, &subsArm{name: armBuiltin, topics: subsBuiltinTopics(n), app: newSubsApp(), prods: map[string][]pulsar.Producer{}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closeApps, err := e.subsApps(ctx, arms)
	defer closeApps()
	if err != nil {
		return nil, err
	}
	for _, a := range arms {
		defer closeProducers(a.prods)
		if err := e.subsFirstMessages(ctx, a.topics, a.prods); err != nil {
			return nil, err
		}
	}
	prox := map[string]*countingProxy{}
	for _, c := range []string{"east", "west"} {
		if prox[c], err = newCountingProxy(e2e.Get(c).AdminURL); err != nil {
			return nil, err
		}
		defer prox[c].close()
	}
	// The built-in's replication is switched on as the sidecar starts:
	// both start up at once.
	var watch *replWatch
	if res.Builtin != nil {
		if watch, err = e.subsBuiltinOn(n); err != nil {
			return nil, err
		}
		defer watch.stop()
	}
	sc, err := e.subsStart(prox)
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	// Where start-up goes (when profiling): its first minute from ready.
	defer sc.cpuProfile(time.Minute, fmt.Sprintf("subs-startup-%d", n))()
	res.Ready = time.Since(sc.started)
	if err := e.subsStartup(sc, n, res); err != nil {
		return nil, err
	}
	if watch != nil {
		e.subsBuiltinStartup(watch, res.Builtin)
	}

	time.Sleep(z.Settle)
	idle := z.Idle
	if startOnly {
		idle = z.GrowthIdle
	}
	ph, err := e.subsWindow(sc, prox, "idle", idle, nil)
	if err != nil {
		return nil, err
	}
	res.Phases = append(res.Phases, ph)
	if startOnly {
		e.subsStop(sc, res, false)
		return res, nil
	}
	res.addProbes(e.subsProbes(ctx, "idle", arms, 0))
	if err := e.subsTraffic(ctx, sc, prox, arms, res); err != nil {
		return nil, err
	}
	// Idle again: the steady state of a deployment that had traffic
	// (snapshots exist, west's subscription sits where updates put it).
	time.Sleep(z.Settle)
	idleAfter := z.IdleAfter
	if idleAfter == 0 {
		idleAfter = z.Idle
	}
	if ph, err = e.subsWindow(sc, prox, "idle after traffic", idleAfter, nil); err != nil {
		return nil, err
	}
	res.Phases = append(res.Phases, ph)
	e.subsStop(sc, res, true)
	return res, nil
}

// addProbes files one phase's probe sets, one per arm in subsOnce's
// order (the sidecar's first).
func (s *subsResult) addProbes(sets []probeSet) {
	s.Probes = append(s.Probes, sets[0])
	if len(sets) > 1 && s.Builtin != nil {
		s.Builtin.Probes = append(s.Builtin.Probes, sets[1])
	}
}

// subsApps opens each arm's application on east: one acknowledging
// consumer over every topic of the arm (markers included: it
// acknowledges all it receives, as an application that skips markers
// does), none on west, where the subscription is moved by the
// replicator's updates. The built-in's asks for its state to be
// replicated. The returned func closes what was opened, also after an
// error.
func (e *env) subsApps(ctx context.Context, arms []*subsArm) (func(), error) {
	var cons []pulsar.Consumer
	closeAll := func() {
		for _, c := range cons {
			c.Close()
		}
	}
	for _, a := range arms {
		c, err := e.east.Subscribe(pulsar.ConsumerOptions{
			Topics: a.topics, SubscriptionName: subsSub, Type: pulsar.Exclusive,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			ReplicateSubscriptionState:  a.name == armBuiltin,
		})
		if err != nil {
			return closeAll, fmt.Errorf("subs: %s application's consumer on east: %w", a.name, err)
		}
		cons = append(cons, c)
		go a.app.run(ctx, c)
	}
	return closeAll, nil
}

// closeProducers closes every producer of prods, at once.
func closeProducers(prods map[string][]pulsar.Producer) {
	var wg sync.WaitGroup
	for _, ps := range prods {
		for _, p := range ps {
			if p != nil {
				wg.Add(1)
				go func() { defer wg.Done(); closeSoon(p) }()
			}
		}
	}
	wg.Wait()
}

// subsFirstMessages opens a producer per topic on each cluster (into
// prods, to be closed by the caller even on an error) and sends one
// message through each.
func (e *env) subsFirstMessages(ctx context.Context, topics []string, prods map[string][]pulsar.Producer) error {
	for _, c := range []string{"east", "west"} {
		ps, err := e.subsProducers(c, topics)
		prods[c] = ps
		if err != nil {
			return err
		}
	}
	// One new message per topic on east, so that start-up includes a
	// first snapshot on every partition, and one on west, so that every
	// west→east partition has an entry to forward and opens its producer
	// (connected_partitions) without waiting for a snapshot exchange to
	// write a marker there: at 10,000 topics some first exchanges time
	// out, and those partitions had nothing to send until new data came.
	for _, c := range []string{"east", "west"} {
		if err := sendAll(ctx, prods[c], func(int) []byte { return payload(time.Now(), 0) }); err != nil {
			return fmt.Errorf("subs: first messages on %s: %w", c, err)
		}
	}
	return nil
}

// subsStart starts the subs run's sidecar, its admin calls through the
// counting proxies, and waits until it is ready.
func (e *env) subsStart(prox map[string]*countingProxy) (*sidecar, error) {
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(e.dir, "subs-marker.key")
	if err := os.WriteFile(keyFile, []byte("bench-marker-key-0123456789abcdef"), 0o600); err != nil {
		return nil, err
	}
	cfg := subsConfig(listen, keyFile, e.subsNS(), e.o.Sizes.Subs.AdminRate, prox)
	if p := e.o.Sizes.Subs.Positions; p != "" {
		cfg = strings.Replace(cfg, "sidecar:\n", "sidecar:\n  positions: "+p+"\n", 1)
	}
	sc, err := e.startSidecar(e.o.Binary, "subs", listen, cfg)
	if err != nil {
		return nil, err
	}
	if err := sc.waitReady(5 * time.Minute); err != nil {
		sc.stop()
		return nil, err
	}
	return sc, nil
}

// subsStartup waits until every partition of n topics is connected both
// ways, has replicated its first message and settled its first snapshot,
// and records when (res).
func (e *env) subsStartup(sc *sidecar, n int, res *subsResult) error {
	startup := subsStartupBound(n)
	done, err := sc.waitMetric("geo_sidecar_connected_partitions", float64(2*n), startup)
	if err != nil {
		return err
	}
	res.Connected = done.Sub(sc.started)
	done, err = sc.waitPairMetric("east", float64(n), startup, "geo_sidecar_replicated_messages_total")
	if err != nil {
		return err
	}
	res.Replicated = done.Sub(sc.started)
	// A first snapshot either completes or times out (and is not tried
	// again until new data arrives): wait until every one has settled.
	done, err = sc.waitPairMetric("east", float64(n), 3*time.Minute,
		"geo_sidecar_snapshots_completed_total", "geo_sidecar_snapshots_timed_out_total")
	if err != nil {
		e.logf("subs: %v", err) // reported as missing, the rest still measured
	} else {
		res.FirstSnap = done.Sub(sc.started)
	}
	if m, err := sc.metricBy("geo_sidecar_snapshots_completed_total", "source"); err == nil {
		res.SnapDone = int(m["east"])
	}
	if m, err := sc.metricBy("geo_sidecar_snapshots_timed_out_total", "source"); err == nil {
		res.SnapTimedOut = int(m["east"])
	}
	e.logf("subs: ready after %s, every partition connected after %s, replicated after %s, first snapshots settled after %s (%d completed, %d timed out)",
		res.Ready.Round(time.Millisecond), res.Connected.Round(time.Millisecond), res.Replicated.Round(time.Millisecond), res.FirstSnap.Round(time.Millisecond),
		res.SnapDone, res.SnapTimedOut)
	return nil
}

// subsTraffic runs the spread traffic on every arm at once, each at the
// row's rate (half published on each cluster, round-robin over the arm's
// topics), through one measured window, with the probes after it.
func (e *env) subsTraffic(ctx context.Context, sc *sidecar, prox map[string]*countingProxy, arms []*subsArm, res *subsResult) error {
	z := e.o.Sizes.Subs
	var failed atomic.Int64
	tctx, tstop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, a := range arms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spread(tctx, a.prods, z.Rate, &a.sent, &failed)
		}()
	}
	time.Sleep(z.Warm)
	ph, err := e.subsWindow(sc, prox, fmt.Sprintf("spread traffic, %s msg/s", num(float64(z.Rate))), z.Traffic, arms)
	if err == nil {
		res.Phases = append(res.Phases, ph)
		res.addProbes(e.subsProbes(ctx, "spread traffic", arms, res.Topics/2))
	}
	tstop()
	wg.Wait()
	if err != nil {
		return err
	}
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("subs: %d sends failed", f)
	}
	return nil
}

// subsStop takes the sidecar's peak RSS and threads (and, with
// goroutines, its goroutine profile when profiling), then stops it and
// times its exit.
func (e *env) subsStop(sc *sidecar, res *subsResult, goroutines bool) {
	u, _ := sc.usage()
	res.HWM, res.Threads = u.HWM, u.Threads
	if goroutines {
		sc.profile("goroutine", "", "subs")
	}
	res.Stop = sc.stop()
	res.StopKilled = sc.killed
	e.logf("subs: SIGTERM to exit %s", stopText(res.Stop, res.StopKilled))
}

// subsSetup creates the tenant, the namespace (replicated nowhere: the
// sidecar copies), the topics and the subscription on both clusters,
// skipping what is there; it returns how many topics both had already.
func (e *env) subsSetup(n int) (reused int, err error) {
	have := map[string]map[string]bool{}
	for _, c := range []string{"east", "west"} {
		adm := e.admin(c)
		if err := adm.Tenants().Create(utils.TenantData{Name: subsTenant, AllowedClusters: []string{c}}); err != nil && !isConflict(err) {
			return 0, fmt.Errorf("create tenant %s on %s: %w", subsTenant, c, err)
		}
		if err := adm.Namespaces().CreateNamespace(e.subsNS()); err != nil && !isConflict(err) {
			return 0, fmt.Errorf("create namespace %s on %s: %w", e.subsNS(), c, err)
		}
		cl, err := adm.Namespaces().GetNamespaceReplicationClusters(e.subsNS())
		if err != nil {
			return 0, fmt.Errorf("replication clusters of %s on %s: %w", e.subsNS(), c, err)
		}
		if len(cl) != 1 {
			return 0, fmt.Errorf("namespace %s on %s replicates to %v; want its own cluster only", e.subsNS(), c, cl)
		}
		nsn, _ := utils.GetNamespaceName(e.subsNS())
		_, plain, err := adm.Topics().List(*nsn)
		if err != nil {
			return 0, fmt.Errorf("list %s on %s: %w", e.subsNS(), c, err)
		}
		have[c] = map[string]bool{}
		for _, t := range plain {
			have[c][t] = true
		}
	}
	topics := make([]string, n)
	for i := range n {
		topics[i] = e.subsTopic(i)
	}
	return e.subsCreate(topics, have, "")
}

// subsCreate creates each topic on both clusters unless have says it is
// there, and subscription app on it at the earliest position (query is
// the subscription request's, e.g. "?replicated=true"); it returns how
// many topics both clusters had already.
func (e *env) subsCreate(topics []string, have map[string]map[string]bool, query string) (reused int, err error) {
	for _, t := range topics {
		if have["east"][t] && have["west"][t] {
			reused++
		}
	}
	// Modest parallelism: the brokers share two cores with everything
	// else, and topic creation writes metadata and a ledger each.
	type job struct{ cluster, topic string }
	jobs := make(chan job)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				path := "/admin/v2/" + strings.Replace(j.topic, "://", "/", 1)
				var err error
				if !have[j.cluster][j.topic] {
					if err = e.adminDo(j.cluster, http.MethodPut, path, nil); isConflict(err) {
						err = nil
					}
				}
				if err == nil {
					// Earliest: a new subscription covers the topic's
					// whole history on either side.
					err = e.adminDo(j.cluster, http.MethodPut, path+"/subscription/"+subsSub+query,
						map[string]int64{"ledgerId": -1, "entryId": -1, "partitionIndex": -1})
					if isConflict(err) {
						err = nil
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, t := range topics {
		for _, c := range []string{"east", "west"} {
			jobs <- job{c, t}
		}
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		return reused, fmt.Errorf("subs setup: %d error(s), first: %w", len(errs), errs[0])
	}
	return reused, nil
}

// dropSubs deletes the row's topics, namespaces (the sidecar's and the
// built-in arm's; Pulsar's replication of the latter switched off first:
// a replicated namespace cannot be deleted) and tenant on both clusters,
// so other tests and runs do not see them.
func (e *env) dropSubs() {
	nss := []string{e.subsNS(), subsBuiltinNamespace(e.subsTopics)}
	e.logf("subs: deleting %s", strings.Join(nss, ", "))
	for _, c := range []string{"east", "west"} {
		if err := e.admin(c).Namespaces().SetNamespaceReplicationClusters(nss[1], []string{c}); err != nil && !isNotFound(err) {
			e.logf("subs: replication of %s on %s not switched off: %v", nss[1], c, err)
		}
	}
	for _, c := range []string{"east", "west"} {
		adm := e.admin(c)
		left := 0
		for _, ns := range nss {
			if !e.dropSubsNamespace(c, ns) {
				left++
			}
		}
		if left > 0 {
			continue
		}
		if err := adm.Tenants().Delete(subsTenant); err != nil && !isNotFound(err) {
			e.logf("subs: tenant %s on %s not deleted: %v", subsTenant, c, err)
		}
	}
}

// dropSubsNamespace deletes every topic of ns on cluster, then ns; it
// reports whether ns is gone.
func (e *env) dropSubsNamespace(c, ns string) bool {
	adm := e.admin(c)
	nsn, _ := utils.GetNamespaceName(ns)
	_, plain, err := adm.Topics().List(*nsn)
	if err != nil && !isNotFound(err) {
		e.logf("subs: list %s on %s: %v", ns, c, err)
	}
	work := make(chan string)
	var left atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				path := "/admin/v2/" + strings.Replace(t, "://", "/", 1) + "?force=true"
				if err := e.adminDo(c, http.MethodDelete, path, nil); err != nil && !isNotFound(err) {
					left.Add(1)
				}
			}
		}()
	}
	for _, t := range plain {
		work <- t
	}
	close(work)
	wg.Wait()
	if err := adm.Namespaces().DeleteNamespace(ns); err != nil && !isNotFound(err) {
		e.logf("subs: namespace %s on %s not deleted (%d topic(s) left): %v", ns, c, left.Load(), err)
		return false
	}
	return true
}

// subsConfig is one sidecar for both directions, its admin URLs through
// the counting proxies.
func subsConfig(listen, keyFile, ns string, adminRate float64, prox map[string]*countingProxy) string {
	return subsConfigFor(listen, keyFile, ns, `topic_patterns: ["t-.*"]`, adminRate, prox)
}

// subsConfigFor is subsConfig with the topics line of each pair given
// (`topics: [...]` or `topic_patterns: [...]`).
func subsConfigFor(listen, keyFile, ns, topics string, adminRate float64, prox map[string]*countingProxy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\n  marker_key_file: %s\n", listen, keyFile)
	if adminRate > 0 {
		fmt.Fprintf(&b, "  admin_rate:\n    requests_per_second: %g\n", adminRate)
	}
	b.WriteString("clusters:\n")
	for _, n := range []string{"east", "west"} {
		c := e2e.Get(n)
		fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", c.Name, c.ServiceURL, prox[n].url)
	}
	b.WriteString("replication:\n")
	for _, p := range [][2]string{{"east", "west"}, {"west", "east"}} {
		fmt.Fprintf(&b, "  - source: %s\n    namespace: %s\n    %s\n    targets: [%s]\n    subscriptions: [%s]\n",
			p[0], ns, topics, p[1], subsSub)
	}
	return b.String()
}

// subsProducers opens a non-batching producer per topic on cluster: the
// spread traffic is a message per topic every few seconds, and 1,000
// batching producers would wake this process every 10 ms each.
func (e *env) subsProducers(cluster string, topics []string) ([]pulsar.Producer, error) {
	out := make([]pulsar.Producer, len(topics))
	work := make(chan int)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				// No send timeout: pulsar-client-go v0.21.0 dereferences a
				// nil message when it fails timed-out sends
				// (producer_partition.go:1665, sendRequest.done), which
				// crashed a run whose brokers were saturated (2,000 topics,
				// both arms); a late send is measured as late instead.
				p, err := e.client(cluster).CreateProducer(pulsar.ProducerOptions{Topic: topics[i], DisableBatching: true, SendTimeout: -1})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("producer on %s %s: %w", cluster, topics[i], err)
				}
				out[i] = p
				mu.Unlock()
			}
		}()
	}
	for i := range topics {
		work <- i
	}
	close(work)
	wg.Wait()
	return out, firstErr
}

// sendAll sends one message to each producer and waits for the receipts.
func sendAll(ctx context.Context, ps []pulsar.Producer, body func(i int) []byte) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i, p := range ps {
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: body(i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d sends failed", f, len(ps))
	}
	return nil
}

// spread publishes rate messages per second until ctx ends, alternating
// clusters, each cluster round-robin over its topics.
func spread(ctx context.Context, prods map[string][]pulsar.Producer, rate int, sent, failed *atomic.Int64) {
	const tick = 20 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	body := payload(time.Now(), 0)
	cb := func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
		if err != nil && ctx.Err() == nil {
			failed.Add(1)
		}
	}
	start := time.Now()
	k := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int(now.Sub(start).Seconds() * float64(rate))
			for ; k < due; k++ {
				ps := prods["east"]
				if k%2 == 1 {
					ps = prods["west"]
				}
				ps[(k/2)%len(ps)].SendAsync(ctx, &pulsar.ProducerMessage{Payload: body}, cb)
				sent.Add(1)
			}
		}
	}
}

// subsWindow measures one window of d; traffic are the arms whose spread
// traffic runs meanwhile (nil: none).
func (e *env) subsWindow(sc *sidecar, prox map[string]*countingProxy, name string, d time.Duration, traffic []*subsArm) (subsPhase, error) {
	ph := subsPhase{Name: name, Admin: map[string]float64{}, Broker: map[string]float64{}, Paths: map[string]map[string]int64{}}
	// The brokers' counters are read outside the sidecar's window: a
	// broker's /metrics with thousands of topics takes seconds to render
	// under load, so each count is divided by the time between its own
	// reads.
	b0 := map[string]float64{}
	for _, c := range []string{"east", "west"} {
		b0[c], _ = e.brokerRequests(c)
	}
	tb0 := time.Now()
	a0, err := sc.metricBy("geo_sidecar_admin_requests_total", "cluster")
	if err != nil {
		return ph, err
	}
	p0 := map[string]map[string]int64{}
	for _, c := range []string{"east", "west"} {
		p0[c] = prox[c].snapshot()
	}
	s0 := make([]int64, len(traffic))
	for i, a := range traffic {
		s0[i] = a.sent.Load()
	}
	u0, _ := sc.usage()
	t0 := time.Now()
	label := strings.Fields(name)[0]
	stopProf := sc.cpuProfile(min(d, e.o.ProfileSeconds*4), "subs-"+label)
	e.logf("subs: measuring %s for %s", name, d)
	time.Sleep(d)
	u1, _ := sc.usage()
	a1, err := sc.metricBy("geo_sidecar_admin_requests_total", "cluster")
	if err != nil {
		return ph, err
	}
	p1 := map[string]map[string]int64{}
	for _, c := range []string{"east", "west"} {
		p1[c] = prox[c].snapshot()
	}
	s1 := make([]int64, len(traffic))
	for i, a := range traffic {
		s1[i] = a.sent.Load()
	}
	ph.Window = time.Since(t0)
	stopProf()
	// What holds the memory and the goroutines at the window's end (the
	// 10,000-partition RSS and goroutine goals): saved with -profile only.
	sc.profile("heap", "", "subs-"+label)
	sc.profile("goroutine", "", "subs-"+label)
	for _, c := range []string{"east", "west"} {
		b1, _ := e.brokerRequests(c)
		ph.Broker[c] = b1 - b0[c]
	}
	ph.BrokerWindow = time.Since(tb0)
	for _, c := range []string{"east", "west"} {
		ph.Admin[c] = a1[c] - a0[c]
		ph.Paths[c] = map[string]int64{}
		for k, v := range p1[c] {
			if v -= p0[c][k]; v > 0 {
				ph.Paths[c][k] = v
			}
		}
	}
	for i, a := range traffic {
		if a.name == armBuiltin {
			ph.SentBuiltin = int(s1[i] - s0[i])
		} else {
			ph.Sent = int(s1[i] - s0[i])
		}
	}
	g, _ := sc.metric("go_goroutines")
	ph.CPU, ph.RSS, ph.Goroutines = u1.CPU-u0.CPU, u1.RSS, int(g)
	e.logf("subs: %s: admin req/s east %.1f west %.1f (brokers served %.1f / %.1f), sidecar CPU %.2f%% of a core, RSS %s MiB",
		name, ph.perSec(ph.Admin["east"]), ph.perSec(ph.Admin["west"]), ph.brokerPerSec(ph.Broker["east"]), ph.brokerPerSec(ph.Broker["west"]), ph.cpuPct(), mib(ph.RSS))
	// What the RSS is made of, from the process's own memstats: the
	// goroutines' stacks and the heap grow differently with the
	// partition count.
	stack, _ := sc.metric("go_memstats_stack_inuse_bytes")
	heap, _ := sc.metric("go_memstats_heap_inuse_bytes")
	live, _ := sc.metric("go_memstats_heap_alloc_bytes")
	e.logf("subs: %s: stacks %s MiB (%.1f KiB a goroutine), heap in use %s MiB, allocated %s MiB",
		name, mib(int64(stack)), stack/1024/max(g, 1), mib(int64(heap)), mib(int64(live)))
	for _, c := range []string{"east", "west"} {
		for _, k := range topPaths(ph.Paths[c], 5) {
			e.logf("subs:   %s %8.2f/s  %s", c, ph.perSec(float64(ph.Paths[c][k])), k)
		}
	}
	return ph, nil
}

// subsProbes measures the follow latency on Probes topics of every arm,
// starting at topic index from: a tagged message published on east,
// acknowledged by the arm's application there; the time from the
// acknowledgement until west's subscription passed the copy of that
// message. The arms' probes are interleaved (the same topic indices, in
// turn), ProbeParallel at a time per arm; the sets come back in the
// arms' order.
func (e *env) subsProbes(ctx context.Context, phase string, arms []*subsArm, from int) []probeSet {
	z := e.o.Sizes.Subs
	sets := make([]probeSet, len(arms))
	for k := range sets {
		sets[k].Phase = phase
	}
	type job struct{ arm, i int }
	var mu sync.Mutex
	work := make(chan job)
	var wg sync.WaitGroup
	for range max(z.ProbeParallel, 1) * len(arms) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range work {
				a := arms[jb.arm]
				j := (from + jb.i*7) % len(a.topics)
				d, err := e.probe(ctx, a.app, a.prods["east"][j], a.topics[j], probeTag(jb.i))
				mu.Lock()
				set := &sets[jb.arm]
				if err != nil {
					set.Failed++
					if set.Failed <= 2 {
						e.logf("subs: %s probe: %v", a.name, err)
					}
				} else {
					set.Lat = append(set.Lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range z.Probes {
		for k := range arms {
			work <- job{k, i}
		}
	}
	close(work)
	wg.Wait()
	for k, a := range arms {
		set := &sets[k]
		slices.Sort(set.Lat)
		e.logf("subs: follow latency (%s, %s): %d probes, p50 %s p99 %s, %d failed", phase, a.name, len(set.Lat),
			quantile(set.Lat, 0.5).Round(time.Millisecond), quantile(set.Lat, 0.99).Round(time.Millisecond), set.Failed)
	}
	return sets
}

// probeTag is a tag no other probe of the run carries (payload's second
// word; the spread traffic's is 0).
func probeTag(i int) uint64 {
	return uint64(1)<<40 + uint64(time.Now().UnixNano()&0xffffffff)<<8 + uint64(i&0xff)
}

// probe is one follow-latency probe on topic (a non-partitioned topic or
// one partition), published on east by prod, a producer on that topic.
func (e *env) probe(ctx context.Context, app *subsApp, prod pulsar.Producer, topic string, tag uint64) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// The copy's position on west, from a reader that starts before the
	// message is published.
	r, err := e.west.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
	if err != nil {
		return 0, fmt.Errorf("reader on west %s: %w", topic, err)
	}
	defer r.Close()
	acked := app.expect(tag)
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload(time.Now(), tag)}); err != nil {
		return 0, fmt.Errorf("probe send on east %s: %w", topic, err)
	}
	var copyAt marker.Position
	for {
		m, err := r.Next(ctx)
		if err != nil {
			return 0, fmt.Errorf("probe copy on west %s: %w", topic, err)
		}
		if _, isMarker := marker.KindOf(m.Properties()); !isMarker && len(m.Payload()) >= 16 && getUint64(m.Payload()[8:]) == tag {
			copyAt = marker.Position{Ledger: m.ID().LedgerID(), Entry: m.ID().EntryID(), Batch: -1}
			break
		}
	}
	var ackAt time.Time
	select {
	case <-acked:
		ackAt = app.ackTime(tag)
	case <-ctx.Done():
		return 0, fmt.Errorf("probe on %s: east's consumer did not receive it", topic)
	}
	tn, _ := utils.GetTopicName(topic)
	for {
		st, err := e.westAdm.Topics().GetInternalStatsWithContext(ctx, *tn)
		if err == nil {
			if md, ok := parseEntryPos(st.Cursors[subsSub].MarkDeletePosition); ok && md.Compare(copyAt) >= 0 {
				if e.o.LogLevel == "debug" {
					// To set beside the sidecars' debug logs: where the
					// time of one probe went.
					e.logf("subs: probe %s: acknowledged on east at %s, west's copy at %s passed after %s",
						topic, ackAt.Format("15:04:05.000"), copyAt, time.Since(ackAt).Round(time.Millisecond))
				}
				return time.Since(ackAt), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("probe on %s: west's subscription did not pass %s within %s", topic, copyAt, probeTimeout)
		case <-time.After(probePoll):
		}
	}
}

func parseEntryPos(s string) (marker.Position, bool) {
	l, en, ok := strings.Cut(s, ":")
	if !ok {
		return marker.Position{}, false
	}
	return marker.ParsePosition(l + ":" + en + ":-1")
}

// subsApp is the application on east: it acknowledges everything it
// receives and notes when it acknowledged a probe's message.
type subsApp struct {
	mu    sync.Mutex
	acked map[uint64]time.Time
	wait  map[uint64]chan struct{}
	// markers and data count what it received: geo-sidecar's markers
	// (no entry filter on the test bed) and everything else.
	markers, data atomic.Int64
}

func newSubsApp() *subsApp {
	return &subsApp{acked: map[uint64]time.Time{}, wait: map[uint64]chan struct{}{}}
}

func (a *subsApp) run(ctx context.Context, c pulsar.Consumer) {
	for {
		m, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		_ = c.Ack(m)
		if _, isMarker := marker.KindOf(m.Properties()); isMarker {
			a.markers.Add(1)
			continue
		}
		if a.data.Add(1); len(m.Payload()) < 16 {
			continue
		}
		if tag := getUint64(m.Payload()[8:]); tag != 0 {
			a.mu.Lock()
			if ch, ok := a.wait[tag]; ok {
				a.acked[tag] = time.Now()
				close(ch)
				delete(a.wait, tag)
			}
			a.mu.Unlock()
		}
	}
}

func (a *subsApp) expect(tag uint64) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := make(chan struct{})
	a.wait[tag] = ch
	return ch
}

func (a *subsApp) ackTime(tag uint64) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.acked[tag]
	delete(a.acked, tag)
	return t
}

// brokerRequests is a broker's jetty_requests_total: HTTP requests served.
func (e *env) brokerRequests(cluster string) (float64, error) {
	resp, err := e.http.Get(e2e.Get(cluster).AdminURL + "/metrics/")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "jetty_requests_total") {
			return strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		}
	}
	return 0, errors.New("no jetty_requests_total")
}

// metricBy returns the named metric summed per value of one label.
func (s *sidecar) metricBy(name, label string) (map[string]float64, error) {
	resp, err := http.Get("http://" + s.listen + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		key := label + `="`
		if i := strings.Index(line, key); i >= 0 {
			rest := line[i+len(key):]
			out[rest[:strings.IndexByte(rest, '"')]] += v
		}
	}
	return out, nil
}

// waitPairMetric polls metrics of the pair whose source is local until
// their sum reaches want.
func (s *sidecar) waitPairMetric(local string, want float64, timeout time.Duration, names ...string) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last float64
	for time.Now().Before(deadline) {
		if err := s.exited(); err != nil {
			return time.Time{}, err
		}
		if s.e.restarted() {
			return time.Time{}, errRestarted
		}
		sum, ok := 0.0, true
		for _, name := range names {
			m, err := s.metricBy(name, "source")
			ok = ok && err == nil
			sum += m[local]
		}
		if last = sum; ok && sum >= want {
			return time.Now(), nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("sidecar %s: %s{source=%q} is %.0f, not %.0f, after %s", s.name, strings.Join(names, " + "), local, last, want, timeout)
}

// countingProxy stands between the sidecar and one cluster's admin API
// and counts requests by shape, to tell which calls make the admin load
// (the sidecar's own counter has the cluster only, to keep its labels
// bounded).
type countingProxy struct {
	url string
	srv *http.Server
	mu  sync.Mutex
	n   map[string]int64
}

func newCountingProxy(target string) (*countingProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{url: "http://" + ln.Addr().String(), n: map[string]int64{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := requestShape(r)
		p.mu.Lock()
		p.n[k]++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *countingProxy) snapshot() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.n)
}

func (p *countingProxy) close() { _ = p.srv.Close() }

// requestShape is "METHOD path?query" with the tenant, namespace and topic
// of an admin path replaced by placeholders.
func requestShape(r *http.Request) string {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// admin/v2/persistent/<tenant>/<ns>/<topic>/...
	if len(seg) >= 5 && seg[0] == "admin" && (seg[2] == "persistent" || seg[2] == "non-persistent" || seg[2] == "namespaces") {
		seg[3], seg[4] = "{tenant}", "{ns}"
		if len(seg) >= 6 && seg[2] != "namespaces" {
			seg[5] = "{topic}"
		}
	}
	s := r.Method + " /" + strings.Join(seg, "/")
	if r.URL.RawQuery != "" {
		q := r.URL.Query()
		keys := slices.Sorted(maps.Keys(q))
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+"="+q.Get(k))
		}
		s += "?" + strings.Join(parts, "&")
	}
	return s
}

// topPaths returns the k most frequent request shapes.
func topPaths(m map[string]int64, k int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	if len(keys) > k {
		keys = keys[:k]
	}
	return keys
}

// ---- report ---------------------------------------------------------------

// markdown is the row's part of the summary.
func (s *subsResult) markdown() string {
	var b strings.Builder
	settings := "default settings: 30 s discovery, 1 s snapshots"
	if s.AdminRate > 0 {
		settings += fmt.Sprintf("; admin budget %g requests/s per cluster (default 50)", s.AdminRate)
	}
	if s.Positions != "" {
		settings += "; sidecar.positions: " + s.Positions
	}
	fmt.Fprintf(&b, "\nScale with replicated subscriptions: one sidecar replicating %s non-partitioned topics east↔west (%s partitions per direction), one replicated subscription each, acknowledged by an application on east (%s):\n\n",
		num(float64(s.Topics)), num(float64(s.Topics)), settings)
	first := "—"
	if s.FirstSnap > 0 {
		first = fmt.Sprintf("%.1f s", s.FirstSnap.Seconds())
	}
	fmt.Fprintf(&b, "Start-up: ready (/readyz) %.1f s, every partition connected %.1f s, the first message of every partition replicated %.1f s, a first snapshot on every partition settled %s (%s completed, %s timed out); peak RSS %s MiB, %d threads; stop (SIGTERM) %s.\n\n",
		s.Ready.Seconds(), s.Connected.Seconds(), s.Replicated.Seconds(), first, num(float64(s.SnapDone)), num(float64(s.SnapTimedOut)), mib(s.HWM), s.Threads, stopText(s.Stop, s.StopKilled))
	b.WriteString("| phase | window | admin requests/s, east | admin requests/s, west | brokers' HTTP requests/s, east / west | sidecar CPU, % of a core | RSS MiB | goroutines | follow latency p50 / p99 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range s.Phases {
		lat := ""
		for _, ps := range s.Probes {
			if p.Name == ps.Phase || strings.HasPrefix(p.Name, ps.Phase+",") {
				lat = ps.text()
			}
		}
		name := p.Name
		switch {
		case p.SentBuiltin > 0:
			name = fmt.Sprintf("%s (%s sent; %s more on the built-in arm's topics)", p.Name, num(float64(p.Sent)), num(float64(p.SentBuiltin)))
		case p.Sent > 0:
			name = fmt.Sprintf("%s (%s sent)", p.Name, num(float64(p.Sent)))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.1f / %.1f | %.2f | %s | %d | %s |\n", name, p.Window.Round(time.Second),
			p.perSec(p.Admin["east"]), p.perSec(p.Admin["west"]), p.brokerPerSec(p.Broker["east"]), p.brokerPerSec(p.Broker["west"]),
			p.cpuPct(), mib(p.RSS), p.Goroutines, lat)
	}
	b.WriteString(s.builtinMarkdown())
	return b.String()
}

// targets adds the row's targets (issue 23) through line.
func (s *subsResult) targets(line func(ok bool, format string, args ...any)) {
	if len(s.Phases) == 0 {
		return
	}
	for _, p := range s.Phases {
		if !strings.HasPrefix(p.Name, "idle") {
			continue
		}
		e, w := p.perSec(p.Admin["east"]), p.perSec(p.Admin["west"])
		line(e <= 1 && w <= 1, "%s partitions with a replicated subscription each, %s, ≤ 1 admin request/s per cluster: east %.2f, west %.2f",
			num(float64(s.Topics)), p.Name, e, w)
	}
	p := s.Phases[0]
	line(p.cpuPct() < 2, "%s idle partitions with a replicated subscription each, idle CPU < 2 %% of a core: %.2f %%", num(float64(s.Topics)), p.cpuPct())
	for _, ps := range s.Probes {
		if ps.Phase != "spread traffic" {
			continue
		}
		p99, ok := ps.at(0.99)
		line(ok && p99 <= 3*time.Second, "follow p99 under spread traffic, %s partitions: %s (goal ≤ 3 s)", num(float64(s.Topics)), ps.quantile(0.99))
	}
	s.builtinTargets(line)
}

// at is the q-quantile of every probe; ok is false when it falls among
// the failed ones (or there are none).
func (p probeSet) at(q float64) (time.Duration, bool) {
	n := len(p.Lat) + p.Failed
	i := max(int(q*float64(n)+0.5)-1, 0)
	if n == 0 || i >= len(p.Lat) {
		return 0, false
	}
	return p.Lat[i], true
}

// growthScale is the partition count issue 23 asks about.
const growthScale = 10_000

// subsGrowth is the growth table: the row and its larger counts, start-up
// and idle, with the figures at growthScale fitted (least squares, a
// line through the measured counts) when no run reached it.
func subsGrowth(runs []*subsResult) string {
	if len(runs) < 2 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nReplicated subscriptions, growth with the partition count (each row: one sidecar, that many topics east↔west with one replicated subscription each, an application consuming on east; start-up, then idle; no traffic in the larger runs):\n\n")
	b.WriteString("| topics (partitions per direction) | every partition connected s | built-in arm connected s (sidecar / built-in) | first messages replicated s | first snapshots settled s | idle admin req/s east / west | idle CPU % of a core | idle RSS MiB | peak RSS MiB | goroutines | per partition |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var xs, start, hwm, gor []float64
	for _, r := range runs {
		if len(r.Phases) == 0 {
			continue
		}
		p := r.Phases[0]
		first := "—"
		if r.FirstSnap > 0 {
			first = fmt.Sprintf("%.1f", r.FirstSnap.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %.1f | %s | %.1f | %s | %.2f / %.2f | %.2f | %s | %s | %s | %.2f |\n", num(float64(r.Topics)),
			r.Connected.Seconds(), r.builtinConnected(), r.Replicated.Seconds(), first, p.perSec(p.Admin["east"]), p.perSec(p.Admin["west"]),
			p.cpuPct(), mib(p.RSS), mib(r.HWM), num(float64(p.Goroutines)), float64(p.Goroutines)/float64(2*r.Topics))
		xs = append(xs, float64(r.Topics))
		start = append(start, r.Replicated.Seconds())
		hwm = append(hwm, float64(r.HWM))
		gor = append(gor, float64(p.Goroutines))
	}
	if xs[len(xs)-1] < growthScale && len(xs) >= 2 {
		x := float64(growthScale)
		fmt.Fprintf(&b, "| %s (fitted, not run) | | | %.0f | | | | | %s | %s | %.2f |\n", num(x),
			fit(xs, start, x), mib(int64(fit(xs, hwm, x))), num(fit(xs, gor, x)), fit(xs, gor, x)/(2*x))
	}
	return b.String()
}

// fit is the least-squares line through (xs, ys), at x.
func fit(xs, ys []float64, x float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return sy / n
	}
	k := (n*sxy - sx*sy) / d
	return (sy-k*sx)/n + k*x
}

// growthTargets judges the largest growth run (or the fit at
// growthScale) against issue 23's goals for 10,000 partitions.
func growthTargets(runs []*subsResult, line func(ok bool, format string, args ...any)) {
	if len(runs) < 2 {
		return
	}
	last := runs[len(runs)-1]
	if len(last.Phases) == 0 {
		return
	}
	n, p := last.Topics, last.Phases[0]
	line(last.HWM <= 1<<30, "%s partitions with a replicated subscription each, peak RSS ≤ 1 GiB: %s MiB", num(float64(n)), mib(last.HWM))
	line(last.Replicated <= time.Minute, "%s partitions with a replicated subscription each, start-up ≤ 60 s: %.1f s", num(float64(n)), last.Replicated.Seconds())
	for _, r := range runs {
		if r.Builtin != nil && r.Builtin.Connected > 0 {
			line(r.Connected <= r.Builtin.Connected, "%s topics both ways, every partition connected ≤ the built-in's side by side: sidecar %.1f s, built-in %.1f s (%s)",
				num(float64(r.Topics)), r.Connected.Seconds(), r.Builtin.Connected.Seconds(), ratio(r.Connected.Seconds(), r.Builtin.Connected.Seconds()))
		}
	}
	// Per partition is what each partition adds (the growth from the
	// first run to the last), beside the process's own goroutines, which
	// do not grow with the partitions (the metrics server, the HTTP
	// clients, the signal handler).
	first := runs[0]
	if len(first.Phases) > 0 && n > first.Topics {
		g0 := first.Phases[0].Goroutines
		per := float64(p.Goroutines-g0) / float64(2*(n-first.Topics))
		fixed := float64(p.Goroutines) - per*float64(2*n)
		line(per <= 2, "%s partitions with a replicated subscription each, ≤ 2 goroutines per partition: %.2f each partition adds (%s to %s topics), beside %.0f of the process (%s in all)",
			num(float64(n)), per, num(float64(first.Topics)), num(float64(n)), fixed, num(float64(p.Goroutines)))
	}
	if n < growthScale {
		var xs, hwm, start []float64
		for _, r := range runs {
			xs, hwm, start = append(xs, float64(r.Topics)), append(hwm, float64(r.HWM)), append(start, r.Replicated.Seconds())
		}
		h, st := fit(xs, hwm, growthScale), fit(xs, start, growthScale)
		line(h <= 1<<30, "%s partitions (fitted from %s to %s, not run), peak RSS ≤ 1 GiB: %s MiB", num(growthScale), num(xs[0]), num(float64(n)), mib(int64(h)))
		line(st <= 60, "%s partitions (fitted, not run), start-up ≤ 60 s: %.0f s", num(growthScale), st)
	}
}

// rounds is the row's detail: the admin requests by shape in each phase.
func (s *subsResult) rounds() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Scale with replicated subscriptions: the sidecar's admin requests by shape, per second (counted by a proxy in front of each admin API; %d of %d topics reused from an earlier run, set up in %s):\n\n",
		s.Reused, s.Topics, s.Setup.Round(time.Second))
	b.WriteString("| phase | cluster | requests/s | request |\n|---|---|---:|---|\n")
	for _, p := range s.Phases {
		for _, c := range []string{"east", "west"} {
			for _, k := range topPaths(p.Paths[c], 8) {
				fmt.Fprintf(&b, "| %s | %s | %.2f | `%s` |\n", p.Name, c, p.perSec(float64(p.Paths[c][k])), k)
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

// method describes how the row is measured.
func (s *subsResult) method(z subsSizes) string {
	return fmt.Sprintf("- Scale with replicated subscriptions: %[1]s non-partitioned topics in a namespace of their own (`%[2]s`, local-only on each cluster; reused when an earlier run left them with -keep, deleted afterwards otherwise), each with subscription `%[3]s` created at the earliest message on both clusters. One sidecar process runs both directions (east→west and west→east, `topic_patterns`, `subscriptions: [%[3]s]`, default 30 s discovery and 1 s snapshot interval); its admin URLs point at a counting proxy per cluster. An application consumer on east acknowledges everything it receives (markers too); west has no consumer, so its subscription moves only by the sidecar's updates. Each topic gets one message on each cluster before the sidecar starts: start-up is process start until `connected_partitions` counts both directions' partitions, until east's messages are confirmed on west, and until east→west completed (or timed out: a first snapshot is not tried again until new data arrives) as many snapshots as there are partitions. After %[4]s, idle is measured over %[5]s (an idle partition is followed every 5 minutes, so a shorter window misses those calls); then the follow latency on %[6]d topics (%[7]d at a time): a message published on east, the time from the application's acknowledgement until west's `%[3]s` mark-delete position (internal stats, polled every %[8]s) passed the copy (found by a reader on west), so it includes the poll's resolution. Then %[9]s msg/s spread round-robin over every topic, half published on each cluster: measured over %[10]s after %[11]s of warm-up, probes likewise while it runs; then idle again (%[5]s after %[4]s). Admin requests/s are the sidecar's `geo_sidecar_admin_requests_total{cluster}`; the brokers' figure is `jetty_requests_total` (every HTTP request, the bench's own probes and metric reads included). Then, for each larger count (%[12]s), the same set-up and start-up in a namespace of that count%[14]s, one idle window of %[13]s, and no traffic: the growth table, with the figures at 10,000 fitted (a least-squares line through the measured counts) when no run reached it. Targets (issue 23): at most 1 admin request/s per cluster and under 2 %% of a core idle, follow p99 at most 3 s under the spread traffic; at 10,000 partitions peak RSS at most 1 GiB, start-up at most 60 s, at most 2 goroutines per partition (of both directions).",
		num(float64(z.Topics)), subsNamespace(z.Topics), subsSub, z.Settle, z.Idle, z.Probes, z.ProbeParallel, probePoll,
		num(float64(z.Rate)), z.Traffic, z.Warm, growthList(z.Growth), z.GrowthIdle, s.growthBuiltin()) + s.builtinMethod(z) + "\n"
}

// growthBuiltin is the method's note on the growth runs' built-in arm,
// empty without it.
func (s *subsResult) growthBuiltin() string {
	if s.Builtin == nil {
		return ""
	}
	return " (with the built-in arm's start-up beside it: as many topics again, switched on as the sidecar starts)"
}

func growthList(g []int) string {
	if len(g) == 0 {
		return "none"
	}
	f := make([]string, len(g))
	for i, n := range g {
		f[i] = num(float64(n))
	}
	return strings.Join(f, ", ")
}
