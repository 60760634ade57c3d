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
	UseClusters(t, "west")
	UpFar(t)
	awaitClusters(t, "west")
	links, farViaWAN := FarWAN(t)
	ns := NewNamespace(t, "far", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "ha")
	CreatePartitioned(t, topic, 2, "far", "west") // on west too: the arrivals watcher subscribes there first
	repl := entry("far", ns, all, "west")
	arrivals := watchArrivals(t, Client(t, "west"), topic)
	a := StartSidecarFor(t, []Cluster{farViaWAN, Get("west")}, repl)

	// The load runs until a few seconds after the link is whole (stop):
	// how long the instances take to share the partitions varies.
	const rate = 100
	load := startLoad(t, Client(t, "far"), topic, "m", rate*600, rate)
	Eventually(t, 60*time.Second, func() error {
		if v := a.Metric("geo_sidecar_replicated_messages_total"); v < rate {
			return fmt.Errorf("A replicated %v before the standby started", v)
		}
		return nil
	})
	a, b := startStandby(t, a, func() *Sidecar { return StartSidecarFor(t, []Cluster{Get("far"), Get("west")}, repl) })
	if v := b.Metric("geo_sidecar_replicated_messages_total"); v > 0 {
		t.Logf("B replicated %v messages before the cut (the partition it holds)", v)
	}

	const cut = time.Minute
	alerts := watchAlerts(t, a, "geo_sidecar_link_")
	start := time.Now()
	links.Cut(cut)
	time.Sleep(time.Until(start.Add(cut)))
	cutTick := alerts.now()
	links.Heal()
	healed := time.Now()
	// A cannot read far during the cut: copies on both partitions in its
	// second half are B's, its own partition's included. far's broker
	// sees A's connection reset and hands the partition over within a
	// second or two, so a pause may be too short to find (gapAfter).
	during := arrivals.between(start.Add(cut/2), healed)
	if len(during) < 2 {
		t.Errorf("copies arrived on %d partition(s) in the second half of the cut (%v), want both: B did not take A's partition over (metrics of A: %s; B: %s)",
			len(during), during, metricsLine(a), metricsLine(b))
	}
	stalled, gap, takeover := arrivals.gapAfter(start, healed)
	time.Sleep(5 * time.Second)
	load.stop()
	load.wait(t)
	n := load.produced()
	got := drain(t, Client(t, "west"), topic, "check", n, 4*time.Minute, 3*time.Second)
	missing, dups, breaks := checkPartitions(t, got, "m", n, true)
	pause := "no partition paused over 2 s"
	if stalled != "" && !takeover.IsZero() {
		pause = fmt.Sprintf("on %s nothing arrived for %s, then B's copies %s after the cut", shortName(stalled),
			gap.Round(100*time.Millisecond), takeover.Sub(start).Round(100*time.Millisecond))
	}
	t.Logf("source cut off from the active instance for %s under %d msg/s: %s; copies per partition in the cut's second half %v; %d messages, %d missing, %d duplicates, %d out of order per partition; replicated by A %v, by B %v",
		cut, rate, pause, during, n, missing, dups, breaks,
		a.Metric("geo_sidecar_replicated_messages_total"), b.Metric("geo_sidecar_replicated_messages_total"))
	if err := alerts.firing(t, "GeoSidecarLinkUnhealthy", cutTick, map[string]string{"cluster": "far"}); err != nil {
		t.Errorf("A: %v", err)
	} else {
		t.Logf("A: GeoSidecarLinkUnhealthy{cluster=\"far\"} fires at the end of the cut")
	}
	t.Logf("A (cut off): %s\n%s", metricsLine(a), strings.Join(LogSummary(a.LogPath), "\n"))
	t.Logf("B (standby): %s\n%s", metricsLine(b), strings.Join(LogSummary(b.LogPath), "\n"))
}
