package metrics

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
)

func TestTopicLabel(t *testing.T) {
	for in, want := range map[string]string{
		"persistent://t/ns/orders":              "t/ns/orders",
		"persistent://t/ns/orders-partition-3":  "t/ns/orders",
		"non-persistent://t/ns/a-partition-x-y": "t/ns/a",
		"t/ns/orders":                           "t/ns/orders",
	} {
		if got := TopicLabel(in); got != want {
			t.Errorf("TopicLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSubscriptionLagCombinesPartitions: every partition's sync reports
// its own lag; the topic's series is their sum (entries) and their maximum
// (seconds), and a stopped partition's share leaves with it.
func TestSubscriptionLagCombinesPartitions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	labels := [4]string{"east", "west", "t/ns/orders", "sub"}
	// Label values sorted by label name: source, subscription, target, topic.
	const key = "/east/sub/west/t/ns/orders"
	entries := func() float64 { return metricstest.Gauges(t, reg, "geo_sidecar_subscription_lag_entries")[key] }
	seconds := func() float64 { return metricstest.Gauges(t, reg, "geo_sidecar_subscription_lag_seconds")[key] }

	steps := []struct {
		name          string
		do            func()
		entries, secs float64
	}{
		{"one partition", func() { m.SetLag(labels, "west p0", 3, 1.5) }, 3, 1.5},
		{"a second one adds", func() { m.SetLag(labels, "west p1", 4, 0.5) }, 7, 1.5},
		{"a partition's new value replaces its old", func() { m.SetLag(labels, "west p0", 1, 0) }, 5, 0.5},
		{"a stopped partition leaves", func() { m.DropLag("west p1") }, 1, 0},
	}
	for _, s := range steps {
		s.do()
		if got, got2 := entries(), seconds(); got != s.entries || got2 != s.secs {
			t.Fatalf("%s: entries %v seconds %v, want %v %v", s.name, got, got2, s.entries, s.secs)
		}
	}
	m.DropLag("west p0")
	if n := len(metricstest.Gauges(t, reg, "geo_sidecar_subscription_lag_entries")); n != 0 {
		t.Fatalf("%d series left after every partition stopped, want 0", n)
	}
}

// TestVerifiedAges: a topic's verified-through age is read at each
// scrape as the oldest of its partitions' (so it grows while a walk is
// stuck), and a series goes with its last partition.
func TestVerifiedAges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := New(reg)
		ages := func() map[string]float64 {
			return metricstest.Gauges(t, reg, "geo_sidecar_verify_verified_through_age_seconds")
		}
		const key = "/east/west/t/ns/orders"
		now := time.Now()
		m.Verify.SetVerified("east", "west", "persistent://t/ns/orders-partition-0", now.Add(-2*time.Second))
		m.Verify.SetVerified("east", "west", "persistent://t/ns/orders-partition-1", now.Add(-5*time.Second))
		for i := 2; i < 8; i++ { // younger ones: the oldest must win whatever the order they are read in
			m.Verify.SetVerified("east", "west", fmt.Sprintf("persistent://t/ns/orders-partition-%d", i), now.Add(-time.Second))
		}
		for range 20 {
			if got := ages()[key]; got != 5 {
				t.Fatalf("age %v, want the oldest partition's, 5", got)
			}
		}
		for i := 2; i < 8; i++ {
			m.Verify.DropVerified("east", "west", fmt.Sprintf("persistent://t/ns/orders-partition-%d", i))
		}
		time.Sleep(10 * time.Second)
		if got := ages()[key]; got != 15 {
			t.Errorf("age %v 10 s later, want 15", got)
		}
		m.Verify.DropVerified("east", "west", "persistent://t/ns/orders-partition-1")
		if got := ages()[key]; got != 12 {
			t.Errorf("age %v after partition 1 left, want 12", got)
		}
		m.Verify.DropVerified("east", "west", "persistent://t/ns/orders-partition-0")
		if n := len(ages()); n != 0 {
			t.Errorf("%d series after every partition left", n)
		}
	})
}

// TestSubscriptionLagDrops: a partition reports to several series (one
// per subscription, and a sync per direction); dropping it takes its
// share out of each and nothing of another partition's, the oldest age
// falls back to the oldest left, and a subscription dropped alone
// (DropSubLag) leaves the partition's other series in place.
func TestSubscriptionLagDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	a := [4]string{"east", "west", "t/ns/orders", "a"}
	b := [4]string{"east", "west", "t/ns/orders", "b"}
	back := [4]string{"west", "east", "t/ns/orders", "a"}
	series := func() map[string][2]float64 {
		out := map[string][2]float64{}
		for k, v := range metricstest.Gauges(t, reg, "geo_sidecar_subscription_lag_entries") {
			out[k] = [2]float64{v, metricstest.Gauges(t, reg, "geo_sidecar_subscription_lag_seconds")[k]}
		}
		return out
	}
	// Label values sorted by label name: source, subscription, target, topic.
	const keyA, keyB, keyBack = "/east/a/west/t/ns/orders", "/east/b/west/t/ns/orders", "/west/a/east/t/ns/orders"
	m.SetLag(a, "west p0", 3, 9)
	m.SetLag(a, "west p1", 4, 2)
	m.SetLag(b, "west p0", 5, 1)
	m.SetLag(back, "east p0", 6, 4)
	steps := []struct {
		name string
		do   func()
		want map[string][2]float64
	}{
		{"an unknown partition drops nothing", func() { m.DropLag("west p7") },
			map[string][2]float64{keyA: {7, 9}, keyB: {5, 1}, keyBack: {6, 4}}},
		{"the oldest partition's age gets younger", func() { m.SetLag(a, "west p0", 3, 1) },
			map[string][2]float64{keyA: {7, 2}, keyB: {5, 1}, keyBack: {6, 4}}},
		{"one subscription dropped alone", func() { m.DropSubLag(b, "west p0") },
			map[string][2]float64{keyA: {7, 2}, keyBack: {6, 4}}},
		{"a partition leaves every series it reports to", func() { m.DropLag("west p1") },
			map[string][2]float64{keyA: {3, 1}, keyBack: {6, 4}}},
		{"the other direction's sync is another reporter", func() { m.DropLag("west p0") },
			map[string][2]float64{keyBack: {6, 4}}},
		{"a partition reports again after it was dropped", func() { m.SetLag(a, "west p0", 2, 0) },
			map[string][2]float64{keyA: {2, 0}, keyBack: {6, 4}}},
		{"and is dropped again", func() { m.DropLag("west p0"); m.DropLag("east p0") },
			map[string][2]float64{}},
	}
	for _, s := range steps {
		s.do()
		got := series()
		if len(got) != len(s.want) {
			t.Fatalf("%s: series %v, want %v", s.name, got, s.want)
		}
		for k, w := range s.want {
			if got[k] != w {
				t.Fatalf("%s: series %v, want %v", s.name, got, s.want)
			}
		}
	}
	if n, p := len(m.lag.series), len(m.lag.byPart); n != 0 || p != 0 {
		t.Errorf("%d series and %d partitions still held after every partition left", n, p)
	}
}
