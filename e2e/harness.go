// Package e2e holds the end-to-end test bed: real Pulsar clusters started by
// e2e/pulsar/cluster.sh, and helpers that tests and the benchmark use to talk
// to them. Nothing here fakes Pulsar; every helper goes to a live broker.
//
// Tests reuse clusters that are already up and start the ones that are not.
// Each test works in a namespace of its own (NewNamespace), so tests can run
// one after another against the same clusters without interfering.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Cluster is one local test-bed cluster. Ports match e2e/pulsar/cluster.sh.
type Cluster struct {
	Name       string
	ServiceURL string
	AdminURL   string
}

var clusters = map[string]Cluster{
	"east":  {"east", "pulsar://" + Loopback(6650), "http://" + Loopback(8080)},
	"west":  {"west", "pulsar://" + Loopback(6660), "http://" + Loopback(8090)},
	"north": {"north", "pulsar://" + Loopback(6670), "http://" + Loopback(8100)},
	// far is reached directly here; FarWAN gives its URLs through the WAN
	// proxy.
	"far": {"far", "pulsar://" + Loopback(6690), "http://" + Loopback(8120)},
}

// portOffset is GEO_TESTBED_PORT_OFFSET, by which cluster.sh moves every
// port of a private test bed.
var portOffset = func() int {
	n, err := strconv.Atoi(os.Getenv("GEO_TESTBED_PORT_OFFSET"))
	if err != nil {
		return 0
	}
	return n
}()

// Loopback is 127.0.0.1 with a test-bed port, moved by
// GEO_TESTBED_PORT_OFFSET like cluster.sh does.
func Loopback(port int) string { return fmt.Sprintf("127.0.0.1:%d", port+portOffset) }

// Get returns the test-bed cluster called name; it panics on an unknown name
// because that is a bug in the test, not a condition to handle.
func Get(name string) Cluster {
	c, ok := clusters[name]
	if !ok {
		panic(fmt.Sprintf("e2e: unknown cluster %q", name))
	}
	return c
}

// ScriptPath is the absolute path of cluster.sh, found from this source file
// so that tests in any sub-package can call it.
func ScriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "pulsar", "cluster.sh")
}

// Script runs cluster.sh with args, streaming its progress to stderr.
func Script(args ...string) error {
	cmd := exec.Command(ScriptPath(), args...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster.sh %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// Up starts the named clusters unless they are already up, and waits until
// each answers on its admin API with public/default present.
func Up(names ...string) error { return Script(append([]string{"up"}, names...)...) }

// Kill stops the named clusters at once with SIGKILL, as a crash would.
func Kill(names ...string) error { return Script(append([]string{"kill"}, names...)...) }

// Freeze pauses the named clusters' JVMs (SIGSTOP) until Thaw.
func Freeze(names ...string) error { return Script(append([]string{"freeze"}, names...)...) }

// Thaw resumes clusters paused by Freeze.
func Thaw(names ...string) error { return Script(append([]string{"thaw"}, names...)...) }

// Down stops the named clusters (their data stays).
func Down(names ...string) error { return Script(append([]string{"down"}, names...)...) }

// Admin returns an admin client for cluster name.
func Admin(t testing.TB, name string) pulsaradmin.Client {
	t.Helper()
	a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: Get(name).AdminURL})
	if err != nil {
		t.Fatalf("admin client for %s: %v", name, err)
	}
	return a
}

// Client returns a pulsar client for cluster name, closed when t ends.
func Client(t testing.TB, name string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               Get(name).ServiceURL,
		OperationTimeout:  30 * time.Second,
		ConnectionTimeout: 5 * time.Second,
		Logger:            pulsarlog.DefaultNopLogger(),
	})
	if err != nil {
		t.Fatalf("pulsar client for %s: %v", name, err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewNamespace creates a fresh tenant and namespace with the same name on
// every named cluster, each tenant allowing only its own cluster (the
// clusters know nothing of each other: that is the sidecar's setting). It
// returns "tenant/ns".
//
// With GEO_E2E_SHARE_CLUSTERS set (.ci/e2e.sh sets it in the lanes that
// do not disrupt clusters), a test that holds no cluster lock yet holds
// the named clusters shared from here until it ends (UseClusters), so
// tests that create their namespace first need no call of their own to
// run beside the lane whose tests disrupt east or west.
func NewNamespace(t testing.TB, names ...string) string {
	t.Helper()
	if os.Getenv("GEO_E2E_SHARE_CLUSTERS") != "" && holding.Load() == 0 {
		UseClusters(t, names...)
	}
	id := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	tenant := "t" + id
	ns := tenant + "/ns"
	for _, n := range names {
		a := Admin(t, n)
		if err := a.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{n}}); err != nil {
			t.Fatalf("create tenant %s on %s: %v", tenant, n, err)
		}
		if err := a.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatalf("create namespace %s on %s: %v", ns, n, err)
		}
	}
	t.Cleanup(func() { dropNamespace(t, tenant, names) })
	return ns
}

// dropNamespace deletes a passed test's tenant (its topics first) from each
// cluster, so that a developer's test bed does not grow with every run
// until the bookies' disk fills and they turn read-only (it did: 64 GB of
// test tenants on 2026-12-07). A failed test's tenant is kept to be looked
// at. Best effort: what cannot be deleted is logged, not failed. It runs
// before the test's cluster locks are released (NewNamespace takes them
// first, and cleanups run last-in first-out), so no other lane's fault
// window is open on these clusters meanwhile.
func dropNamespace(t testing.TB, tenant string, names []string) {
	if t.Failed() || os.Getenv("GEO_E2E_KEEP") != "" {
		t.Logf("keeping tenant %s", tenant)
		return
	}
	ns := tenant + "/ns"
	nsn, err := utils.GetNamespaceName(ns)
	if err != nil {
		return
	}
	for _, n := range names {
		a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: Get(n).AdminURL})
		if err != nil {
			continue
		}
		// A namespace replicated by Pulsar itself cannot be deleted.
		_ = a.Namespaces().SetNamespaceReplicationClusters(ns, []string{n})
		partitioned, plain, err := a.Topics().List(*nsn)
		if err != nil {
			t.Logf("keeping tenant %s on %s: %v", tenant, n, err)
			continue
		}
		for _, list := range []struct {
			topics         []string
			nonPartitioned bool
		}{{partitioned, false}, {plain, true}} {
			for _, name := range list.topics {
				if list.nonPartitioned && strings.Contains(name, "-partition-") {
					continue // deleted with its partitioned topic
				}
				if tn, err := utils.GetTopicName(name); err == nil {
					_ = a.Topics().Delete(*tn, true, list.nonPartitioned)
				}
			}
		}
		if err := a.Namespaces().DeleteNamespace(ns); err != nil {
			t.Logf("keeping tenant %s on %s: %v", tenant, n, err)
			continue
		}
		_ = a.Tenants().Delete(tenant)
	}
}

// Topic is the full persistent topic name of short in namespace ns.
func Topic(ns, short string) string { return "persistent://" + ns + "/" + short }

// CreatePartitioned creates topic with partitions partitions on each cluster.
func CreatePartitioned(t testing.TB, topic string, partitions int, names ...string) {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := Admin(t, n).Topics().Create(*tn, partitions); err != nil {
			t.Fatalf("create %s (%d partitions) on %s: %v", topic, partitions, n, err)
		}
	}
}

// ProduceN publishes n messages "<prefix>-<i>" to topic and returns their
// payloads in order. It waits for every receipt.
func ProduceN(t testing.TB, c pulsar.Client, topic, prefix string, n int) []string {
	t.Helper()
	msgs := make([]*pulsar.ProducerMessage, n)
	want := make([]string, n)
	for i := range msgs {
		want[i] = fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = &pulsar.ProducerMessage{Payload: []byte(want[i]), Key: fmt.Sprintf("k%d", i%16)}
	}
	Produce(t, c, topic, msgs...)
	return want
}

// Produce publishes msgs to topic with a batching producer and waits for
// every receipt.
func Produce(t testing.TB, c pulsar.Client, topic string, msgs ...*pulsar.ProducerMessage) {
	t.Helper()
	ProduceWith(t, c, pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 2000}, msgs...)
}

// ProduceWith publishes msgs with a producer made from opts and waits for
// every receipt.
func ProduceWith(t testing.TB, c pulsar.Client, opts pulsar.ProducerOptions, msgs ...*pulsar.ProducerMessage) {
	t.Helper()
	topic := opts.Topic
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("producer on %s: %v", topic, err)
	}
	defer p.Close()
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		p.SendAsync(context.Background(), m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			errs <- err
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("flush %s: %v", topic, err)
	}
	for range msgs {
		if err := <-errs; err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
	}
}

// Consume subscribes to topic as sub (from the earliest message when sub is
// new), receives until n messages arrived or timeout passed, acks them, and
// returns them. Markers of geo-sidecar's replicated-subscription protocol are
// acked and not counted. Fewer than n messages is not an error here: callers
// assert on what came.
func Consume(t testing.TB, c pulsar.Client, topic, sub string, n int, timeout time.Duration) []pulsar.Message {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            sub,
		Type:                        pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe %s on %s: %v", sub, topic, err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got []pulsar.Message
	for len(got) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				break
			}
			t.Fatalf("receive %s on %s: %v", sub, topic, err)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatalf("ack on %s: %v", topic, err)
		}
		if marker.Is(m) {
			continue
		}
		got = append(got, m)
	}
	return got
}

// Payloads returns the payloads of msgs as strings, in order.
func Payloads(msgs []pulsar.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Payload())
	}
	return out
}

// Eventually calls f every 250 ms until it returns nil or timeout passes,
// then fails t with f's last error.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Binary is the geo-sidecar binary the e2e tests run, built once by
// BuildBinary.
var Binary string

// BuildBinary builds cmd/geo-sidecar into dir with the same command as
// `make build` and sets Binary.
func BuildBinary(dir string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	out := filepath.Join(dir, "geo-sidecar")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/geo-sidecar")
	cmd.Dir = root
	// As make build and the Dockerfile: without cgo, so the tests run the
	// binary that ships (pure-Go zstd, not pulsar-client-go's C binding).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	Binary = out
	return nil
}

func mustTopicName(t testing.TB, topic string) *utils.TopicName {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// The suite runs in three processes at once (lanes; .ci/e2e.sh): the
// tests that need cluster far and some of the others, a third lane of
// others, and the rest (with every test that disrupts east or west). A
// test that kills, freezes or restarts a cluster holds that cluster
// exclusively (DisruptClusters), and a test of another lane that uses a
// cluster some lane disrupts holds it shared (UseClusters), so neither
// sees the other's fault. The locks are flock(2) on files in the
// temporary directory, one per cluster and test bed, released when the
// test ends (or its process dies).

// UseClusters holds the named clusters' locks shared until t ends.
func UseClusters(t testing.TB, names ...string) { lockClusters(t, syscall.LOCK_SH, names) }

// DisruptClusters holds the named clusters' locks exclusively until t
// ends: no test of the other lanes uses them meanwhile.
func DisruptClusters(t testing.TB, names ...string) { lockClusters(t, syscall.LOCK_EX, names) }

// HoldClustersExclusive takes the named clusters' locks exclusively, as
// DisruptClusters does for a test, for a program that is not a test (the
// soak's broker restarts); release gives them back.
func HoldClustersExclusive(names ...string) (release func(), err error) {
	release, _, err = holdClusters(syscall.LOCK_EX, names)
	return release, err
}

func lockClusters(t testing.TB, how int, names []string) {
	t.Helper()
	release, waited, err := holdClusters(how, names)
	if err != nil {
		t.Fatal(err)
	}
	for n, d := range waited {
		t.Logf("waited %s for cluster %s (another lane's test held it)", d.Round(time.Second), n)
	}
	t.Cleanup(release)
}

// holding counts this process's holders of cluster locks: a test takes
// all its clusters in one UseClusters or DisruptClusters call.
var holding atomic.Int32

// holdClusters takes the named clusters' locks (how: LOCK_SH or LOCK_EX)
// in one order for every caller, so no two lanes deadlock. It returns
// the waits over a second, by cluster, and the function that releases
// them (closing the files releases the locks).
//
// Each cluster's lock is taken through a gate of its own (an exclusive
// lock held only while the request waits for that cluster): flock(2)
// grants a shared lock next to other shared ones even while an exclusive
// request waits, so with two lanes taking turns holding west shared, a
// test waiting to disrupt it could wait for their whole run. Behind the
// gate, a waiting exclusive request keeps later requests for the cluster
// out and gets it once the tests holding it end. Gates and locks are
// taken in one order (each cluster's gate, then its lock, by name), so
// requests cannot wait for each other in a circle; a process that holds
// cluster locks already must not ask for more, as it could wait at a gate
// for a request that waits for it.
func holdClusters(how int, names []string) (release func(), waited map[string]time.Duration, err error) {
	if holding.Load() != 0 {
		return nil, nil, errors.New("lock clusters: this process holds cluster locks already " +
			"(take every cluster in one UseClusters or DisruptClusters call)")
	}
	closeAll, waited, err := takeClusters(how, names)
	if err != nil {
		return nil, nil, err
	}
	holding.Add(1)
	var once sync.Once
	return func() { once.Do(func() { closeAll(); holding.Add(-1) }) }, waited, nil
}

// takeClusters is holdClusters without the check for locks held already.
func takeClusters(how int, names []string) (release func(), waited map[string]time.Duration, err error) {
	names = append([]string(nil), names...)
	sort.Strings(names)
	var files []*os.File
	release = func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, n := range names {
		gate, dg, err := flockFile(n+"-gate", syscall.LOCK_EX)
		if err != nil {
			release()
			return nil, nil, err
		}
		f, d, err := flockFile(n, how)
		gate.Close()
		if err != nil {
			release()
			return nil, nil, err
		}
		files = append(files, f)
		if d += dg; d > time.Second {
			if waited == nil {
				waited = map[string]time.Duration{}
			}
			waited[n] = d
		}
	}
	return release, waited, nil
}

// flockFile opens the lock file called name (of this test bed) and locks
// it (how: LOCK_SH or LOCK_EX), returning it and how long the lock took.
func flockFile(name string, how int) (*os.File, time.Duration, error) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("geo-sidecar-testbed%d-%s.lock", portOffset, name))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("lock cluster %s: %w", name, err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("lock cluster %s: %w", name, err)
	}
	return f, time.Since(start), nil
}

// UpShared brings up the named clusters while holding their locks shared:
// a cluster that a test of another process has killed on purpose (held
// exclusively) is not started behind that test's back, which once
// restarted west in the middle of TestTargetOutage's outage. A test that
// holds its clusters already (UseClusters, then UpShared, as the
// benchmark's smoke tests do) brings them up under its own locks.
func UpShared(names ...string) error {
	if holding.Load() != 0 {
		return Up(names...)
	}
	release, _, err := holdClusters(syscall.LOCK_SH, names)
	if err != nil {
		return err
	}
	defer release()
	return Up(names...)
}
