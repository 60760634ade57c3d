package main

// The subs row's built-in arm (issue 36): as many topics again, copied
// east<->west by Pulsar's own geo-replication with replicated
// subscriptions, measured at the same time as the sidecar's on the same
// clusters, so that the report sets the sidecar's follow latency and
// start-up beside the built-in's (goal: the sidecar's follow p99 at most
// twice the built-in's).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// subsBuiltinNamespace is where the built-in arm of a subs run over
// topics works: a namespace of the subs tenant per topic count, as the
// sidecar's (subsNamespace), kept with -keep and reused likewise.
func subsBuiltinNamespace(topics int) string { return fmt.Sprintf("%s/b%d", subsTenant, topics) }

// subsBuiltinTopics are the built-in arm's n topics, named as the
// sidecar's.
func subsBuiltinTopics(n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("persistent://%s/t-%04d", subsBuiltinNamespace(n), i)
	}
	return out
}

// subsFollowGoal is the follow-latency goal of the subs row (issues 23
// and 36).
const subsFollowGoal = "p99 ≤ 3 s at 1,000 topics and ≤ 2× built-in"

// subsBuiltinResult is what the built-in arm measured.
type subsBuiltinResult struct {
	Namespace string
	Reused    int           // topics found on both clusters from an earlier run
	Setup     time.Duration // namespace, topics and subscriptions created
	// Connected is from switching the namespace's replication on, on
	// both clusters (as the sidecar's process starts), until every
	// topic's replicator is connected both ways
	// (pulsar_replication_connected_count on both brokers, read every
	// second); 0: not within the start-up bound.
	Connected time.Duration
	Probes    []probeSet // one per probed phase, as subsResult.Probes
}

// subsBuiltinSetup wires the built-in arm's namespace for Pulsar's
// geo-replication (cluster.sh geo: each cluster knows the other, the
// tenant allows both), switches its replication off until the start
// (subsBuiltinOn), and creates the topics on both clusters with
// subscription app, replicated, at the earliest position on each,
// skipping what is there.
func (e *env) subsBuiltinSetup(n int) (*subsBuiltinResult, error) {
	ns := subsBuiltinNamespace(n)
	t0 := time.Now()
	if err := e2e.Script("geo", "east", "west", ns); err != nil {
		return nil, err
	}
	have := map[string]map[string]bool{}
	for _, c := range []string{"east", "west"} {
		adm := e.admin(c)
		if err := adm.Namespaces().SetNamespaceReplicationClusters(ns, []string{c}); err != nil {
			return nil, fmt.Errorf("switch replication of %s off on %s: %w", ns, c, err)
		}
		nsn, _ := utils.GetNamespaceName(ns)
		_, plain, err := adm.Topics().List(*nsn)
		if err != nil {
			return nil, fmt.Errorf("list %s on %s: %w", ns, c, err)
		}
		have[c] = map[string]bool{}
		for _, t := range plain {
			have[c][t] = true
		}
	}
	reused, err := e.subsCreate(subsBuiltinTopics(n), have, "?replicated=true")
	if err != nil {
		return nil, fmt.Errorf("built-in arm: %w", err)
	}
	res := &subsBuiltinResult{Namespace: ns, Reused: reused, Setup: time.Since(t0)}
	e.logf("subs: built-in arm: %d topics in %s with replicated subscription %q on east and west (%d reused) in %s",
		n, ns, subsSub, reused, res.Setup.Round(time.Second))
	return res, nil
}

// subsStartupBound is how long a start-up over n topics may take: about
// 40 ms a partition and direction on this bed, the brokers being busy
// (10,000 topics both ways took the sidecar 13 minutes): 10 minutes, or
// 120 ms a topic past 5,000.
func subsStartupBound(n int) time.Duration {
	return max(10*time.Minute, time.Duration(n)*120*time.Millisecond)
}

// replWatch waits in the background until every replicator of the
// built-in arm is connected.
type replWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	took   time.Duration // from replication switched on; set when done closes
	err    error
}

// wait returns how long the replicators took to connect, once they did
// or the watch gave up.
func (w *replWatch) wait() (time.Duration, error) {
	<-w.done
	return w.took, w.err
}

// stop ends the watch and waits for it.
func (w *replWatch) stop() {
	w.cancel()
	<-w.done
}

// subsBuiltinOn switches the built-in arm's replication on, on both
// clusters, and watches its n topics' replicators connect both ways.
func (e *env) subsBuiltinOn(n int) (*replWatch, error) {
	ns := subsBuiltinNamespace(n)
	ctx, cancel := context.WithTimeout(context.Background(), subsStartupBound(n))
	w := &replWatch{cancel: cancel, done: make(chan struct{})}
	start := time.Now()
	for _, c := range []string{"east", "west"} {
		if err := e.admin(c).Namespaces().SetNamespaceReplicationClusters(ns, []string{"east", "west"}); err != nil {
			cancel()
			return nil, fmt.Errorf("switch replication of %s on on %s: %w", ns, c, err)
		}
	}
	go func() {
		defer close(w.done)
		w.took, w.err = e.waitReplConnected(ctx, ns, 2*n, start)
	}()
	return w, nil
}

// subsBuiltinStartup waits for w and records the built-in's start-up in
// b (missing from the report when it did not finish: the rest is still
// measured).
func (e *env) subsBuiltinStartup(w *replWatch, b *subsBuiltinResult) {
	took, err := w.wait()
	if err != nil {
		e.logf("subs: built-in arm: %v", err)
		return
	}
	b.Connected = took
	e.logf("subs: built-in arm: every replicator connected both ways %s after replication was switched on", took.Round(time.Millisecond))
}

// waitReplConnected reads both brokers' replicators of ns's row topics
// every second until want of them are connected, and returns when that
// was seen, from start.
func (e *env) waitReplConnected(ctx context.Context, ns string, want int, start time.Time) (time.Duration, error) {
	prefix := "persistent://" + ns + "/t-"
	last := 0
	for {
		sum, ok := 0, true
		for _, c := range []string{"east", "west"} {
			k, err := e.replConnectedOn(ctx, c, prefix)
			ok = ok && err == nil
			sum += k
		}
		if ok {
			if last = sum; sum >= want {
				return time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%d of %d replicators of %s connected after %s", last, want, ns, time.Since(start).Round(time.Second))
		case <-time.After(time.Second):
		}
	}
}

// replConnectedOn is replConnected of cluster's broker metrics.
func (e *env) replConnectedOn(ctx context.Context, cluster, prefix string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e2e.Get(cluster).AdminURL+"/metrics/", nil)
	if err != nil {
		return 0, err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics of %s: %s", cluster, resp.Status)
	}
	return replConnected(resp.Body, prefix)
}

// replConnected sums pulsar_replication_connected_count (a replicator per
// topic and remote cluster, 1 while its producer is connected) over the
// topics whose name starts with prefix, in a broker's Prometheus page.
func replConnected(page io.Reader, prefix string) (int, error) {
	const name = "pulsar_replication_connected_count{"
	label := `topic="` + prefix
	sc := bufio.NewScanner(page)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, label) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return n, fmt.Errorf("metrics line %q: %w", line, err)
		}
		n += int(v)
	}
	return n, sc.Err()
}

// ---- report ---------------------------------------------------------------

// text is a probe set's p50 / p99, with the probes over probeTimeout
// counted.
func (p probeSet) text() string {
	s := fmt.Sprintf("%s / %s", p.quantile(0.5), p.quantile(0.99))
	if p.Failed > 0 {
		s += fmt.Sprintf(" (%d of %d over %s)", p.Failed, p.Failed+len(p.Lat), probeTimeout)
	}
	return s
}

// probesFor is the set of phase among sets.
func probesFor(sets []probeSet, phase string) (probeSet, bool) {
	for _, p := range sets {
		if p.Phase == phase {
			return p, true
		}
	}
	return probeSet{}, false
}

// p99Over is the sidecar's follow p99 over the built-in's; ok is false
// unless both fall among the probes that finished (and the built-in's is
// above 0).
func p99Over(sc, bi probeSet) (r float64, ok bool) {
	s, okS := sc.at(0.99)
	b, okB := bi.at(0.99)
	if !okS || !okB || b <= 0 {
		return 0, false
	}
	return s.Seconds() / b.Seconds(), true
}

// p99Ratio is p99Over as the report shows it: a lower bound when the
// sidecar's p99 falls among its probes over probeTimeout, "—" when the
// built-in's does (or either arm has no probes).
func p99Ratio(sc, bi probeSet) string {
	if r, ok := p99Over(sc, bi); ok {
		return fmt.Sprintf("%.2f×", r)
	}
	b, okB := bi.at(0.99)
	if _, okS := sc.at(0.99); !okS && okB && b > 0 && sc.Failed > 0 {
		return fmt.Sprintf("> %.1f×", probeTimeout.Seconds()/b.Seconds())
	}
	return "—"
}

// builtinConnected is the growth table's built-in start-up cell: its
// time with the sidecar's ratio to it, or a dash without the arm.
func (s *subsResult) builtinConnected() string {
	if s.Builtin == nil || s.Builtin.Connected <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f (%s)", s.Builtin.Connected.Seconds(), ratio(s.Connected.Seconds(), s.Builtin.Connected.Seconds()))
}

// builtinMarkdown is the built-in arm's table: start-up and the follow
// latency of each probed phase, the sidecar's beside the built-in's.
func (s *subsResult) builtinMarkdown() string {
	bi := s.Builtin
	if bi == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nBeside it, at the same time on the same clusters, the built-in arm: %s topics more in `%s`, replicated east↔west by Pulsar's own geo-replication with replicated subscriptions (`%s` created replicated on both clusters, the application's consumer with ReplicateSubscriptionState), an application of its own on east, spread traffic of its own at the same rate while the sidecar's runs, and probes interleaved with the sidecar's:\n\n",
		num(float64(s.Topics)), bi.Namespace, subsSub)
	b.WriteString("| | sidecar | built-in | sidecar / built-in | goal |\n|---|---:|---:|---:|---|\n")
	secs := func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	fmt.Fprintf(&b, "| start-up: every partition connected, both directions (sidecar: from process start; built-in: from replication switched on) | %s | %s | %s | |\n",
		secs(s.Connected), secs(bi.Connected), ratio(s.Connected.Seconds(), bi.Connected.Seconds()))
	for _, sc := range s.Probes {
		bp, ok := probesFor(bi.Probes, sc.Phase)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| follow latency p50 / p99, %s (%d probes per arm) | %s | %s | %s (p99) | %s |\n",
			sc.Phase, max(len(sc.Lat)+sc.Failed, len(bp.Lat)+bp.Failed), sc.text(), bp.text(), p99Ratio(sc, bp), subsFollowGoal)
	}
	return b.String()
}

// builtinTargets adds the goal against the built-in (issue 36) of each
// probed phase through line.
func (s *subsResult) builtinTargets(line func(ok bool, format string, args ...any)) {
	if s.Builtin == nil {
		return
	}
	for _, sc := range s.Probes {
		bp, ok := probesFor(s.Builtin.Probes, sc.Phase)
		if !ok {
			continue
		}
		r, ok := p99Over(sc, bp)
		line(ok && r <= 2, "follow p99 %s, %s partitions, ≤ 2× built-in: %s (sidecar %s, built-in %s)",
			sc.Phase, num(float64(s.Topics)), p99Ratio(sc, bp), sc.quantile(0.99), bp.quantile(0.99))
	}
}

// builtinMethod describes how the built-in arm is measured.
func (s *subsResult) builtinMethod(z subsSizes) string {
	if s.Builtin == nil {
		return ""
	}
	return fmt.Sprintf(" The built-in arm (-subs-builtin, issue 36) runs at the same time on the same clusters: as many topics in `%[1]s`, wired for Pulsar's geo-replication by `cluster.sh geo` (reused with -keep and deleted afterwards like the sidecar's), each with subscription `%[2]s` created replicated (`replicated=true`) at the earliest position on both clusters; its replication is switched off until the sidecar starts and switched on (on both clusters) as it starts, and its start-up is from then until both brokers count every topic's replicator connected (`pulsar_replication_connected_count`, read every second). Its application on east is the same kind of consumer (Exclusive, acknowledging everything) with ReplicateSubscriptionState; one message per topic on each cluster before the start, as for the sidecar; its spread traffic runs at the sidecar's rate, on its own topics, through the same window (so the brokers carry both); its probes are the same code, interleaved with the sidecar's on the same topic indices (each arm %[3]d at a time), the copy's position found by a reader on west (Pulsar's markers are not delivered to readers) and its mark-delete position read the same way. Goal: the sidecar's follow p99 at most 2× the built-in's in the same phase.",
		s.Builtin.Namespace, subsSub, max(z.ProbeParallel, 1))
}
