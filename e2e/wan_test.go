package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/geo-sidecar/geo-sidecar/e2e/wan"
)

// TestWANProxyCarriesSidecar: a sidecar copying east->far through the WAN
// proxy sends everything through it (lookup answers name the proxy, so the
// data crosses the proxy, not just the first connection), its admin calls
// too, and 50 ms of round trip added on the link shows in a client's round
// trip and in the copy's delay.
func TestWANProxyCarriesSidecar(t *testing.T) {
	UseClusters(t, "east")
	UpFar(t)
	links, far := FarWAN(t)
	ns := NewNamespace(t, "east", "far")
	topic := Topic(ns, "via")
	s := StartSidecarFor(t, []Cluster{Get("east"), far}, entry("east", ns, all, "far"))

	const n, size = 2000, 1024
	msgs := make([]*pulsar.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &pulsar.ProducerMessage{Payload: fmt.Appendf(make([]byte, 0, size), "%-*d", size, i)}
	}
	east := Client(t, "east")
	Produce(t, east, topic, msgs...)
	got := drain(t, Client(t, "far"), topic, "check", n, 60*time.Second, time.Second)
	if len(got) != n {
		t.Fatalf("far has %d messages, want %d", len(got), n)
	}
	broker, web := links[0].Stats(), links[1].Stats()
	t.Logf("through the proxy: binary protocol %d B up, %d B down, %d connections; admin %d B up, %d B down, %d connections",
		broker.Up, broker.Down, broker.Accepted, web.Up, web.Down, web.Accepted)
	if broker.Up < n*size {
		t.Fatalf("only %d bytes crossed the proxy towards far for %d bytes of payload: the sidecar bypassed it", broker.Up, n*size)
	}
	if web.Up == 0 {
		t.Fatal("no admin call crossed the proxy")
	}

	// A client of far through the proxy: its round trip grows by the
	// link's (25 ms each way).
	via := clientOf(t, far)
	p, err := via.CreateProducer(pulsar.ProducerOptions{Topic: Topic(ns, "rtt"), DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rtt := func() time.Duration {
		var ds []time.Duration
		for range 9 {
			start := time.Now()
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	// The sidecar's copy delay: publish on east, see it on far (read
	// directly, not through the proxy).
	farc := Client(t, "far")
	cons, err := farc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "delay",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ep, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	copyDelay := func() time.Duration {
		var ds []time.Duration
		for i := range 9 {
			start := time.Now()
			if _, err := ep.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "d-%d", i)}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			m, err := cons.Receive(ctx)
			cancel()
			if err != nil {
				t.Fatalf("copy %d did not arrive: %v", i, err)
			}
			_ = cons.Ack(m)
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	rtt0, copy0 := rtt(), copyDelay()
	links.SetLatency(25*time.Millisecond, 0)
	rtt50, copy50 := rtt(), copyDelay()
	t.Logf("50 ms round trip on the link: a send's round trip %s -> %s; the sidecar's copy delay %s -> %s (medians of 9)",
		rtt0.Round(100*time.Microsecond), rtt50.Round(100*time.Microsecond), copy0.Round(100*time.Microsecond), copy50.Round(100*time.Microsecond))
	if rtt50-rtt0 < 45*time.Millisecond {
		t.Errorf("round trip grew by %s with 50 ms of latency on the link", rtt50-rtt0)
	}
	if copy50-copy0 < 20*time.Millisecond {
		t.Errorf("copy delay grew by %s with 25 ms each way on the link", copy50-copy0)
	}
	if v := s.Metric("geo_sidecar_replicated_messages_total"); v < n {
		t.Errorf("sidecar counts %v replicated", v)
	}
}

// clientOf is Client for a cluster at c's URLs (such as through the WAN).
func clientOf(t *testing.T, c Cluster) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: c.ServiceURL, OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second,
		Logger: pulsarlog.DefaultNopLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// wanFault is one fault scenario: fault runs while load flows and returns
// when the link is whole again.
type wanFault struct {
	name  string
	load  time.Duration // how long the load runs (it starts before the fault)
	rate  int           // messages per second
	fault func(t *testing.T, links wan.Links, s *Sidecar)
	// check, optional, looks at the sidecar once every message arrived.
	check func(t *testing.T, s *Sidecar)
}

// runWANFault copies a two-partition topic east->far through the proxy
// under load, with deduplication on far, applies the fault, and checks
// that every message arrived once and in order per partition. It reports
// the time from the link being whole again until the sidecar's count of
// replicated messages moved, and what the metrics and logs showed.
func runWANFault(t *testing.T, f wanFault) {
	UseClusters(t, "east")
	UpFar(t)
	links, far := FarWAN(t)
	ns := NewNamespace(t, "east", "far")
	if err := Admin(t, "far").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "wan")
	CreatePartitioned(t, topic, 2, "east")
	s := StartSidecarFor(t, []Cluster{Get("east"), far}, entry("east", ns, all, "far"))
	links.SetLatency(10*time.Millisecond, 2*time.Millisecond)

	n := f.rate * int(f.load/time.Second)
	load := startLoad(t, Client(t, "east"), topic, "m", n, f.rate)
	Eventually(t, 60*time.Second, func() error {
		if v := s.Metric("geo_sidecar_replicated_messages_total"); v < float64(f.rate) {
			return fmt.Errorf("replicated %v before the fault", v)
		}
		return nil
	})
	alerts := watchAlerts(t, s, "geo_sidecar_link_")
	before := links.Stats()
	start := time.Now()
	f.fault(t, links, s)
	whole := time.Now()
	wholeTick := alerts.now() // the last scrape of the fault
	during := links.Stats()
	at := s.Metric("geo_sidecar_replicated_messages_total")
	seen := metricsLine(s)
	adminAt, webAt := s.Metric("geo_sidecar_admin_requests_total", `cluster="far"`), links[1].Stats()

	// Time to resume: until the count of replicated messages moves.
	var resumed time.Duration
	for deadline := whole.Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if s.Metric("geo_sidecar_replicated_messages_total") > at {
			resumed = time.Since(whole)
			web := links[1].Stats()
			calls := s.Metric("geo_sidecar_admin_requests_total", `cluster="far"`) - adminAt
			t.Logf("%s: until replication resumed: %.0f admin calls to far, %d B up and %d B down on the admin link; %.0f messages skipped as already on far",
				f.name, calls, web.Up-webAt.Up, web.Down-webAt.Down,
				s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`))
			// The read-back after a duplicate receipt reads windows of
			// entries through readers, not one admin call per entry (about
			// 1,900 calls here before); what is left is discovery and stats.
			if calls > maxAdminCallsToResume {
				t.Errorf("%s: %.0f admin calls to far until replication resumed, want at most %d", f.name, calls, maxAdminCallsToResume)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: replication did not resume within 5 min of the link being whole (metrics: %s)", f.name, metricsLine(s))
		}
	}
	load.wait(t)
	got := drain(t, Client(t, "far"), topic, "check", n, 4*time.Minute, 3*time.Second)
	missing, dups, breaks := checkPartitions(t, got, "m", n, true)
	t.Logf("%s: fault %s; replication resumed %s after the link was whole; %d messages at %d/s, %d missing, %d duplicates, %d out of order per partition",
		f.name, whole.Sub(start).Round(100*time.Millisecond), resumed.Round(100*time.Millisecond), n, f.rate, missing, dups, breaks)
	t.Logf("%s: proxy during the fault: %d connections accepted, %d reset, %d B dropped; at the end of the fault: %s",
		f.name, during.Accepted-before.Accepted, during.Resets-before.Resets, during.Dropped-before.Dropped, seen)
	if at, why, ok := FirstLog(s.LogPath, "connection closed", start); ok {
		t.Logf("%s: first \"connection closed\" %s after the fault began: %s", f.name, at.Sub(start).Round(100*time.Millisecond), why)
	}
	if at, _, ok := FirstLog(s.LogPath, "producer reconnected", whole); ok {
		t.Logf("%s: first \"producer reconnected\" %s after the link was whole", f.name, at.Sub(whole).Round(100*time.Millisecond))
	}
	t.Logf("%s: sidecar warnings, errors and connection lines:\n%s", f.name, strings.Join(LogSummary(s.LogPath), "\n"))
	// What the operator is told: the operations kit's link alert, over
	// what the sidecar exported during the fault.
	if err := alerts.firing(t, "GeoSidecarLinkUnhealthy", wholeTick, map[string]string{"cluster": "far"}); err != nil {
		t.Errorf("%s: %v", f.name, err)
	} else {
		t.Logf("%s: GeoSidecarLinkUnhealthy{cluster=\"far\"} fires at the end of the fault (promtool, the sidecar's metrics scraped every %s)", f.name, alertScrape)
	}
	if f.check != nil {
		f.check(t, s)
	}
}

// maxAdminCallsToResume bounds the admin calls to far between the link
// being whole and replication resuming: the entry pipe's read-back costs
// at most one admin call per partition and session (the ledger list).
const maxAdminCallsToResume = 200

// metricsLine is the sidecar metrics an operator watches for a link.
func metricsLine(s *Sidecar) string {
	var b strings.Builder
	for _, m := range []string{"geo_sidecar_connected_partitions", "geo_sidecar_backlog_messages",
		"geo_sidecar_oldest_unreplicated_age_seconds", "geo_sidecar_inflight_bytes", "geo_sidecar_send_errors_total",
		"geo_sidecar_partitions_stopped", "geo_sidecar_replicated_messages_total",
		"geo_sidecar_link_keepalive_timeouts_total", "geo_sidecar_link_connections_lost_total",
		"geo_sidecar_link_reconnects_total", "geo_sidecar_link_unconfirmed_age_seconds"} {
		fmt.Fprintf(&b, "%s=%v ", strings.TrimPrefix(m, "geo_sidecar_"), s.Metric(m))
	}
	return strings.TrimSpace(b.String())
}

// checkPartitions is checkCopies for a partitioned topic: nothing missing
// over all partitions, and the origin's order kept within each.
func checkPartitions(t *testing.T, got []pulsar.Message, prefix string, n int, dedup bool) (missing, dups, breaks int) {
	t.Helper()
	missing, dups = tally(got, prefix, n)
	parts := map[string][]pulsar.Message{}
	for _, m := range got {
		parts[m.Topic()] = append(parts[m.Topic()], m)
	}
	var ordered int
	for _, ms := range parts {
		breaks += firstArrivalBreaks(ms, prefix)
		ordered += orderBreaks(ms, prefix)
	}
	if missing > 0 {
		t.Errorf("%d messages lost: %s", missing, missingRanges(got, prefix, n))
	}
	if breaks > 0 {
		t.Errorf("%d messages arrived out of the origin's order within a partition (by first arrival)", breaks)
	}
	if dedup && dups > 0 {
		t.Errorf("%d duplicates with deduplication enabled on the target", dups)
	}
	if dedup && ordered > 0 {
		t.Errorf("copies out of order within a partition with deduplication enabled on the target")
	}
	return missing, dups, breaks
}

// cutFor is how long the link cut lasts: E2E_WAN_CUT (a Go duration),
// else two minutes.
func cutFor(t *testing.T) time.Duration {
	if v := os.Getenv("E2E_WAN_CUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("E2E_WAN_CUT: %v", err)
		}
		return d
	}
	return 2 * time.Minute
}

// TestWANLinkResetRepeatedly: every connection to far reset every 3 s for
// a minute under load.
func TestWANLinkResetRepeatedly(t *testing.T) {
	runWANFault(t, wanFault{name: "reset every 3 s for 60 s", load: 75 * time.Second, rate: 400,
		fault: func(t *testing.T, links wan.Links, _ *Sidecar) {
			for end := time.Now().Add(time.Minute); time.Now().Before(end); {
				time.Sleep(3 * time.Second)
				links.Reset()
			}
		}})
}

// TestWANHalfOpen: the link to far drops every byte silently for 45 s,
// closing nothing; the connections open then stay dead for ever. The
// sidecar must notice by its keep-alive (a connection that received
// nothing for its keep_alive, 30 s by default, is closed) and reconnect.
func TestWANHalfOpen(t *testing.T) {
	runWANFault(t, wanFault{name: "half-open for 45 s", load: 70 * time.Second, rate: 400,
		fault: func(t *testing.T, links wan.Links, s *Sidecar) {
			links.Blackhole(45 * time.Second)
			time.Sleep(45 * time.Second)
		},
		check: func(t *testing.T, s *Sidecar) {
			if v := s.Metric("geo_sidecar_link_keepalive_timeouts_total", `cluster="far"`); v < 1 {
				t.Errorf("link_keepalive_timeouts_total{cluster=\"far\"} = %v: the half-open link was not noticed by the keep-alive", v)
			}
		}})
}

// TestWANLinkCut: every connection to far reset and new ones refused for
// two minutes (E2E_WAN_CUT) under load.
func TestWANLinkCut(t *testing.T) {
	d := cutFor(t)
	runWANFault(t, wanFault{name: fmt.Sprintf("cut for %s", d), load: d + 15*time.Second, rate: 400,
		fault: func(t *testing.T, links wan.Links, _ *Sidecar) {
			links.Cut(d)
			time.Sleep(d)
		}})
}
