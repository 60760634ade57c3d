package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestHATargetUnreachableFromActive: two instances of the sidecar copy
// west to far; A reaches far through the WAN proxy, B directly, both
// reach west directly. With two partitions each instance's cursor is the
// active one on one partition. The proxy then cuts A off from far for
// 60 s under load: A still reads west but cannot write far. A must step
// down on its partition (close its cursor once its producer has had no
// link for twice far's keep_alive) so that west's broker makes B's cursor
// active there, and must not take the partition back before far answers
// it again (issue 13's target cut with an instance on each side). Every
// message reaches far once (deduplication on), in order per partition.
//
// far's keep_alive is 10 s here (step-down after 20 s): with the default
// 30 s the bound (60 s) would equal the cut.
func TestHATargetUnreachableFromActive(t *testing.T) {
	UseClusters(t, "west")
	UpFar(t)
	awaitClusters(t, "west")
	links, farViaWAN := FarWAN(t)
	ns := NewNamespace(t, "west", "far")
	if err := Admin(t, "far").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "ha")
	CreatePartitioned(t, topic, 2, "west", "far")
	repl := entry("west", ns, all, "far")
	start := func(far Cluster) *Sidecar {
		listen := FreeAddr(t)
		cfg := ConfigFor(listen, []Cluster{Get("west"), far}, repl)
		cfg = strings.Replace(cfg, "  - name: far\n", "  - name: far\n    keep_alive: 10s\n", 1)
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return StartSidecarFile(t, path, listen)
	}
	arrivals := watchArrivals(t, Client(t, "far"), topic)

	a := start(farViaWAN)
	// The load runs until A copies again after the heal (stop): how long
	// the instances take to share the partitions varies.
	const rate = 100
	load := startLoad(t, Client(t, "west"), topic, "m", rate*600, rate)
	Eventually(t, 60*time.Second, func() error {
		if v := a.Metric("geo_sidecar_replicated_messages_total"); v < rate {
			return fmt.Errorf("A replicated %v before the standby started", v)
		}
		return nil
	})
	a, b := startStandby(t, a, func() *Sidecar { return start(Get("far")) })

	const cut = 60 * time.Second
	alerts := watchAlerts(t, a, "geo_sidecar_link_")
	cutAt := time.Now()
	links.Cut(cut)
	time.Sleep(time.Until(cutAt.Add(cut)))
	cutTick := alerts.now()
	links.Heal()
	healedAt := time.Now()
	aAt := a.Metric("geo_sidecar_replicated_messages_total")
	var aResumed time.Duration
	for time.Since(healedAt) < 60*time.Second {
		if a.Metric("geo_sidecar_replicated_messages_total") > aAt {
			aResumed = time.Since(healedAt)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	time.Sleep(5 * time.Second)
	load.stop()
	load.wait(t)
	n := load.produced()
	got := drain(t, Client(t, "far"), topic, "check", n, 4*time.Minute, 3*time.Second)
	missing, dups, breaks := checkPartitions(t, got, "m", n, true)

	if v := a.Metric("geo_sidecar_link_stepdowns_total", `cluster="far"`); v < 1 {
		t.Errorf("A: link_stepdowns_total{cluster=\"far\"} = %v: it did not step down while cut off from far", v)
	}
	if v := b.Metric("geo_sidecar_link_stepdowns_total"); v != 0 {
		t.Errorf("B: link_stepdowns_total = %v: it stepped down though it reached far all along", v)
	}
	stalled, gap, takeover := arrivals.gapAfter(cutAt, healedAt)
	if stalled == "" {
		t.Errorf("no partition stalled after the cut: A's copies kept arriving on far (the proxy did not cut A off?)")
	} else if takeover.IsZero() {
		t.Errorf("nothing arrived on %s between the cut and the heal: B did not take A's partition over", stalled)
	}
	stepDown, _, _ := FirstLog(a.LogPath, "remote unreachable from this instance: stepped down (cursor closed, another instance's becomes active); resubscribing once the remote answers", cutAt)
	resub, _, _ := FirstLog(a.LogPath, "remote reachable again: resubscribing", cutAt)
	since := func(from, to time.Time) string {
		if to.IsZero() {
			return "never"
		}
		return to.Sub(from).Round(100 * time.Millisecond).String()
	}
	t.Logf("far cut off from the active instance A for %s under %d msg/s (far's keep_alive 10 s, step-down after 20 s): "+
		"A stepped down after %s; on A's partition %s nothing arrived for %s, B's copies arrived %s after the cut; "+
		"after the link came back A resubscribed after %s and replicated again after %s; "+
		"%d messages, %d missing, %d duplicates, %d out of order per partition; replicated by A %v, by B %v",
		cut, rate, since(cutAt, stepDown), shortName(stalled), gap.Round(100*time.Millisecond), since(cutAt, takeover),
		since(healedAt, resub), durOrNever(aResumed), n, missing, dups, breaks,
		a.Metric("geo_sidecar_replicated_messages_total"), b.Metric("geo_sidecar_replicated_messages_total"))
	if err := alerts.firing(t, "GeoSidecarLinkUnhealthy", cutTick, map[string]string{"cluster": "far"}); err != nil {
		t.Errorf("A: %v", err)
	} else {
		t.Logf("A: GeoSidecarLinkUnhealthy{cluster=\"far\"} fires at the end of the cut")
	}
	t.Logf("A (cut off from far): %s stepdowns=%v\n%s", metricsLine(a), a.Metric("geo_sidecar_link_stepdowns_total"), strings.Join(LogSummary(a.LogPath), "\n"))
	t.Logf("B (reaches far): %s stepdowns=%v\n%s", metricsLine(b), b.Metric("geo_sidecar_link_stepdowns_total"), strings.Join(LogSummary(b.LogPath), "\n"))
}

// startStandby starts the second instance and waits until each holds a
// partition. For each partition the broker makes active the consumer
// whose name sorts at the partition's index among the partition's
// consumers. Each instance names all its cursors' consumers alike
// (replicator's instanceConsumerName), so two instances take the two
// partitions in turn. Should one still hold both (names drawn per
// partition made that common: a CI run restarted the second instance six
// times in vain), it restarts one instance, then the other, under new
// names; a is the first instance as it is then.
func startStandby(t *testing.T, a *Sidecar, start func() *Sidecar) (*Sidecar, *Sidecar) {
	t.Helper()
	b := start()
	for try := 1; ; try++ {
		var na, nb float64
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			na, nb = a.Metric("geo_sidecar_connected_partitions"), b.Metric("geo_sidecar_connected_partitions")
			if na >= 1 && nb >= 1 {
				return a, b
			}
		}
		if try == 8 {
			t.Fatalf("after %d restarts, connected partitions: first instance %v, second %v", try, na, nb)
		}
		if try%2 == 1 {
			t.Logf("connected partitions: first instance %v, second %v; restarting the second (its consumers' names decide)", na, nb)
			b.Stop()
			b = start()
		} else {
			t.Logf("connected partitions: first instance %v, second %v; restarting the first (its consumers' names decide)", na, nb)
			a.Stop()
			a = a.Restart()
		}
	}
}

func durOrNever(d time.Duration) string {
	if d == 0 {
		return "never (within 60 s)"
	}
	return d.Round(100 * time.Millisecond).String()
}

func shortName(topic string) string { return topic[strings.LastIndex(topic, "/")+1:] }

// arrivals records when copies arrive on the target, per partition, read
// by a subscription of its own as they land.
type arrivals struct {
	mu sync.Mutex
	at map[string][]time.Time
}

// watchArrivals reads topic on c from the earliest message until t ends.
func watchArrivals(t *testing.T, c pulsar.Client, topic string) *arrivals {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "watch", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe watch on %s: %v", topic, err)
	}
	a := &arrivals{at: map[string][]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			_ = cons.Ack(m)
			a.mu.Lock()
			a.at[m.Topic()] = append(a.at[m.Topic()], now)
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cons.Close() })
	return a
}

// between counts, per partition, the copies that arrived from from to to.
func (a *arrivals) between(from, to time.Time) map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := map[string]int{}
	for p, ts := range a.at {
		for _, at := range ts {
			if !at.Before(from) && !at.After(to) {
				n[p]++
			}
		}
	}
	return n
}

// gapAfter finds the partition with the longest pause in arrivals that
// began between from and to: the one whose copier was cut off. It
// returns the partition, the pause, and when arrivals went on (zero if
// not before to).
func (a *arrivals) gapAfter(from, to time.Time) (partition string, gap time.Duration, resumed time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, ts := range a.at {
		for i := 1; i < len(ts); i++ {
			if ts[i-1].Before(from.Add(-time.Second)) || ts[i-1].After(to) {
				continue
			}
			if d := ts[i].Sub(ts[i-1]); d > gap && d > 2*time.Second {
				partition, gap, resumed = p, d, ts[i]
				if resumed.After(to) {
					resumed = time.Time{}
				}
			}
		}
	}
	return partition, gap, resumed
}
