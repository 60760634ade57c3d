package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The follow with sidecar.positions: servlet on east and west, whose
// brokers load the positions servlet (cluster.sh positions_servlet): the
// local subscriptions' positions come from one request per broker,
// shared by every partition of the cluster, instead of a position read
// (internal stats) per partition.

// startServletSidecar starts a sidecar on east and west with
// sidecar.positions: servlet.
func startServletSidecar(t *testing.T, replication string) *Sidecar {
	t.Helper()
	requireServlet(t, "east", "west")
	listen := FreeAddr(t)
	cfg := strings.Replace(Config(listen, []string{"east", "west"}, replication), "sidecar:\n", "sidecar:\n  positions: servlet\n", 1)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return StartSidecarFile(t, path, listen)
}

// requireServlet fails t unless the named clusters' brokers answer the
// positions servlet.
func requireServlet(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		resp, err := http.Get(Get(n).AdminURL + "/geo-sidecar/positions?namespace=public/default&subscription=probe")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s's broker has no positions servlet (%d): restart it with this cluster.sh (cluster.sh up %s restarts a cluster whose settings changed)", n, resp.StatusCode, n)
		}
	}
}

// adminCounts are a sidecar's admin requests to cluster, by kind.
func adminCounts(s *Sidecar, cluster string) map[string]float64 {
	out := map[string]float64{}
	for _, kind := range []string{"internal-stats", "stats", "partitioned-stats", "positions", "positions-acknowledge", "positions-backlogs", "brokers", "reset-cursor", "list-subscriptions", "other"} {
		out[kind] = s.Metric("geo_sidecar_admin_requests_total", `cluster="`+cluster+`"`, `kind="`+kind+`"`)
	}
	return out
}

func countsSince(now, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// TestServletFollowAcknowledged: an application acknowledges on east, on
// a topic of 4 partitions; west's copy follows to the end, while the
// east→west sidecar learns east's positions from the servlet: no
// internal-stats request to east once the follow runs (the admin path
// made one per partition that moved, each round), and its follows count
// in positions_from_servlet_total.
func TestServletFollowAcknowledged(t *testing.T) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	const sub, parts = "billing", 4
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, parts, "east", "west")
	eastC, westC := Client(t, "east"), Client(t, "west")
	app := subscribeApp(t, eastC, topic, sub, "east-app", pulsar.Shared, true)
	a := startServletSidecar(t, oneWay(ns, sub, "east", "west"))
	b := startServletSidecar(t, oneWay(ns, sub, "west", "east"))

	inStep := func(n int64) func() error {
		return func() error {
			app.mu.Lock()
			got := app.got
			app.mu.Unlock()
			if int64(got) < n {
				return fmt.Errorf("east's application got %d of %d", got, n)
			}
			// The sidecar creates west's subscription once it copied
			// a snapshot: countTail fails the test where there is none.
			if err := subscribedEverywhere(t, "west", topic, parts, sub); err != nil {
				return err
			}
			w := countTail(t, westC, "west", topic, parts, sub)
			if w.data < n || w.dataAfter != 0 {
				return fmt.Errorf("west: %d of %d copied, its %s would deliver %d again", w.data, n, sub, w.dataAfter)
			}
			return nil
		}
	}
	ProduceN(t, eastC, topic, "a", 200)
	Eventually(t, 90*time.Second, inStep(200))

	aEast, bWest := adminCounts(a, "east"), adminCounts(b, "west")
	fromServlet := a.Metric("geo_sidecar_positions_from_servlet_total")
	start := time.Now()
	ProduceN(t, eastC, topic, "b", 400)
	Eventually(t, 90*time.Second, inStep(600))
	took := time.Since(start)
	aDelta, bDelta := countsSince(adminCounts(a, "east"), aEast), countsSince(adminCounts(b, "west"), bWest)
	t.Logf("400 messages over %d partitions followed in %s; A's admin requests to east: %v; B's to west: %v; follows from the servlet: %v",
		parts, took.Round(time.Millisecond), aDelta, bDelta, a.Metric("geo_sidecar_positions_from_servlet_total")-fromServlet)
	if aDelta["internal-stats"] != 0 {
		t.Errorf("A read east's positions %v times from the admin API (internal stats) while the servlet reported them", aDelta["internal-stats"])
	}
	if a.Metric("geo_sidecar_positions_from_servlet_total") <= fromServlet {
		t.Error("no follow took its positions from the servlet")
	}
	if got := a.Metric("geo_sidecar_positions_brokers", `cluster="east"`, `source="servlet"`); got != 1 {
		t.Errorf("positions_brokers{cluster=east,source=servlet} = %v, want 1", got)
	}
}

// subscribedEverywhere says which partition of topic on cluster has no
// subscription sub yet.
func subscribedEverywhere(t *testing.T, cluster, topic string, parts int, sub string) error {
	for i := range parts {
		pt := fmt.Sprintf("%s-partition-%d", topic, i)
		subs, err := Admin(t, cluster).Subscriptions().List(*mustTopicName(t, pt))
		if err != nil {
			return fmt.Errorf("subscriptions of %s on %s: %w", pt, cluster, err)
		}
		if !slices.Contains(subs, sub) {
			return fmt.Errorf("%s on %s has no %s yet", pt, cluster, sub)
		}
	}
	return nil
}

// TestServletRewindNotOverridden: TestSubscriptionRewindNotOverridden's
// operator rewind on east, with both sidecars taking positions from the
// servlet: the rewind is not overridden, and west's copy still delivers
// the range the operator rewound to after a failover.
func TestServletRewindNotOverridden(t *testing.T) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	rewindNotOverridden(t, func(replication string) *Sidecar { return startServletSidecar(t, replication) })
}

// TestServletMovesExclusiveAttached: an Exclusive application consumes on
// east while an Exclusive consumer of the same subscription is attached
// on west and acknowledges nothing (a standby instance already
// connected). Without the servlet no route can move west's copy under it
// (reset-cursor would disconnect it, and the protocol admits no second
// Exclusive consumer): every update is refused. With the servlet's
// acknowledge endpoint west's copy follows east to the end, as Pulsar's
// own replicated subscriptions move it, the consumer stays connected (the
// same connection all along), and no reset-cursor is sent to west.
func TestServletMovesExclusiveAttached(t *testing.T) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	const sub = "ledger"
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "entries")
	eastC, westC := Client(t, "east"), Client(t, "west")
	app := subscribeApp(t, eastC, topic, sub, "east-app", pulsar.Exclusive, true)
	subscribeApp(t, westC, topic, sub, "west-standby", pulsar.Exclusive, false)
	a := startServletSidecar(t, oneWay(ns, sub, "east", "west"))
	b := startServletSidecar(t, oneWay(ns, sub, "west", "east"))
	tn := mustTopicName(t, topic)
	connectedSince := func() (string, error) {
		st, err := Admin(t, "west").Topics().GetStats(*tn)
		if err != nil {
			return "", err
		}
		cs := st.Subscriptions[sub].Consumers
		if len(cs) != 1 {
			return "", fmt.Errorf("%d consumers of %s on west, want the standby alone", len(cs), sub)
		}
		return cs[0].ConnectedSince, nil
	}
	since, err := connectedSince()
	if err != nil {
		t.Fatal(err)
	}
	resetsBefore := adminCounts(b, "west")["reset-cursor"]
	inStep := func(n int64) func() error {
		return func() error {
			app.mu.Lock()
			got := app.got
			app.mu.Unlock()
			if int64(got) < n {
				return fmt.Errorf("east's application got %d of %d", got, n)
			}
			w := countTail(t, westC, "west", topic, 0, sub)
			if w.data < n || w.dataAfter != 0 {
				return fmt.Errorf("west: %d of %d copied, its %s would deliver %d again", w.data, n, sub, w.dataAfter)
			}
			return nil
		}
	}
	ProduceN(t, eastC, topic, "a", 100)
	Eventually(t, 90*time.Second, inStep(100))
	ProduceN(t, eastC, topic, "b", 100)
	Eventually(t, 90*time.Second, inStep(200))

	if now, err := connectedSince(); err != nil || now != since {
		t.Errorf("west's standby consumer: connected since %q, was %q (%v): disconnected by a move", now, since, err)
	}
	if d := adminCounts(b, "west")["reset-cursor"] - resetsBefore; d != 0 {
		t.Errorf("%v reset-cursor requests to west", d)
	}
	servlet := b.Metric("geo_sidecar_subscription_updates_received_total", `cluster="west"`, `route="servlet"`, `outcome="applied"`)
	if servlet == 0 {
		t.Error("no update applied by the servlet route")
	}
	t.Logf("updates applied on west by the servlet: %v, in %v acknowledge requests; A's admin requests to east %v",
		servlet, b.Metric("geo_sidecar_positions_acknowledge_requests_total", `cluster="west"`), adminCounts(a, "east"))
}

// TestServletFollowsSkipAndExpiry: with positions from the servlet, a
// skip and an expiry on east's subscription (moves no acknowledgement
// makes, which the stats readings' timestamps do not show) are followed
// on west: after the skip west's copy moves forward but never past east,
// after the expiry it reaches the end.
func TestServletFollowsSkipAndExpiry(t *testing.T) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	const sub = "audit"
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "events")
	eastC, westC := Client(t, "east"), Client(t, "west")
	_ = Consume(t, eastC, topic, sub, 0, time.Second) // created at the start, nobody consuming
	_ = Consume(t, westC, topic, sub, 0, time.Second)
	startServletSidecar(t, oneWay(ns, sub, "east", "west"))
	b := startServletSidecar(t, oneWay(ns, sub, "west", "east"))
	// Five rounds a snapshot interval apart: a snapshot between each, so
	// that a skip into the middle has one at or before it (an update
	// goes to the newest snapshot at or before the position: none before
	// it, none is sent, as with Pulsar's own).
	for i := range 5 {
		produceUnbatched(t, eastC, topic, "e", i*10, i*10+10)
		time.Sleep(1500 * time.Millisecond)
	}
	Eventually(t, 60*time.Second, func() error {
		if w := countTail(t, westC, "west", topic, 0, sub); w.data < 50 || w.dataAfter != 50 {
			return fmt.Errorf("west: %d of 50 copied, %s would deliver %d", w.data, sub, w.dataAfter)
		}
		return nil
	})
	tn := mustTopicName(t, topic)
	if err := Admin(t, "east").Subscriptions().SkipMessages(*tn, sub, 30); err != nil {
		t.Fatalf("skip: %v", err)
	}
	Eventually(t, 60*time.Second, func() error {
		e, w := countTail(t, eastC, "east", topic, 0, sub), countTail(t, westC, "west", topic, 0, sub)
		if w.dataAfter < e.dataAfter {
			t.Fatalf("west's %s would deliver %d, east's %d: moved past east", sub, w.dataAfter, e.dataAfter)
		}
		if w.dataAfter >= 50 {
			return fmt.Errorf("west's %s has not followed the skip (east would deliver %d)", sub, e.dataAfter)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if err := Admin(t, "east").Subscriptions().ExpireMessages(*tn, sub, 1); err != nil {
		t.Fatalf("expire: %v", err)
	}
	Eventually(t, 60*time.Second, func() error {
		if w := countTail(t, westC, "west", topic, 0, sub); w.dataAfter != 0 {
			return fmt.Errorf("west's %s would deliver %d after the expiry on east", sub, w.dataAfter)
		}
		return nil
	})
	t.Logf("B's admin requests to west: %v", adminCounts(b, "west"))
}
