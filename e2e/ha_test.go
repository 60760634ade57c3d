package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestHASourceUnreachableFromActive: two instances of the sidecar copy far
// to west; the active one (A) reaches far through the WAN proxy, the
// standby (B) directly, both reach west directly. The proxy then cuts A
// off from far for a minute under load: A loses the source but keeps the
// target. Far's broker makes B's cursor active, and B must be able to
// take over the fixed-name producer on west: an A that held on to it
// would keep B out with ProducerBusy until the link came back (issue 11's
// HA case, and issue 13's source cut with an instance on each side). Every
// message reaches west once (deduplication on), in order per partition.
func TestHASourceUnreachableFromActive(t *testing.T) {
	UpFar(t)
	awaitClusters(t, "west")
	links, farViaWAN := FarWAN(t)
	ns := NewNamespace(t, "far", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "ha")
	CreatePartitioned(t, topic, 2, "far")
	repl := entries("far", ns, all, "west")
	a := StartSidecarFor(t, []Cluster{farViaWAN, Get("west")}, repl)

	const rate, seconds = 100, 100
	n := rate * seconds
	load := startLoad(t, Client(t, "far"), topic, "m", n, rate)
	Eventually(t, 60*time.Second, func() error {
		if v := a.Metric("geo_sidecar_replicated_messages_total"); v < rate {
			return fmt.Errorf("A replicated %v before the standby started", v)
		}
		return nil
	})
	b := StartSidecarFor(t, []Cluster{Get("far"), Get("west")}, repl)
	time.Sleep(5 * time.Second)
	if v := b.Metric("geo_sidecar_replicated_messages_total"); v > 0 {
		t.Logf("B replicated %v messages before the cut (it took some partition over already)", v)
	}

	const cut = time.Minute
	start := time.Now()
	links.Cut(cut)
	bAt := b.Metric("geo_sidecar_replicated_messages_total")
	var takeover time.Duration
	for time.Since(start) < cut {
		if b.Metric("geo_sidecar_replicated_messages_total") > bAt {
			takeover = time.Since(start)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Until(start.Add(cut)))
	links.Heal()
	if takeover == 0 {
		t.Errorf("the standby replicated nothing while the active instance was cut off from the source for %s (metrics of A: %s; B: %s)",
			cut, metricsLine(a), metricsLine(b))
	}
	load.wait(t)
	got := drain(t, Client(t, "west"), topic, "check", n, 4*time.Minute, 3*time.Second)
	missing, dups, breaks := checkPartitions(t, got, "m", n, true)
	t.Logf("source cut off from the active instance for %s under %d msg/s: the standby took over after %s; %d messages, %d missing, %d duplicates, %d out of order per partition; replicated by A %v, by B %v",
		cut, rate, takeover.Round(100*time.Millisecond), n, missing, dups, breaks,
		a.Metric("geo_sidecar_replicated_messages_total"), b.Metric("geo_sidecar_replicated_messages_total"))
	t.Logf("A (cut off): %s\n%s", metricsLine(a), strings.Join(LogSummary(a.LogPath), "\n"))
	t.Logf("B (standby): %s\n%s", metricsLine(b), strings.Join(LogSummary(b.LogPath), "\n"))
}
