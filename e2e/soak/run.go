package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
	"github.com/geo-sidecar/geo-sidecar/e2e/wan"
)

// Options say what one soak run does.
type Options struct {
	Seed     int64
	Duration time.Duration // load and faults; the drain and the check come after
	Rate     int           // messages per second on each cluster
	// LogLevel is the sidecars' --log-level (SOAK_LOG_LEVEL, default
	// info): debug traces each session's and sync's steps, to find who
	// held what when a seed shows a fault's effect.
	LogLevel string
	// Faults are the kinds of faults drawn (PlanOf); nil: every kind.
	// SubsSettle bounds the wait for the subscriptions after the drain
	// (0: subsSettle); the goal is flagged, not failed, so a short run
	// may wait less.
	Faults     []Kind
	SubsSettle time.Duration
	// North adds the one-way pair east->north (topologyOf) and, with it,
	// the WAN proxy between east's b instance and north and the WAN
	// faults on that link.
	North bool
	// Reconfig adds the config change (KindReconfig): a fifth topic,
	// produced from the start, under the sidecars' topic_patterns only
	// from reconfigAt on, by a rolling restart.
	Reconfig bool
	Drain    time.Duration // longest wait for the sidecars to copy the rest
	Binary   string        // geo-sidecar, built by the caller
	Out      string        // directory for the report and the sidecars' logs
	Log      io.Writer     // progress
}

// pair is the active-active pair the runner soaks: each replicates into
// the other. The run's topology (topologyOf) may add north.
var pair = []string{"east", "west"}

// applied is one fault as it was applied: wall-clock start and end, and
// the error applying or undoing it, if any.
type applied struct {
	Event
	Start, End time.Time
	Err        error
}

// Result is what a run found.
type Result struct {
	Topo       topology
	NS         string
	Start      time.Time
	Timeline   []applied
	Rows       []Row
	Findings   []Finding
	Partitions []PartitionRead
	Produced   map[string][2]int64 // cluster -> acknowledged, failed
	Large      map[string][2]int64 // cluster -> large messages acknowledged, their bytes
	Drained    bool
	DrainTook  time.Duration
	Verify     []VerifyRun    // verify --complete per pair and load topic, after the drain
	RSS        []RSSJudgement // per instance, its longest life
	Subs       SubsResult     // replicated subscriptions' backlogs after the drain
	Counted    []CountedSend  // the sidecars' Warn lines of entries sent under a counted sequence id
}

// Failed says whether the run fails (exit status 1): a finding, no
// drain, a verify run that did not exit 0 or disagrees with the checker,
// or memory that grew after a full warm-up.
func (r *Result) Failed() bool {
	if len(r.Findings) > 0 || !r.Drained {
		return true
	}
	for _, v := range r.Verify {
		if v.Problem() != "" {
			return true
		}
	}
	for _, j := range r.RSS {
		if j.Fails {
			return true
		}
	}
	return false
}

// Run soaks the pair: it makes a namespace of its own on both clusters
// (deduplication on), starts two sidecar instances per source cluster,
// produces load on both sides and applies the seeded schedule until
// o.Duration, then restores every sidecar and deduplication, waits for
// the copy to drain (at most o.Drain), stops the sidecars and checks
// every partition on both clusters with the Java reader. Every loop ends
// by o.Duration or its own bound; ctx stops the whole run early.
func Run(ctx context.Context, o Options) (*Result, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Log, "%s  "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
	topo := topologyOf(o.North)
	res := &Result{Topo: topo, Produced: map[string][2]int64{}, Large: map[string][2]int64{}}
	admins := map[string]pulsaradmin.Client{}
	clients := map[string]pulsar.Client{}
	for _, c := range topo.Clusters {
		a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: e2e.Get(c).AdminURL})
		if err != nil {
			return nil, err
		}
		admins[c] = a
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: e2e.Get(c).ServiceURL, OperationTimeout: 30 * time.Second,
			ConnectionTimeout: 5 * time.Second, Logger: pulsarlog.DefaultNopLogger()})
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		clients[c] = cl
	}

	ns, err := makeNamespace(admins, topo.Clusters, o.Seed)
	if err != nil {
		return nil, err
	}
	res.NS = ns
	logf("namespace %s on %s, deduplication on", ns, strings.Join(topo.Clusters, ", "))
	if err := createAppSubs(admins, topo.Clusters, ns); err != nil {
		return nil, err
	}
	// The WAN proxy's links to the cluster behind it, which the b
	// instance of its source reaches only through them.
	var links wan.Links
	var behind e2e.Cluster
	if topo.WAN != "" {
		if links, behind, err = e2e.OpenWAN(topo.WAN); err != nil {
			return nil, err
		}
		defer links.Close()
		logf("WAN proxy in front of %s: %s reaches it through %s and %s", topo.WAN, topo.WANInstance(), behind.ServiceURL, behind.AdminURL)
	}

	key := filepath.Join(o.Out, "marker.key")
	if err := os.WriteFile(key, fmt.Appendf(nil, "soak-marker-key-%d-0123456789abcdef\n", o.Seed), 0o600); err != nil {
		return nil, err
	}
	var insts []*instance
	byName := map[string]*instance{}
	reconfigs := map[string]string{} // instance -> its config after the config change
	for _, src := range topo.Sources() {
		for _, suffix := range []string{"a", "b"} {
			listen, err := e2e.FreeLoopbackAddr()
			if err != nil {
				return nil, err
			}
			name := src + "-" + suffix
			cfg := filepath.Join(o.Out, name+".yaml")
			text := sidecarConfig(listen, key, ns, topo, src, suffix, behind, topicPatterns(o.Reconfig, false))
			if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
				return nil, err
			}
			in := &instance{Name: name, Binary: o.Binary, Config: cfg, Listen: listen, LogPath: filepath.Join(o.Out, name+".log"), LogLevel: o.LogLevel}
			if o.Reconfig {
				reconfigs[name] = sidecarConfig(listen, key, ns, topo, src, suffix, behind, topicPatterns(true, true))
			}
			insts = append(insts, in)
			byName[name] = in
		}
	}
	defer func() {
		for _, in := range insts {
			in.Signal(syscall.SIGTERM)
		}
	}()
	for _, in := range insts {
		if err := in.Start(); err != nil {
			return nil, err
		}
		logf("sidecar %s ready on %s (log %s)", in.Name, in.Listen, in.LogPath)
	}
	sampler := newRSSSampler(insts)
	rssCtx, rssStop := context.WithCancel(ctx)
	rssDone := make(chan struct{})
	go func() { defer close(rssDone); sampler.Run(rssCtx) }()
	stopRSS := func() {
		rssStop()
		<-rssDone
		res.RSS = judgeRSS(sampler.Lives())
	}
	defer rssStop()

	// The process faults hit the pair's instances (north's, which only
	// answer markers, are left alone), and the clusters' faults the pair:
	// the same targets as before north, so a seed keeps its faults.
	targets := Targets{Clusters: topo.Loaded}
	for _, in := range insts {
		if src, _, _ := strings.Cut(in.Name, "-"); topo.loaded(src) {
			targets.Sidecars = append(targets.Sidecars, in.Name)
		}
	}
	if topo.WAN != "" {
		targets.Links = []string{topo.WANInstance() + " " + topo.WAN}
	}
	for _, tk := range loadTopics {
		targets.Topics = append(targets.Topics, tk.Short)
	}
	plan := PlanOf(o.Seed, o.Duration, targets, o.Faults)
	if o.Reconfig {
		plan = append(plan, Event{At: reconfigAt(o.Duration), Kind: KindReconfig, Target: "every instance, +" + addedTopic.Short})
		sort.SliceStable(plan, func(i, j int) bool { return plan[i].At < plan[j].At })
	}
	topics := runTopics(o.Reconfig)
	logf("%d faults planned over %s", len(plan), o.Duration)

	res.Start = time.Now()
	runCtx, stop := context.WithDeadline(ctx, res.Start.Add(o.Duration))
	defer stop()
	apps, err := StartApps(runCtx, clients, ns, o.Seed)
	if err != nil {
		return nil, err
	}
	logf("applications: %s", appsSummary())
	loads := map[string]*Load{}
	var wg sync.WaitGroup
	loadErrs := make(chan error, len(topo.Loaded))
	for _, c := range topo.Loaded {
		l := &Load{Cluster: c, Client: clients[c], NS: ns, Rate: o.Rate, LateAt: res.Start.Add(lateAt(o.Duration)), Topics: topics, sent: Sent{}}
		loads[c] = l
		wg.Add(1)
		go func() { defer wg.Done(); loadErrs <- l.Run(runCtx) }()
	}
	logf("load: %d msg/s on each of %s; the late topics' from %s", o.Rate, strings.Join(topo.Loaded, ", "), fmtOffset(lateAt(o.Duration)))
	late := applied{Event: Event{At: lateAt(o.Duration), Kind: KindNewTopic, Target: lateNames()}, Start: res.Start.Add(lateAt(o.Duration))}
	late.End = late.Start
	res.Timeline = append(res.Timeline, late)

	var mu sync.Mutex
	var fwg sync.WaitGroup
	for _, ev := range plan {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			select {
			case <-runCtx.Done():
				return
			case <-time.After(time.Until(res.Start.Add(ev.At))):
			}
			a := applied{Event: ev, Start: time.Now()}
			if ev.Kind == KindReconfig {
				a.Err = reconfigure(runCtx, insts, reconfigs)
			} else {
				a.Err = apply(runCtx, ev, byName, admins, loads, links, ns)
			}
			a.End = time.Now()
			logf("fault %s done (%v)", ev, errOrOK(a.Err))
			mu.Lock()
			res.Timeline = append(res.Timeline, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(loadErrs)
	var loadErr error
	for err := range loadErrs {
		loadErr = errors.Join(loadErr, err)
	}
	fwg.Wait()
	apps.Stop()
	res.Subs.Received, res.Subs.Acked = apps.received.Load(), apps.acked.Load()
	sortTimeline(res.Timeline)
	for c, l := range loads {
		res.Produced[c] = [2]int64{l.produced.Load(), l.failed.Load()}
		res.Large[c] = [2]int64{l.large.Load(), l.largeBytes.Load()}
	}
	logf("load stopped: %v", res.Produced)
	if loadErr != nil {
		return res, loadErr
	}

	// Every instance up, the WAN healed and deduplication on again
	// before the drain (a fault cut short by the end of the run may have
	// left one down).
	if links != nil {
		links.Heal()
	}
	for _, in := range insts {
		if !in.Running() {
			if err := in.Start(); err != nil {
				return res, err
			}
		}
	}
	for _, c := range topo.Clusters {
		if err := admins[c].Namespaces().SetDeduplicationStatus(ns, true); err != nil {
			return res, fmt.Errorf("deduplication on for %s on %s: %w", ns, c, err)
		}
	}

	drainStart := time.Now()
	res.Drained = waitDrain(ctx, admins, topo.Clusters, ns, o.Drain, logf)
	res.DrainTook = time.Since(drainStart)
	logf("drain: %v after %s", res.Drained, res.DrainTook.Round(time.Second))
	// The subscriptions, while the sidecars still run: the applications
	// stopped with the load, so both sides' positions stay where they
	// are and the targets' follow the last snapshots.
	rec, ack := res.Subs.Received, res.Subs.Acked
	settle := o.SubsSettle
	if settle <= 0 {
		settle = subsSettle
	}
	res.Subs = waitSubs(ctx, admins, topo, ns, o.Rate, settle)
	res.Subs.Received, res.Subs.Acked = rec, ack
	if res.Subs.Updates, err = readUpdateCounters(insts); err != nil {
		logf("subscriptions: %v", err)
	}
	logf("subscriptions after %s: within the goal %v; source/target backlog %s", res.Subs.After.Round(time.Second), res.Subs.Settled, subsSummary(res.Subs.Rows))
	stopRSS()
	for _, in := range insts {
		in.Signal(syscall.SIGTERM)
	}

	// verify --complete on every pair and topic, with the source's first
	// instance's config (every instance of a source has the same pair).
	for _, p := range topo.Verified {
		src, dst := p[0], p[1]
		for _, tk := range topics {
			v := runVerify(ctx, o.Binary, byName[src+"-a"].Config, ns, tk, src, dst)
			logf("verify %s %s->%s: exit %d in %s", tk.Short, v.From, v.To, v.Exit, v.Took.Round(100*time.Millisecond))
			res.Verify = append(res.Verify, v)
		}
	}

	reader, err := newJavaReader(filepath.Join(o.Out, "java-reader.log"))
	if err != nil {
		return res, err
	}
	var reads []Read
	for _, c := range topo.Clusters {
		parts, err := partitions(admins[c], ns)
		if err != nil {
			return res, err
		}
		r, done, err := reader.read(c, parts)
		if err != nil {
			return res, err
		}
		logf("read %d partitions on %s: %d tagged messages", len(parts), c, len(r))
		reads = append(reads, r...)
		res.Partitions = append(res.Partitions, done...)
	}
	sent := Sent{}
	for _, l := range loads {
		for k, v := range l.sent {
			sent[k] = v
		}
	}
	res.Rows, res.Findings = Check(reads, sent, topo.Reach())
	logs := map[string]string{}
	for _, in := range insts {
		logs[in.Name] = in.LogPath
	}
	if res.Counted, err = scanCountedFiles(logs); err != nil {
		return res, err
	}
	sort.Slice(res.Counted, func(i, j int) bool { return res.Counted[i].At.Before(res.Counted[j].At) })
	for i := range res.Verify {
		res.Verify[i].withChecker(res.Rows, ns)
	}
	return res, nil
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// apply applies one fault and, for the faults that last, waits For and
// undoes it (a sidecar's or broker's start, deduplication on, the
// burst's end); the undo
// happens even when ctx ends meanwhile, so that nothing stays broken.
func apply(ctx context.Context, ev Event, byName map[string]*instance, admins map[string]pulsaradmin.Client, loads map[string]*Load, links wan.Links, ns string) error {
	wait := func() {
		select {
		case <-ctx.Done():
		case <-time.After(ev.For):
		}
	}
	switch ev.Kind {
	case KindKill, KindTerm:
		in := byName[ev.Target]
		sig := syscall.SIGKILL
		if ev.Kind == KindTerm {
			sig = syscall.SIGTERM
		}
		if !in.Signal(sig) {
			return fmt.Errorf("%s was not running", in.Name)
		}
		wait()
		return in.Start()
	case KindUnload:
		cluster, short, _ := strings.Cut(ev.Target, " ")
		tn, err := utils.GetTopicName("persistent://" + ns + "/" + short)
		if err != nil {
			return err
		}
		return admins[cluster].Topics().Unload(*tn)
	case KindDedupOff:
		if err := admins[ev.Target].Namespaces().SetDeduplicationStatus(ns, false); err != nil {
			return err
		}
		wait()
		return admins[ev.Target].Namespaces().SetDeduplicationStatus(ns, true)
	case KindBurst:
		loads[ev.Target].Burst(time.Now().Add(ev.For))
		wait()
		return nil
	case KindLinkCut, KindHalfOpen, KindSlowLink:
		// The proxy ends the fault by itself after For; waiting for it
		// keeps the link's next fault (planWAN) after this one's end.
		if links == nil {
			return fmt.Errorf("no WAN link for %s", ev.Target)
		}
		switch ev.Kind {
		case KindLinkCut:
			links.Cut(ev.For)
		case KindHalfOpen:
			links.Blackhole(ev.For)
		case KindSlowLink:
			links.Slow(slowFraction, ev.For)
		}
		wait()
		if ctx.Err() != nil {
			links.Heal()
		}
		return nil
	case KindRestart:
		// The lock waits for the other lane's test on the cluster (the
		// fault then comes late; the timeline shows when it was
		// applied). The broker starts again even when ctx ended
		// meanwhile: the drain and the check need it.
		release, err := e2e.HoldClustersExclusive(ev.Target)
		if err != nil {
			return err
		}
		defer release()
		if err := e2e.Kill(ev.Target); err != nil {
			return errors.Join(fmt.Errorf("kill %s: %w", ev.Target, err), e2e.Up(ev.Target))
		}
		wait()
		if err := e2e.Up(ev.Target); err != nil {
			return fmt.Errorf("start %s again: %w", ev.Target, err)
		}
		return nil
	}
	return fmt.Errorf("fault %s not wired", ev.Kind)
}

// waitDrain polls every subscription's backlog on every partition of ns
// on both clusters (but the applications': the rest are the sidecars'
// cursors) until all are 0 twice in a row 5 s apart, or limit passes. A
// partition with messages and no subscription at all is not drained (a
// source no sidecar read passed as drained once, its backlog being
// nobody's).
func waitDrain(ctx context.Context, admins map[string]pulsaradmin.Client, clusters []string, ns string, limit time.Duration, logf func(string, ...any)) bool {
	deadline := time.Now().Add(limit)
	zeros := 0
	var last time.Time
	lastErr := ""
	for ; time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(5 * time.Second) {
		total, err := backlog(admins, clusters, ns)
		if err != nil {
			zeros = 0
			if err.Error() != lastErr {
				logf("drain: %v", err)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		if time.Since(last) > 30*time.Second {
			logf("drain: backlog %d", total)
			last = time.Now()
		}
		if total == 0 {
			zeros++
			if zeros == 2 {
				return true
			}
		} else {
			zeros = 0
		}
	}
	return false
}

func backlog(admins map[string]pulsaradmin.Client, clusters []string, ns string) (int64, error) {
	var total int64
	for _, c := range clusters {
		parts, err := partitions(admins[c], ns)
		if err != nil {
			return 0, err
		}
		for _, p := range parts {
			tn, err := utils.GetTopicName(p)
			if err != nil {
				return 0, err
			}
			st, err := admins[c].Topics().GetStats(*tn)
			if err != nil {
				return 0, fmt.Errorf("stats of %s on %s: %w", p, c, err)
			}
			// A partition no sidecar has a cursor on is not drained
			// (every partition of the run gets load). The applications'
			// subscriptions are not the copy's.
			cursors := 0
			for name, s := range st.Subscriptions {
				if isAppSub(name) {
					continue
				}
				cursors++
				total += s.MsgBacklog
			}
			if cursors == 0 {
				return 0, fmt.Errorf("%s on %s has no subscription (no sidecar cursor)", p, c)
			}
		}
	}
	return total, nil
}

// The run's namespaces keep what was written for a day, up to 4 GB per
// topic (a 30-minute run writes under 100 MB), so that a report can be
// looked into after the run.
const (
	retentionMinutes = 24 * 60
	retentionMB      = 4096
)

// makeNamespace creates a tenant and namespace of the run's own on both
// clusters, each tenant allowing only its own cluster (the clusters know
// nothing of each other), with deduplication on, retention, and the
// load's topics created.
func makeNamespace(admins map[string]pulsaradmin.Client, clusters []string, seed int64) (string, error) {
	tenant := fmt.Sprintf("soak%x", uint32(time.Now().UnixNano())^uint32(seed))
	ns := tenant + "/ns"
	for _, c := range clusters {
		a := admins[c]
		if err := a.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{c}}); err != nil {
			return "", fmt.Errorf("tenant %s on %s: %w", tenant, c, err)
		}
		if err := a.Namespaces().CreateNamespace(ns); err != nil {
			return "", fmt.Errorf("namespace %s on %s: %w", ns, c, err)
		}
		if err := a.Namespaces().SetDeduplicationStatus(ns, true); err != nil {
			return "", fmt.Errorf("deduplication on for %s on %s: %w", ns, c, err)
		}
		// Retention, so that the checker can read everything: without it
		// the broker deletes a ledger every subscription has consumed
		// once it rolls over (an unload rolls it over), and the first 3
		// minute soak found most of every unloaded topic "lost", at its
		// origin too.
		if err := a.Namespaces().SetRetention(ns, utils.NewRetentionPolicies(retentionMinutes, retentionMB)); err != nil {
			return "", fmt.Errorf("retention for %s on %s: %w", ns, c, err)
		}
		for _, tk := range appTopics() { // the late ones come with their load
			tn, err := utils.GetTopicName("persistent://" + ns + "/" + tk.Short)
			if err != nil {
				return "", err
			}
			if err := a.Topics().Create(*tn, tk.Partitions); err != nil {
				return "", fmt.Errorf("topic %s on %s: %w", tk.Short, c, err)
			}
		}
	}
	return ns, nil
}

// topicPatterns is the config's topic_patterns: every topic, or with the
// config change (reconfig) the load topics by name, and the added topic
// once changed.
func topicPatterns(reconfig, changed bool) string {
	if !reconfig {
		return `[".*"]`
	}
	var names []string
	for _, tk := range loadTopics {
		names = append(names, strconv.Quote(tk.Short))
	}
	if changed {
		names = append(names, strconv.Quote(addedTopic.Short))
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// reconfigGap is the pause between two instances' restarts in the
// config change.
const reconfigGap = 2 * time.Second

// reconfigure is the config change: every instance's config file
// rewritten (configs: its text after the change), then each instance
// that runs stopped (SIGTERM) and started again, one at a time,
// reconfigGap apart. One that a fault holds down meanwhile starts with
// the new file when the fault ends.
func reconfigure(ctx context.Context, insts []*instance, configs map[string]string) error {
	for _, in := range insts {
		if err := os.WriteFile(in.Config, []byte(configs[in.Name]), 0o600); err != nil {
			return err
		}
	}
	var errs error
	for _, in := range insts {
		if ctx.Err() != nil {
			break
		}
		if in.Signal(syscall.SIGTERM) {
			errs = errors.Join(errs, in.Start())
		}
		select {
		case <-ctx.Done():
		case <-time.After(reconfigGap):
		}
	}
	return errs
}

// sidecarConfig is one instance's config: every cluster of the run
// (behind, the WAN proxy's addresses, for the cluster the instance
// reaches through it), the namespace from src to its targets, every
// topic, the run's marker key. One entry, src's: run without --cluster
// runs every entry of its config.
func sidecarConfig(listen, key, ns string, topo topology, src, suffix string, behind e2e.Cluster, patterns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\n  discovery_interval: 1s\n  marker_key_file: %s\nclusters:\n", listen, key)
	for _, n := range topo.Clusters {
		c := e2e.Get(n)
		if topo.viaWAN(src, suffix, n) {
			c.ServiceURL, c.AdminURL = behind.ServiceURL, behind.AdminURL
		}
		fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", c.Name, c.ServiceURL, c.AdminURL)
	}
	fmt.Fprintf(&b, "replication:\n  - source: %s\n    namespace: %s\n    topic_patterns: %s\n    targets: [%s]\n", src, ns, patterns, strings.Join(topo.Targets[src], ", "))
	var subs []string
	for _, s := range appSubs {
		subs = append(subs, s.Name)
	}
	fmt.Fprintf(&b, "    subscriptions: [%s]\n", strings.Join(subs, ", "))
	return b.String()
}
