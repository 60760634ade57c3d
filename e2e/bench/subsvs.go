package main

// The side-by-side row of replicated subscriptions (issue 23): Pulsar's
// own replicated subscriptions and geo-sidecar's, measured at once on the
// same clusters under the same load. What it is for is what a failover
// would cost (the excess: west's backlog of the subscription minus
// east's), what keeping subscriptions in step costs the clusters (the
// sidecar's admin requests per replicated message; the built-in makes
// none) and how many marker entries it adds to the topics.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// subsvsSizes are the knobs of the side-by-side row.
type subsvsSizes struct {
	Partitions int           // of the one topic of each arm
	Rate       int           // messages per second per arm, published on east, round-robin over the partitions
	Warm       time.Duration // of the load, before its samples count for the median
	Load       time.Duration // the whole load, warm-up included
	// Tail is how long the excess is sampled after the load stops; its
	// last sample is the "Tail after" figure (20 s in the issue).
	Tail   time.Duration
	Probes int // follow-latency probes per arm, spread over the load after Warm
	// Types are the application's subscription types (svTypes' keys),
	// one run of the row each: what keeps the copy in step on west
	// depends on it (docs/replicated-subscriptions.md, Which route).
	Types []string
}

// svTypes are the application types the row runs with.
var svTypes = map[string]pulsar.SubscriptionType{
	"exclusive": pulsar.Exclusive, "failover": pulsar.Failover, "shared": pulsar.Shared,
}

// svAllTypes is every type, in the order the report shows them.
var svAllTypes = []string{"exclusive", "failover", "shared"}

// Where the row works: two namespaces of the run's tenant per
// application type (svbuiltin-<type>, svsidecar-<type>).
const (
	nsSVBuiltin = "svbuiltin" // Pulsar geo-replication east<->west, replicated subscription state on
	nsSVSidecar = "svsidecar" // local-only; one sidecar east<->west with subscriptions: [app]
	svTopic     = "t-vs"      // the partitioned topic of each arm
	svEvery     = time.Second // between two excess samples
	svAfter     = 5 * time.Second
)

// svArm is one arm of the row and what was measured on it.
type svArm struct {
	Name  string
	topic string
	app   *subsApp
	prod  pulsar.Producer
	sent  atomic.Int64 // data messages published on east in the window, probes included

	Data             int64            // sent, read at the end of the window
	In               map[string]int64 // msgInCounter growth over the window, per cluster: entries written (non-batching: one message each)
	AppData, AppMark int64            // what the application on east received over the window
	Probes           probeSet
}

// markersPerData is the marker entries written into cluster's topic per
// data message published: the entries it took in beyond the data.
func (a *svArm) markersPerData(cluster string) float64 {
	if a.Data == 0 {
		return 0
	}
	return float64(a.In[cluster]-a.Data) / float64(a.Data)
}

// svSample is the excess of every arm at one moment (an arm whose stats
// could not be read is missing).
type svSample struct {
	At     time.Duration // since the load started
	Excess map[string]int64
}

type subsvsResult struct {
	Type             string // the application's subscription type (svTypes)
	Partitions, Rate int
	Warm, Load, Tail time.Duration
	Arms             []*svArm // built-in, sidecar
	Samples          []svSample
	// Window runs from the start of the load until the tail and the
	// probes are over; the admin counts are over it.
	Window time.Duration
	// Admin is the sidecar's admin requests per cluster over Window,
	// counted by the proxies; Startup before the load (start-up and the
	// settle pause); Self the sidecar's own admin_requests_total.
	Admin, Startup map[string]int64
	Self           map[string]float64
	Paths          map[string]map[string]int64
	Failed         int64 // sends of the load that failed
}

func (s *subsvsResult) arm(name string) *svArm {
	for _, a := range s.Arms {
		if a.Name == name {
			return a
		}
	}
	return &svArm{}
}

// excessDuring is arm's median excess over the samples of the load after
// its warm-up.
func (s *subsvsResult) excessDuring(arm string) (float64, bool) {
	var xs []float64
	for _, p := range s.Samples {
		if v, ok := p.Excess[arm]; ok && p.At >= s.Warm && p.At <= s.Load {
			xs = append(xs, float64(v))
		}
	}
	return median(xs), len(xs) > 0
}

// excessAt is arm's excess in the first sample at least d after the load
// stopped.
func (s *subsvsResult) excessAt(arm string, d time.Duration) (int64, bool) {
	for _, p := range s.Samples {
		if v, ok := p.Excess[arm]; ok && p.At >= s.Load+d {
			return v, true
		}
	}
	return 0, false
}

// adminPerMsg is the sidecar's admin requests (both clusters) per data
// message of the window.
func (s *subsvsResult) adminPerMsg() float64 {
	d := s.arm(armSidecar).Data
	if d == 0 {
		return 0
	}
	return float64(s.Admin["east"]+s.Admin["west"]) / float64(d)
}

// svNS is the namespace of the row's arm ns (nsSVBuiltin, nsSVSidecar)
// for application type typ.
func svNS(ns, typ string) string { return ns + "-" + typ }

// subsvs runs the row with an application of type typ; a broker restart
// meanwhile voids it.
func (e *env) subsvs(typ string) (*subsvsResult, error) {
	if _, ok := svTypes[typ]; !ok {
		return nil, fmt.Errorf("subsvs: no application type %q (have %s)", typ, strings.Join(svAllTypes, ","))
	}
	var res *subsvsResult
	err := e.attempt("replicated subscriptions side by side ("+typ+")", func() error {
		defer e.dropSubsvs(typ)
		var err error
		if res, err = e.subsvsOnce(typ); err == nil && e.restarted() {
			err = errRestarted
		}
		return err
	})
	return res, err
}

func (e *env) subsvsOnce(typ string) (*subsvsResult, error) {
	z := e.o.Sizes.SubsVs
	res := &subsvsResult{Type: typ, Partitions: z.Partitions, Rate: z.Rate, Warm: z.Warm, Load: z.Load, Tail: z.Tail}
	if err := e.subsvsSetup(typ, z.Partitions); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	arms := []*svArm{
		{Name: armBuiltin, topic: e.topic(svNS(nsSVBuiltin, typ), svTopic), app: newSubsApp()},
		{Name: armSidecar, topic: e.topic(svNS(nsSVSidecar, typ), svTopic), app: newSubsApp()},
	}
	res.Arms = arms
	closeApps, err := e.subsvsApps(ctx, typ, arms)
	defer closeApps()
	if err != nil {
		return nil, err
	}
	prox := map[string]*countingProxy{}
	for _, c := range []string{"east", "west"} {
		var err error
		if prox[c], err = newCountingProxy(e2e.Get(c).AdminURL); err != nil {
			return nil, err
		}
		defer prox[c].close()
	}
	sc, err := e.subsvsStart(typ, prox)
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	time.Sleep(e.o.Sizes.Settle)

	w, err := e.subsvsOpen(ctx, sc, prox, arms, res)
	if err != nil {
		return nil, err
	}
	e.subsvsRun(ctx, arms, res, w.start)
	if err := e.subsvsClose(ctx, sc, prox, arms, res, w); err != nil {
		return nil, err
	}
	e.subsvsLog(arms, res)
	if res.Failed > 0 {
		return nil, fmt.Errorf("subsvs: %d sends failed", res.Failed)
	}
	return res, nil
}

// subsvsApps opens each arm's application on east (one consumer of type
// typ acknowledging all it gets; the built-in's asks for its state to be
// replicated) and producer, then sends one message per partition of each
// arm before the sidecar starts: a partition's link opens with its first
// entry, and start-up then includes a first snapshot on every partition,
// as in the subs row. The returned func closes what was opened, also
// after an error.
func (e *env) subsvsApps(ctx context.Context, typ string, arms []*svArm) (func(), error) {
	var closers []func()
	closeApps := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for _, a := range arms {
		cons, err := e.east.Subscribe(pulsar.ConsumerOptions{
			Topic: a.topic, SubscriptionName: subsSub, Type: svTypes[typ],
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			ReplicateSubscriptionState:  a.Name == armBuiltin,
		})
		if err != nil {
			return closeApps, fmt.Errorf("subsvs: consumer on east %s: %w", a.topic, err)
		}
		closers = append(closers, cons.Close)
		go a.app.run(ctx, cons)
		if a.prod, err = e.east.CreateProducer(pulsar.ProducerOptions{Topic: a.topic, DisableBatching: true}); err != nil {
			return closeApps, fmt.Errorf("subsvs: producer on east %s: %w", a.topic, err)
		}
		p := a.prod
		closers = append(closers, func() { closeSoon(p) })
	}
	body := payload(time.Now(), 0)
	for _, a := range arms {
		for range e.o.Sizes.SubsVs.Partitions {
			if _, err := a.prod.Send(ctx, &pulsar.ProducerMessage{Payload: body}); err != nil {
				return closeApps, fmt.Errorf("subsvs: first messages on %s: %w", a.topic, err)
			}
		}
	}
	return closeApps, nil
}

// subsvsStart starts the sidecar of the subsvs row (its admin calls
// through the counting proxies) and waits until it copied every
// partition's first message and connected both ways.
func (e *env) subsvsStart(typ string, prox map[string]*countingProxy) (*sidecar, error) {
	parts := e.o.Sizes.SubsVs.Partitions
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(e.dir, "subsvs-"+typ+"-marker.key")
	if err := os.WriteFile(keyFile, []byte("bench-marker-key-0123456789abcdef"), 0o600); err != nil {
		return nil, err
	}
	sc, err := e.startSidecar(e.o.Binary, "subsvs-"+typ, listen,
		subsConfigFor(listen, keyFile, e.ns(svNS(nsSVSidecar, typ)), "topics: ["+svTopic+"]", 0, prox))
	if err != nil {
		return nil, err
	}
	if err := sc.waitReady(5 * time.Minute); err != nil {
		sc.stop()
		return nil, err
	}
	if _, err := sc.waitPairMetric("east", float64(parts), 3*time.Minute, "geo_sidecar_replicated_messages_total"); err != nil {
		sc.stop()
		return nil, err
	}
	if _, err := sc.waitMetric("geo_sidecar_connected_partitions", float64(2*parts), 30*time.Second); err != nil {
		e.logf("subsvs: %v (measured all the same)", err)
	}
	return sc, nil
}

// svWindow is what the subsvs row reads when its window opens, to
// subtract when it closes.
type svWindow struct {
	start time.Time
	in    []map[string]int64          // each arm's entries in, by cluster
	proxy map[string]map[string]int64 // admin requests by cluster and path
	admin map[string]float64          // the sidecar's own count, by cluster
	app   [][2]int64                  // each arm's application: data, markers
}

// subsvsOpen opens the window: the counters it starts from, and the
// sidecar's start-up admin requests (res.Startup).
func (e *env) subsvsOpen(ctx context.Context, sc *sidecar, prox map[string]*countingProxy, arms []*svArm, res *subsvsResult) (*svWindow, error) {
	z := e.o.Sizes.SubsVs
	w := &svWindow{in: e.subsvsIn(ctx, arms)}
	w.proxy = map[string]map[string]int64{"east": prox["east"].snapshot(), "west": prox["west"].snapshot()}
	var err error
	if w.admin, err = sc.metricBy("geo_sidecar_admin_requests_total", "cluster"); err != nil {
		return nil, err
	}
	res.Startup = map[string]int64{}
	for c, m := range w.proxy {
		for _, v := range m {
			res.Startup[c] += v
		}
	}
	w.app = make([][2]int64, len(arms))
	for i, a := range arms {
		w.app[i] = [2]int64{a.app.data.Load(), a.app.markers.Load()}
	}
	e.logf("subsvs: %s application, %d partitions per arm, %d msg/s per arm on east for %s, then %s of tail (sidecar start-up: %d admin requests to east, %d to west)",
		res.Type, z.Partitions, z.Rate, z.Load, z.Tail, res.Startup["east"], res.Startup["west"])
	w.start = time.Now()
	return w, nil
}

// subsvsRun loads both arms for Load, probes them, and samples them
// every svEvery until the tail is over (res.Samples, res.Failed).
func (e *env) subsvsRun(ctx context.Context, arms []*svArm, res *subsvsResult, start time.Time) {
	z := e.o.Sizes.SubsVs
	var failed atomic.Int64
	lctx, lstop := context.WithTimeout(ctx, z.Load)
	defer lstop()
	var wg sync.WaitGroup
	for _, a := range arms {
		wg.Add(1)
		go func() { defer wg.Done(); a.load(lctx, z.Rate, &failed) }()
	}
	var pwg sync.WaitGroup
	for _, a := range arms {
		pwg.Add(1)
		go func() { defer pwg.Done(); a.Probes = e.subsvsProbes(ctx, a, z, start) }()
	}
	// Samples until the tail is over.
	for t := time.Now(); ; t = t.Add(svEvery) {
		time.Sleep(time.Until(t))
		s := e.subsvsSample(ctx, arms, start)
		res.Samples = append(res.Samples, s)
		if s.At >= z.Load+z.Tail {
			break
		}
	}
	wg.Wait()
	pwg.Wait()
	res.Failed = failed.Load()
}

// subsvsClose closes the window: what each arm and the sidecar's admin
// calls did since it opened.
func (e *env) subsvsClose(ctx context.Context, sc *sidecar, prox map[string]*countingProxy, arms []*svArm, res *subsvsResult, w *svWindow) error {
	in1 := e.subsvsIn(ctx, arms)
	a1, err := sc.metricBy("geo_sidecar_admin_requests_total", "cluster")
	if err != nil {
		return err
	}
	res.Window = time.Since(w.start)
	res.Admin, res.Self, res.Paths = map[string]int64{}, map[string]float64{}, map[string]map[string]int64{}
	for _, c := range []string{"east", "west"} {
		res.Self[c] = a1[c] - w.admin[c]
		res.Paths[c] = map[string]int64{}
		for k, v := range prox[c].snapshot() {
			if v -= w.proxy[c][k]; v > 0 {
				res.Paths[c][k] = v
				res.Admin[c] += v
			}
		}
	}
	for i, a := range arms {
		a.Data = a.sent.Load()
		a.In = map[string]int64{}
		for _, c := range []string{"east", "west"} {
			a.In[c] = in1[i][c] - w.in[i][c]
		}
		a.AppData, a.AppMark = a.app.data.Load()-w.app[i][0], a.app.markers.Load()-w.app[i][1]
	}
	return nil
}

// subsvsLog logs each arm's figures and the sidecar's admin requests.
func (e *env) subsvsLog(arms []*svArm, res *subsvsResult) {
	z := e.o.Sizes.SubsVs
	for _, a := range arms {
		during, _ := res.excessDuring(a.Name)
		after, _ := res.excessAt(a.Name, svAfter)
		tail, _ := res.excessAt(a.Name, z.Tail)
		e.logf("subsvs: %s: excess during the load %.0f, %s after %d, %s after %d; %d sent, entries in east %d west %d; the application got %d data, %d markers; follow p50 %s p99 %s",
			a.Name, during, svAfter, after, z.Tail, tail, a.Data, a.In["east"], a.In["west"], a.AppData, a.AppMark,
			a.Probes.quantile(0.5), a.Probes.quantile(0.99))
	}
	e.logf("subsvs: sidecar admin requests over %s: east %d, west %d (its own count %.0f / %.0f): %.3f per replicated message",
		res.Window.Round(time.Second), res.Admin["east"], res.Admin["west"], res.Self["east"], res.Self["west"], res.adminPerMsg())
	for _, c := range []string{"east", "west"} {
		for _, k := range topPaths(res.Paths[c], 5) {
			e.logf("subsvs:   %s %6d  %s", c, res.Paths[c][k], k)
		}
	}
}

// load publishes rate messages per second on a's topic (round-robin over
// its partitions: a non-batching producer) until ctx ends.
func (a *svArm) load(ctx context.Context, rate int, failed *atomic.Int64) {
	const tick = 20 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	body := payload(time.Now(), 0)
	// Counted when the broker confirms: a send still in the client when
	// the load's context ends is cancelled, never published (the row's
	// "sent" was a few above what east held, and what its application
	// got, in some runs).
	cb := func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
		switch {
		case err == nil:
			a.sent.Add(1)
		case ctx.Err() == nil:
			failed.Add(1)
		}
	}
	start := time.Now()
	for k := 0; ; {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for due := int(now.Sub(start).Seconds() * float64(rate)); k < due; k++ {
				a.prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: body}, cb)
			}
		}
	}
}

// subsvsProbes runs z.Probes follow-latency probes on a, spread evenly
// over the load after its warm-up, each on a partition of its own
// (round-robin), with a producer of its own on that partition.
func (e *env) subsvsProbes(ctx context.Context, a *svArm, z subsvsSizes, start time.Time) probeSet {
	set := probeSet{Phase: a.Name}
	if z.Probes <= 0 {
		return set
	}
	step := (z.Load - z.Warm) / time.Duration(z.Probes)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range z.Probes {
		time.Sleep(time.Until(start.Add(z.Warm + time.Duration(i)*step)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := fmt.Sprintf("%s-partition-%d", a.topic, (i*7)%z.Partitions)
			d, err := e.subsvsProbe(ctx, a, part, probeTag(i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				set.Failed++
				if set.Failed <= 2 {
					e.logf("subsvs: %s probe: %v", a.Name, err)
				}
				return
			}
			set.Lat = append(set.Lat, d)
		}()
	}
	wg.Wait()
	slices.Sort(set.Lat)
	return set
}

func (e *env) subsvsProbe(ctx context.Context, a *svArm, partition string, tag uint64) (time.Duration, error) {
	p, err := e.east.CreateProducer(pulsar.ProducerOptions{Topic: partition, DisableBatching: true})
	if err != nil {
		return 0, fmt.Errorf("probe producer on east %s: %w", partition, err)
	}
	defer closeSoon(p)
	a.sent.Add(1)
	return e.probe(ctx, a.app, p, partition, tag)
}

// svStats is what the row reads of a topic's partitioned-stats.
type svStats struct {
	In   int64 `json:"msgInCounter"`
	Subs map[string]struct {
		Backlog int64 `json:"msgBacklog"`
	} `json:"subscriptions"`
}

// subsvsSample reads every arm's excess: west's backlog of the
// subscription minus east's, both read at once.
func (e *env) subsvsSample(ctx context.Context, arms []*svArm, start time.Time) svSample {
	s := svSample{Excess: map[string]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range arms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st [2]svStats
			var errs [2]error
			var w2 sync.WaitGroup
			for i, c := range []string{"east", "west"} {
				w2.Add(1)
				go func() { defer w2.Done(); errs[i] = e.partitionedStats(ctx, c, a.topic, &st[i]) }()
			}
			w2.Wait()
			if errs[0] != nil || errs[1] != nil {
				return
			}
			mu.Lock()
			s.Excess[a.Name] = st[1].Subs[subsSub].Backlog - st[0].Subs[subsSub].Backlog
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.At = time.Since(start)
	return s
}

// subsvsIn reads every arm's msgInCounter per cluster (0 where it could
// not be read: the report then shows a nonsense marker count, not a
// silent gap; the log says why).
func (e *env) subsvsIn(ctx context.Context, arms []*svArm) []map[string]int64 {
	out := make([]map[string]int64, len(arms))
	for i, a := range arms {
		out[i] = map[string]int64{}
		for _, c := range []string{"east", "west"} {
			var st svStats
			if err := e.partitionedStats(ctx, c, a.topic, &st); err != nil {
				e.logf("subsvs: %v", err)
			}
			out[i][c] = st.In
		}
	}
	return out
}

// subsvsSetup creates both namespaces of type typ, the topic of each arm
// on both clusters and subscription app on each at the earliest position
// (marked replicated for the built-in).
func (e *env) subsvsSetup(typ string, partitions int) error {
	builtin, sidecar := svNS(nsSVBuiltin, typ), svNS(nsSVSidecar, typ)
	if err := e2e.Script("geo", "east", "west", e.ns(builtin)); err != nil {
		return err
	}
	for _, c := range []string{"east", "west"} {
		adm := e.admin(c)
		if err := adm.Namespaces().CreateNamespace(e.ns(sidecar)); err != nil && !isConflict(err) {
			return fmt.Errorf("create namespace %s on %s: %w", e.ns(sidecar), c, err)
		}
		cl, err := adm.Namespaces().GetNamespaceReplicationClusters(e.ns(sidecar))
		if err != nil {
			return fmt.Errorf("replication clusters of %s on %s: %w", e.ns(sidecar), c, err)
		}
		if len(cl) != 1 {
			return fmt.Errorf("namespace %s on %s replicates to %v; want its own cluster only", e.ns(sidecar), c, cl)
		}
	}
	for _, ns := range []string{builtin, sidecar} {
		topic := e.topic(ns, svTopic)
		if err := e.createTopic(topic, partitions, "east", "west"); err != nil {
			return err
		}
		path := "/admin/v2/" + strings.Replace(topic, "://", "/", 1) + "/subscription/" + subsSub
		if ns == builtin {
			path += "?replicated=true"
		}
		for _, c := range []string{"east", "west"} {
			err := e.adminDo(c, http.MethodPut, path, map[string]int64{"ledgerId": -1, "entryId": -1, "partitionIndex": -1})
			if err != nil && !isConflict(err) {
				return fmt.Errorf("subscription %s on %s: %w", subsSub, c, err)
			}
		}
	}
	return nil
}

// dropSubsvs deletes the topics and namespaces of type typ's run on both
// clusters (Pulsar's replication of the built-in's first: a replicated
// namespace cannot be deleted), unless -keep.
func (e *env) dropSubsvs(typ string) {
	builtin, sidecar := svNS(nsSVBuiltin, typ), svNS(nsSVSidecar, typ)
	if e.o.Keep {
		e.logf("subsvs: keeping %s and %s (-keep)", e.ns(builtin), e.ns(sidecar))
		return
	}
	for _, c := range []string{"east", "west"} {
		_ = e.admin(c).Namespaces().SetNamespaceReplicationClusters(e.ns(builtin), []string{c})
	}
	var failed []string
	for _, c := range []string{"east", "west"} {
		for _, ns := range []string{builtin, sidecar} {
			failed = append(failed, e.dropTopics(c, ns)...)
			if err := e.admin(c).Namespaces().DeleteNamespace(e.ns(ns)); err != nil && !isNotFound(err) {
				failed = append(failed, fmt.Sprintf("namespace %s on %s: %v", e.ns(ns), c, err))
			}
		}
	}
	if len(failed) > 0 {
		e.logf("subsvs: cleanup left %d thing(s) behind: %s", len(failed), strings.Join(failed, "; "))
	}
}

// ---- report ---------------------------------------------------------------

// markdown is the row's part of the summary.
func (s *subsvsResult) markdown() string {
	var b strings.Builder
	bi, sc := s.arm(armBuiltin), s.arm(armSidecar)
	fmt.Fprintf(&b, "\nReplicated subscriptions side by side, **%s** application: one %d-partition topic per arm, %s msg/s per arm published on east for %s (non-batching, round-robin), an application on east (one %s consumer) acknowledging subscription `%s` at once; the built-in's namespace replicated by Pulsar (replicated subscription state on), the sidecar's by one geo-sidecar east↔west with `subscriptions: [%s]`, both at once on the same clusters. Excess: west's `%s` backlog minus east's (what a failover would deliver again).\n\n",
		s.Type, s.Partitions, num(float64(s.Rate)), s.Load, s.Type, subsSub, subsSub, subsSub)
	b.WriteString("| metric | built-in | sidecar | sidecar / built-in | goal |\n|---|---:|---:|---:|---|\n")
	ex := func(v float64, ok bool) string {
		if !ok {
			return "—"
		}
		return fmt.Sprintf("%s (%.2f s of traffic)", num(v), v/float64(s.Rate))
	}
	if len(s.Samples) > 0 {
		p := s.Samples[0]
		vb, okb := p.Excess[armBuiltin]
		vs, oks := p.Excess[armSidecar]
		fmt.Fprintf(&b, "| excess as the load starts (the first messages and start-up's markers) | %s | %s | %s | |\n", ex(float64(vb), okb), ex(float64(vs), oks), exRatio(float64(vs), float64(vb)))
	}
	db, okb := s.excessDuring(armBuiltin)
	ds, oks := s.excessDuring(armSidecar)
	fmt.Fprintf(&b, "| excess during the load, median | %s | %s | %s | ≤ 1.0× built-in |\n", ex(db, okb), ex(ds, oks), exRatio(ds, db))
	for _, d := range []time.Duration{svAfter, s.Tail} {
		vb, okb := s.excessAt(armBuiltin, d)
		vs, oks := s.excessAt(armSidecar, d)
		goal := ""
		if d == svAfter {
			goal = "≤ 1.0× built-in"
		}
		fmt.Fprintf(&b, "| excess %s after the load | %s | %s | %s | %s |\n", d, ex(float64(vb), okb), ex(float64(vs), oks), exRatio(float64(vs), float64(vb)), goal)
	}
	fmt.Fprintf(&b, "| admin requests per replicated message (east + west) | 0 | %.3f (%s + %s over %s, %s messages) | | ≤ 0.02 |\n",
		s.adminPerMsg(), num(float64(s.Admin["east"])), num(float64(s.Admin["west"])), s.Window.Round(time.Second), num(float64(sc.Data)))
	fmt.Fprintf(&b, "| marker entries written per data entry, east / west | %.3f / %.3f | %.3f / %.3f | | |\n",
		bi.markersPerData("east"), bi.markersPerData("west"), sc.markersPerData("east"), sc.markersPerData("west"))
	fmt.Fprintf(&b, "| markers a plain consumer on east sees (beside data messages) | %s (%s) | %s (%s) | | |\n",
		num(float64(bi.AppMark)), num(float64(bi.AppData)), num(float64(sc.AppMark)), num(float64(sc.AppData)))
	lat := func(p probeSet) string {
		s := fmt.Sprintf("%s / %s", p.quantile(0.5), p.quantile(0.99))
		if p.Failed > 0 {
			s += fmt.Sprintf(" (%d of %d over %s)", p.Failed, p.Failed+len(p.Lat), probeTimeout)
		}
		return s
	}
	fmt.Fprintf(&b, "| follow latency p50 / p99 (%d probes) | %s | %s | | |\n", len(bi.Probes.Lat)+bi.Probes.Failed, lat(bi.Probes), lat(sc.Probes))
	return b.String()
}

// exRatio is sidecar/built-in of an excess; both 0 is level.
func exRatio(sc, bi float64) string {
	if bi == 0 && sc == 0 {
		return "1.00×"
	}
	if bi <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", sc/bi)
}

// targets adds the row's goals (issue 23) through line.
func (s *subsvsResult) targets(line func(ok bool, format string, args ...any)) {
	per := s.adminPerMsg()
	line(per <= 0.02, "replicated subscriptions (%s application), admin requests per replicated message ≤ 0.02 (built-in: 0): %.3f", s.Type, per)
	db, okb := s.excessDuring(armBuiltin)
	ds, oks := s.excessDuring(armSidecar)
	line(okb && oks && ds <= db, "replicated subscriptions (%s application), excess during the load ≤ 1.0× built-in: %s (%s vs %s)", s.Type, exRatio(ds, db), num(ds), num(db))
	vb, okb := s.excessAt(armBuiltin, svAfter)
	vs, oks := s.excessAt(armSidecar, svAfter)
	line(okb && oks && vs <= vb, "replicated subscriptions (%s application), excess %s after the load ≤ 1.0× built-in: %s (%d vs %d)", s.Type, svAfter, exRatio(float64(vs), float64(vb)), vs, vb)
}

// rounds is the row's detail: the excess over time and the sidecar's
// admin requests by shape.
func (s *subsvsResult) rounds() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Replicated subscriptions side by side, %s application: the excess over time (the load stops at %s):\n\n", s.Type, s.Load)
	b.WriteString("| since the load started | built-in | sidecar |\n|---:|---:|---:|\n")
	every := max(1, len(s.Samples)/30)
	for i, p := range s.Samples {
		if i%every != 0 && i != len(s.Samples)-1 {
			continue
		}
		cell := func(arm string) string {
			if v, ok := p.Excess[arm]; ok {
				return num(float64(v))
			}
			return "—"
		}
		fmt.Fprintf(&b, "| %.0f s | %s | %s |\n", p.At.Seconds(), cell(armBuiltin), cell(armSidecar))
	}
	fmt.Fprintf(&b, "\nThe sidecar's admin requests by shape over the %s window, %s application (start-up before it: %s to east, %s to west):\n\n",
		s.Window.Round(time.Second), s.Type, num(float64(s.Startup["east"])), num(float64(s.Startup["west"])))
	b.WriteString("| cluster | requests | per replicated message | request |\n|---|---:|---:|---|\n")
	d := max(s.arm(armSidecar).Data, 1)
	for _, c := range []string{"east", "west"} {
		for _, k := range topPaths(s.Paths[c], 8) {
			fmt.Fprintf(&b, "| %s | %s | %.3f | `%s` |\n", c, num(float64(s.Paths[c][k])), float64(s.Paths[c][k])/float64(d), k)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// method describes how the row is measured.
func (s *subsvsResult) method() string {
	return fmt.Sprintf("- Replicated subscriptions side by side (run once per application type: %[13]s): two namespaces of the run's tenant per type, `%[1]s-<type>` replicated east↔west by Pulsar (`cluster.sh geo`) and `%[2]s-<type>` local-only on each cluster, copied east↔west by one geo-sidecar (`subscriptions: [%[3]s]`, default settings, admin URLs through a counting proxy per cluster). Each holds a topic of %[4]d partitions, created on both clusters with subscription `%[3]s` at the earliest position on each (the built-in's with `replicated=true`); on east an application consumer of the run's type (Exclusive, Failover or Shared; the built-in's with ReplicateSubscriptionState) acknowledges everything it receives, markers too; west has no consumer. Both arms run at once: %[5]s msg/s each, published on east by a non-batching producer (one entry per message, round-robin over the partitions), for %[6]s. Every %[7]s the subscription's msgBacklog (entries: marker entries count too) is read on both clusters (partitioned-stats); the excess is west's minus east's (marker entries past the mark-delete position count on both arms: on west neither system's last markers are ever acknowledged, hence a floor of a few entries per partition that the first sample, taken as the load starts, shows). During the load: the median of the samples after %[8]s of warm-up; after: the first sample %[9]s and %[10]s after the load stopped. Admin requests per replicated message: the requests the proxies passed from the start of the load until the tail and the probes were over, divided by the messages published in that time (start-up reported apart); the built-in makes none. Marker entries written: the growth of msgInCounter on each cluster's topic minus the data messages, per data message. Follow latency: %[11]d probes per arm spread over the load, each a tagged message on one partition, from the application's acknowledgement until west's mark-delete position (internal stats, polled every %[12]s) passed its copy. Goals (issue 23): at most 0.02 admin requests per replicated message; an excess at most the built-in's during the load and %[9]s after.\n",
		nsSVBuiltin, nsSVSidecar, subsSub, s.Partitions, num(float64(s.Rate)), s.Load, svEvery, s.Warm, svAfter, s.Tail, len(s.arm(armBuiltin).Probes.Lat)+s.arm(armBuiltin).Probes.Failed, probePoll, strings.Join(svAllTypes, ", "))
}
