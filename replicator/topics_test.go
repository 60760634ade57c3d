package replicator

import (
	"fmt"
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/config"
)

func TestPartitionNames(t *testing.T) {
	const name = "persistent://acme/orders/events"
	tests := []struct {
		partitions int
		want       []string
	}{
		{0, []string{name}},
		{1, []string{name + "-partition-0"}},
		{3, []string{name + "-partition-0", name + "-partition-1", name + "-partition-2"}},
		{12, func() []string {
			var out []string
			for i := range 12 {
				out = append(out, fmt.Sprintf("%s-partition-%d", name, i))
			}
			return out
		}()},
	}
	for _, tt := range tests {
		got := topicInfo{name: name, partitions: tt.partitions}.partitionNames()
		if !slices.Equal(got, tt.want) {
			t.Errorf("partitions=%d: partitionNames() = %v, want %v", tt.partitions, got, tt.want)
		}
	}
}

const selectYAML = `
clusters:
  - {name: a, service_url: "pulsar://a:6650", admin_url: "http://a:8080"}
  - {name: b, service_url: "pulsar://b:6650", admin_url: "http://b:8080"}
replication:
  - source: a
    namespace: acme/orders
    topics: [orders, payments]
    topic_patterns: ["audit-.*", "events\\.v[0-9]+"]
    targets: [b]
  - source: a
    namespace: acme/all
    topic_patterns: [".*"]
    targets: [b]
`

func TestSelected(t *testing.T) {
	cfg, err := config.Parse([]byte(selectYAML))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	listed, all := cfg.Replication[0], cfg.Replication[1]
	tests := []struct {
		rep  config.Replication
		name string
		want bool
	}{
		{listed, "persistent://acme/orders/orders", true},
		{listed, "persistent://acme/orders/payments", true},
		{listed, "persistent://acme/orders/audit-2024", true},
		{listed, "persistent://acme/orders/events.v2", true},
		// Listed names and patterns match the whole short name.
		{listed, "persistent://acme/orders/orders-dlq", false},
		{listed, "persistent://acme/orders/my-orders", false},
		{listed, "persistent://acme/orders/audit", false},
		{listed, "persistent://acme/orders/xaudit-1", false},
		{listed, "persistent://acme/orders/events.vx", false},
		{listed, "persistent://acme/orders/other", false},
		// Non-persistent topics are never replicated.
		{listed, "non-persistent://acme/orders/orders", false},
		{all, "non-persistent://acme/all/anything", false},
		{all, "orders", false},
		// System topics are never replicated, even when a pattern matches.
		{all, "persistent://acme/all/anything", true},
		{all, "persistent://acme/all/__change_events", false},
		{all, "persistent://acme/all/__transaction_buffer_snapshot", false},
		{all, "persistent://acme/all/_single-underscore", true},
	}
	for _, tt := range tests {
		if got := selected(tt.rep, tt.name); got != tt.want {
			t.Errorf("selected(%s, %q) = %v, want %v", tt.rep.Namespace, tt.name, got, tt.want)
		}
	}
}

func TestShortName(t *testing.T) {
	tests := map[string]string{
		"persistent://acme/orders/events":             "events",
		"persistent://acme/orders/events-partition-3": "events-partition-3",
		"events": "events",
	}
	for in, want := range tests {
		if got := shortName(in); got != want {
			t.Errorf("shortName(%q) = %q, want %q", in, got, want)
		}
	}
}
