package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// env is one benchmark run's connections and namespaces.
type env struct {
	o        options
	tenant   string
	dir      string // configs and sidecar logs
	east     pulsar.Client
	west     pulsar.Client
	eastAdm  pulsaradmin.Client
	westAdm  pulsaradmin.Client
	http     *http.Client
	meter    *meter
	cleanups []func()
	// subsTopics is the topic count of the subs run under way (its
	// namespace and topic names).
	subsTopics int
	// disturbed counts measurements taken again after a cluster restart.
	disturbed int

	// far and farAdm reach far directly; set by the WAN rows (wanOpen).
	far    pulsar.Client
	farAdm pulsaradmin.Client
}

// Namespaces of a run, under e.tenant.
const (
	nsBuiltin = "builtin" // Pulsar geo-replication east<->west
	nsBDrain  = "bdrain"  // the same, replicator throttled while a backlog builds
	nsSidecar = "sidecar" // local-only; geo-sidecar copies east->west
	nsDirect  = "direct"  // west only
	nsScale   = "scale"   // local-only; one sidecar, many topics
)

func (e *env) ns(name string) string { return e.tenant + "/" + name }

func (e *env) topic(ns, short string) string { return "persistent://" + e.ns(ns) + "/" + short }

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.o.Progress, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func newEnv(o options) (*env, error) {
	e := &env{o: o, tenant: fmt.Sprintf("bench%d", time.Now().Unix()), http: &http.Client{Timeout: 30 * time.Second}, meter: newMeter()}
	var err error
	if e.dir, err = os.MkdirTemp("", "geo-sidecar-bench"); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		cl   *pulsar.Client
		adm  *pulsaradmin.Client
	}{{"east", &e.east, &e.eastAdm}, {"west", &e.west, &e.westAdm}} {
		cc := e2e.Get(c.name)
		*c.cl, err = pulsar.NewClient(pulsar.ClientOptions{
			URL: cc.ServiceURL, OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second,
			Logger: pulsarlog.DefaultNopLogger(),
		})
		if err != nil {
			return nil, fmt.Errorf("client for %s: %w", c.name, err)
		}
		if *c.adm, err = pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: cc.AdminURL}); err != nil {
			return nil, fmt.Errorf("admin for %s: %w", c.name, err)
		}
	}
	return e, nil
}

// setup creates the run's tenant and namespaces. Pulsar's geo-replication
// is wired by cluster.sh geo, exactly as the test bed documents it; the
// other namespaces replicate nowhere (a namespace created on a cluster
// replicates to that cluster only), which is the sidecar's setting.
func (e *env) setup() error {
	if !mainRan(e.o) {
		return nil // the WAN rows have a tenant of their own (wanOpen)
	}
	e.logf("tenant %s: namespaces %s, %s (Pulsar geo-replication), %s, %s, %s", e.tenant, nsBuiltin, nsBDrain, nsSidecar, nsDirect, nsScale)
	for _, ns := range []string{nsBuiltin, nsBDrain} {
		if err := e2e.Script("geo", "east", "west", e.ns(ns)); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		adm pulsaradmin.Client
		nss []string
	}{{e.eastAdm, []string{nsSidecar, nsScale}}, {e.westAdm, []string{nsSidecar, nsScale, nsDirect}}} {
		for _, ns := range c.nss {
			if err := c.adm.Namespaces().CreateNamespace(e.ns(ns)); err != nil && !isConflict(err) {
				return fmt.Errorf("create namespace %s: %w", e.ns(ns), err)
			}
		}
	}
	// The sidecar namespaces must not be replicated by Pulsar itself.
	for _, adm := range []pulsaradmin.Client{e.eastAdm, e.westAdm} {
		for _, ns := range []string{nsSidecar, nsScale} {
			cl, err := adm.Namespaces().GetNamespaceReplicationClusters(e.ns(ns))
			if err != nil {
				return fmt.Errorf("replication clusters of %s: %w", e.ns(ns), err)
			}
			if len(cl) != 1 {
				return fmt.Errorf("namespace %s replicates to %v; want its own cluster only", e.ns(ns), cl)
			}
		}
	}
	return nil
}

// cleanup deletes what the run created, unless -keep: every topic first
// (forced: a cursor or producer may still be attached; brokers refuse
// forced namespace deletion by default), then the namespaces and the
// tenant. Deleting the ledgers is what lets the bookies reclaim the
// gigabytes a run writes, so failures are reported, not ignored.
func (e *env) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	defer func() {
		e.east.Close()
		e.west.Close()
		if e.far != nil {
			e.far.Close()
		}
		_ = os.RemoveAll(e.dir)
	}()
	if e.o.Keep {
		e.logf("keeping tenant %s (-keep)", e.tenant)
		return
	}
	if !mainRan(e.o) {
		return // setup made nothing
	}
	e.logf("deleting tenant %s", e.tenant)
	// Pulsar's replication first: a replicated namespace cannot be deleted.
	for _, ns := range []string{nsBuiltin, nsBDrain} {
		for _, c := range []string{"east", "west"} {
			_ = e.admin(c).Namespaces().SetNamespaceReplicationClusters(e.ns(ns), []string{c})
		}
	}
	var failed []string
	for _, c := range []struct {
		cluster string
		nss     []string
	}{{"east", []string{nsBuiltin, nsBDrain, nsSidecar, nsScale}}, {"west", []string{nsBuiltin, nsBDrain, nsSidecar, nsScale, nsDirect}}} {
		for _, ns := range c.nss {
			failed = append(failed, e.dropTopics(c.cluster, ns)...)
			if err := e.admin(c.cluster).Namespaces().DeleteNamespace(e.ns(ns)); err != nil && !isNotFound(err) {
				failed = append(failed, fmt.Sprintf("namespace %s on %s: %v", e.ns(ns), c.cluster, err))
			}
		}
		if err := e.admin(c.cluster).Tenants().Delete(e.tenant); err != nil && !isNotFound(err) {
			failed = append(failed, fmt.Sprintf("tenant %s on %s: %v", e.tenant, c.cluster, err))
		}
	}
	if len(failed) > 0 {
		e.logf("cleanup left %d thing(s) behind (delete them by hand to free the bookies' disk): %s", len(failed), strings.Join(failed, "; "))
	}
}

// dropTopics force-deletes every topic of namespace ns on cluster and
// returns what could not be deleted.
func (e *env) dropTopics(cluster, ns string) []string {
	return e.dropNamespaceTopics(cluster, e.ns(ns))
}

// dropNamespaceTopics is dropTopics for a namespace's full name.
func (e *env) dropNamespaceTopics(cluster, fullNS string) []string {
	adm := e.admin(cluster)
	nsn, err := utils.GetNamespaceName(fullNS)
	if err != nil {
		return []string{err.Error()}
	}
	partitioned, plain, err := adm.Topics().List(*nsn)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return []string{fmt.Sprintf("list %s on %s: %v", fullNS, cluster, err)}
	}
	var failed []string
	del := func(name string, nonPartitioned bool) {
		tn, err := utils.GetTopicName(name)
		if err == nil {
			err = adm.Topics().Delete(*tn, true, nonPartitioned)
		}
		if err != nil && !isNotFound(err) {
			failed = append(failed, fmt.Sprintf("%s on %s: %v", name, cluster, err))
		}
	}
	isPart := map[string]bool{}
	for _, t := range partitioned {
		isPart[t] = true
		del(t, false)
	}
	for _, t := range plain {
		if i := strings.LastIndex(t, "-partition-"); i > 0 && isPart[t[:i]] {
			continue // went with its partitioned topic
		}
		del(t, true)
	}
	return failed
}

// dropWorkload deletes a finished workload's topics on both clusters, so
// that the bookies can reclaim their space while the run goes on.
func (e *env) dropWorkload(topics ...string) {
	for _, t := range topics {
		for _, c := range []string{"east", "west"} {
			tn, err := utils.GetTopicName(t)
			if err != nil {
				continue
			}
			if err := e.admin(c).Topics().Delete(*tn, true, false); err != nil && !isNotFound(err) {
				e.logf("delete %s on %s: %v", t, c, err)
			}
		}
	}
}

// createTopic creates a partitioned topic on the named clusters; "already
// exists" is fine (Pulsar may have created it on the peer of a replicated
// namespace).
func (e *env) createTopic(topic string, partitions int, clusters ...string) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	for _, c := range clusters {
		if err := e.admin(c).Topics().Create(*tn, partitions); err != nil && !isConflict(err) {
			return fmt.Errorf("create %s on %s: %w", topic, c, err)
		}
	}
	return nil
}

func (e *env) admin(cluster string) pulsaradmin.Client {
	switch cluster {
	case "east":
		return e.eastAdm
	case "far":
		return e.farAdm
	}
	return e.westAdm
}

func (e *env) client(cluster string) pulsar.Client {
	switch cluster {
	case "east":
		return e.east
	case "far":
		return e.far
	}
	return e.west
}

// counters are a topic's lifetime intake on one cluster's broker, summed
// over partitions (partitioned-stats, since the broker loaded the topic).
// They count whatever was written, by an application producer, Pulsar's
// replicator or geo-sidecar alike, so they are the same yardstick for
// every arm, and reading them costs the broker far less than a consumer
// would.
type counters struct {
	// Msgs is msgInCounter: messages, not entries.
	Msgs int64 `json:"msgInCounter"`
	// Bytes is bytesInCounter: the entries as the broker took them in and
	// stored them (metadata and payload, compressed if the producer
	// compressed).
	Bytes int64 `json:"bytesInCounter"`
}

// received is how many messages the broker of cluster has taken into topic
// (a partitioned topic): counters.Msgs.
func (e *env) received(ctx context.Context, cluster, topic string) (int64, error) {
	c, err := e.counters(ctx, cluster, topic)
	return c.Msgs, err
}

// counters reads topic's counters on cluster, asking again (three tries)
// when the broker is busy or restarting.
func (e *env) counters(ctx context.Context, cluster, topic string) (counters, error) {
	var c counters
	var err error
	for try := 0; try < 3; try++ {
		if c, err = e.countersOnce(ctx, cluster, topic); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second) // a busy or restarting broker: ask again
	}
	return c, err
}

func (e *env) countersOnce(ctx context.Context, cluster, topic string) (counters, error) {
	var c counters
	err := e.partitionedStats(ctx, cluster, topic, &c)
	return c, err
}

// partitionedStats decodes topic's partitioned-stats on cluster (summed
// over partitions, no publishers or consumers) into out.
func (e *env) partitionedStats(ctx context.Context, cluster, topic string, out any) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	u := fmt.Sprintf("%s/admin/v2/%s/partitioned-stats?perPartition=false&excludePublishers=true&excludeConsumers=true",
		e2e.Get(cluster).AdminURL, tn.GetRestPath())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("stats of %s on %s: %s: %s", topic, cluster, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("stats of %s on %s: %w", topic, cluster, err)
	}
	return nil
}

// waitReceived polls received every 50 ms until it reaches want, and
// returns when it first did (and when the count first moved past from, for
// drains). It gives up after timeout.
func (e *env) waitReceived(cluster, topic string, from, want int64, timeout time.Duration) (first, done time.Time, err error) {
	return e.waitProgress(cluster, topic, from, want, timeout, 0)
}

// waitProgress is waitReceived that also gives up, with errStalled, when
// the count has not moved for stall (from the call, and from every move
// after): a replicator that stopped copying fails its row in a minute
// instead of holding the run for the whole timeout. stall 0: no such check.
func (e *env) waitProgress(cluster, topic string, from, want int64, timeout, stall time.Duration) (first, done time.Time, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last int64
	w := newWatch(from, stall, time.Now())
	for i := 0; ; i++ {
		if i%20 == 0 && e.restarted() {
			return first, time.Now(), errRestarted
		}
		c, err := e.countersOnce(ctx, cluster, topic)
		n := c.Msgs
		now := time.Now()
		if err == nil {
			last = n
			if first.IsZero() && n > from {
				first = now
			}
			if n >= want {
				return first, now, nil
			}
			if still := w.observe(n, now); still > 0 {
				return first, now, fmt.Errorf("%w: %s on %s has %d of %d messages and took none for %s", errStalled, topic, cluster, n, want, still.Round(time.Second))
			}
		}
		select {
		case <-ctx.Done():
			return first, now, fmt.Errorf("%s on %s has %d of %d messages after %s", topic, cluster, last, want, timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// errStalled reports that a replicator stopped copying: the target's
// count did not move for the stall limit. Not transient: taking the
// measurement again would only wait again.
var errStalled = errors.New("no progress")

// watch tells a count that stopped moving: observe returns how long the
// count has stood still once that reaches the limit, else 0. Counts read
// while the broker was unreachable are not observed, so they neither move
// nor stall it.
type watch struct {
	last  int64
	since time.Time
	limit time.Duration
}

func newWatch(from int64, limit time.Duration, now time.Time) *watch {
	return &watch{last: from, since: now, limit: limit}
}

func (w *watch) observe(n int64, now time.Time) time.Duration {
	if n != w.last {
		w.last, w.since = n, now
		return 0
	}
	if still := now.Sub(w.since); w.limit > 0 && still >= w.limit {
		return still
	}
	return 0
}

// errRestarted reports that a test-bed cluster restarted during a
// measurement: other engineers' tests stop and start clusters on this
// machine. The measurement is void and is taken again.
var errRestarted = errors.New("a test-bed cluster restarted during the measurement")

// restarted reports whether a broker's JVM is not the one the meter saw.
func (e *env) restarted() bool {
	for c, pid := range e.meter.pids {
		if now, ok := clusterPID(c); !ok || now != pid {
			return true
		}
	}
	return false
}

// transient reports whether err looks like a broker's passing trouble on
// a loaded, shared test bed rather than a fault of the arm measured.
func transient(err error) bool {
	if errors.Is(err, errRestarted) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"Not enough non-faulty bookies", "ServiceNotReady", "TimeoutError", "deadline exceeded",
		"connection refused", "connection reset", "TooManyRequests", "MetadataError"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// attempt runs one measurement; if a cluster restarted meanwhile, it waits
// until both are ready again and measures again (three tries at most).
func (e *env) attempt(what string, f func() error) error {
	for try := 1; ; try++ {
		err := f()
		if err == nil || (!errors.Is(err, errRestarted) && !e.restarted()) || try == 3 {
			return err
		}
		e.disturbed++
		e.logf("%s: a test-bed cluster restarted during the measurement (%v); measuring again once both are ready", what, err)
		if err := e.waitClusters(5 * time.Minute); err != nil {
			return err
		}
	}
}

// waitClusters waits until east and west answer on their admin API, then
// takes their new pids.
func (e *env) waitClusters(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, c := range []string{"east", "west"} {
		for {
			_, ok := clusterPID(c)
			resp, err := e.http.Get(e2e.Get(c).AdminURL + "/admin/v2/namespaces/public")
			if err == nil {
				resp.Body.Close()
			}
			if ok && err == nil && resp.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster %s not back after %s", c, timeout)
			}
			time.Sleep(time.Second)
		}
	}
	time.Sleep(5 * time.Second) // reconnections settle
	e.meter = newMeter()
	return nil
}

// payload is a 1 KiB message body. The first 8 bytes carry the send time
// (Unix ns) and the next 8 a tag, for the latency workload.
const msgSize = 1024

func payload(sent time.Time, tag uint64) []byte {
	b := make([]byte, msgSize)
	putUint64(b[0:], uint64(sent.UnixNano()))
	putUint64(b[8:], tag)
	for i := 16; i < msgSize; i++ {
		b[i] = byte(i * 31)
	}
	return b
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func getUint64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// batching is the application producer every throughput and backlog
// workload uses, on both arms and for the direct limit: pulsar-client-go
// defaults (batches of up to 1,000 messages or 128 KiB, 10 ms delay, 1,000
// pending), no compression.
func batching(topic string) pulsar.ProducerOptions {
	return pulsar.ProducerOptions{Topic: topic, CompressionType: pulsar.NoCompression}
}

// produce publishes n messages of 1 KiB to topic on cluster with the
// batching producer as fast as it allows and waits for every receipt.
func (e *env) produce(ctx context.Context, cluster, topic string, n int) error {
	body := payload(time.Now(), 0)
	return e.produceWith(ctx, cluster, batching(topic), n, func(int) []byte { return body })
}

// produceWith publishes n messages with a producer of opts on cluster,
// message i carrying body(i), as fast as the producer allows, and waits
// for every receipt. It gives up when ctx ends (a producer whose broker
// restarted can otherwise wait forever).
func (e *env) produceWith(ctx context.Context, cluster string, opts pulsar.ProducerOptions, n int, body func(i int) []byte) error {
	p, err := e.client(cluster).CreateProducer(opts)
	if err != nil {
		return fmt.Errorf("producer on %s %s: %w", cluster, opts.Topic, err)
	}
	defer closeSoon(p)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n && ctx.Err() == nil; i++ {
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: body(i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// closeSoon closes p without waiting more than 10 s for it.
func closeSoon(p pulsar.Producer) {
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

func isNotFound(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "404") || strings.Contains(strings.ToLower(err.Error()), "not found") ||
		strings.Contains(strings.ToLower(err.Error()), "does not exist"))
}

func isConflict(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "409") || strings.Contains(strings.ToLower(err.Error()), "already exist"))
}

// machine describes the host for the report.
func machine() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fmt.Sscan(strings.TrimPrefix(line, "MemTotal:"), &kb)
			}
		}
		mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
	}
	return fmt.Sprintf("%d cores (%s)%s, %s/%s, %s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// pulsarVersion asks east's broker for its version.
func (e *env) pulsarVersion() string {
	resp, err := e.http.Get(e2e.Get("east").AdminURL + "/admin/v2/brokers/version")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	v := strings.Trim(strings.TrimSpace(string(b)), `"`)
	if resp.StatusCode != http.StatusOK || v == "" {
		return "?"
	}
	return v
}

// adminDo sends a JSON request to a cluster's admin API; 2xx and 204 are
// success. Its callers' requests (create a topic or subscription, delete
// one) are idempotent, so an answer that only says the broker is not
// ready for the topic yet (errTransient) is retried for a few seconds:
// a loaded broker still assigning a new namespace's bundle answers 412
// "Failed to find ownership", and that failed a smoke run once.
func (e *env) adminDo(cluster, method, path string, body any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	var err error
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		err = e.adminDoOnce(cluster, method, path, b)
		if !errors.Is(err, errTransient) || wait > 5*time.Second {
			return err
		}
		time.Sleep(wait)
	}
}

// errTransient marks an admin answer that a later attempt may not get:
// 503, or 412/500 about a topic's ownership not being settled yet.
var errTransient = errors.New("the broker is not ready for the topic yet")

func (e *env) adminDoOnce(cluster, method, path string, body []byte) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e2e.Get(cluster).AdminURL+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("%s %s on %s: %s: %s", method, path, cluster, resp.Status, b)
		ownership := bytes.Contains(b, []byte("ownership")) || bytes.Contains(b, []byte("ServiceUnitNotReady"))
		if resp.StatusCode == http.StatusServiceUnavailable || (ownership && (resp.StatusCode == http.StatusPreconditionFailed || resp.StatusCode == http.StatusInternalServerError)) {
			err = fmt.Errorf("%w: %w", errTransient, err)
		}
		return err
	}
	return nil
}
