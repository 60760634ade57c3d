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
