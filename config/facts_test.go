package config

import (
	"slices"
	"testing"
)

// factsYAML: east, west and north copy orders into each other; south
// copies into east only; shop/other is east <-> west.
const factsYAML = `
sidecar:
  marker_key_env: GEO_FACTS_TEST_KEY
clusters:
  - {name: east, service_url: "pulsar://east:6650", admin_url: "http://east:8080"}
  - {name: west, service_url: "pulsar://west:6650", admin_url: "http://west:8080"}
  - {name: north, service_url: "pulsar://north:6650", admin_url: "http://north:8080"}
  - {name: south, service_url: "pulsar://south:6650", admin_url: "http://south:8080"}
replication:
  - {source: east, namespace: shop/orders, topics: [orders], targets: [west, north], subscriptions: [billing]}
  - {source: west, namespace: shop/orders, topics: [orders], targets: [east, north], subscriptions: [billing]}
  - {source: north, namespace: shop/orders, topics: [orders], targets: [east, west]}
  - {source: south, namespace: shop/orders, topics: [orders], targets: [east]}
  - {source: east, namespace: shop/other, topic_patterns: ["order.*"], targets: [west], subscriptions: [billing]}
  - {source: west, namespace: shop/other, topics: [orders], targets: [east]}
  - {source: east, namespace: shop/other, topic_patterns: ["ord.*"], targets: [west], subscription_patterns: [".*"]}
`

func factsConfig(t *testing.T) *Config {
	t.Helper()
	c, err := Parse([]byte(factsYAML))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCursorKinds(t *testing.T) {
	s := Sidecar{CursorPrefix: "geo-sidecar.repl"}
	tests := []struct {
		sub           string
		own, pulsar   bool
		tracked       bool // by an entry with subscription_patterns [".*"]
		trackedListed bool // by an entry with subscriptions [billing]
	}{
		{sub: "billing", tracked: true, trackedListed: true},
		{sub: "audit", tracked: true},
		{sub: "geo-sidecar.repl.west", own: true},
		{sub: "geo-sidecar.repl.history-0123abcd", own: true},
		{sub: "geo-sidecar.repl", tracked: true}, // the prefix alone is no cursor of ours
		{sub: "geo-sidecar.replica", tracked: true},
		{sub: "pulsar.repl.west", pulsar: true},
		{sub: "pulsar.dedup", pulsar: true},
		{sub: "pulsar", tracked: true},
	}
	all := Replication{SubscriptionPatterns: []string{".*"}}
	listed := Replication{Subscriptions: []string{"billing"}}
	for _, tt := range tests {
		if got := s.IsOwnCursor(tt.sub); got != tt.own {
			t.Errorf("IsOwnCursor(%q) = %v, want %v", tt.sub, got, tt.own)
		}
		if got := IsPulsarCursor(tt.sub); got != tt.pulsar {
			t.Errorf("IsPulsarCursor(%q) = %v, want %v", tt.sub, got, tt.pulsar)
		}
		if got := all.Tracks(s, tt.sub); got != tt.tracked {
			t.Errorf("Tracks(%q) with pattern .* = %v, want %v", tt.sub, got, tt.tracked)
		}
		if got := listed.Tracks(s, tt.sub); got != tt.trackedListed {
			t.Errorf("Tracks(%q) with subscriptions [billing] = %v, want %v", tt.sub, got, tt.trackedListed)
		}
	}
	if got := s.OwnCursorPrefix(); got != "geo-sidecar.repl." {
		t.Errorf("OwnCursorPrefix() = %q", got)
	}
	if !s.IsOwnCursor(s.CursorName("west")) {
		t.Errorf("CursorName(west) = %q is not IsOwnCursor", s.CursorName("west"))
	}
}

func TestEntriesCopying(t *testing.T) {
	c := factsConfig(t)
	tests := []struct {
		ns, topic, from, to string
		want                []int
	}{
		{"shop/orders", "orders", "east", "west", []int{0}},
		{"shop/orders", "orders", "east", "north", []int{0}},
		{"shop/orders", "orders", "north", "west", []int{2}},
		{"shop/orders", "orders", "south", "east", []int{3}},
		{"shop/orders", "orders", "south", "west", nil},
		{"shop/orders", "orders", "east", "east", nil},
		{"shop/orders", "payments", "east", "west", nil},
		{"shop/other", "orders", "east", "west", []int{4, 6}}, // two patterns overlap (not checked)
		{"shop/other", "ordinary", "east", "west", []int{6}},
		{"shop/other", "ordinary", "west", "east", nil},
		{"shop/none", "orders", "east", "west", nil},
	}
	for _, tt := range tests {
		got := c.EntriesCopying(tt.ns, tt.topic, tt.from, tt.to)
		if !slices.Equal(got, tt.want) {
			t.Errorf("EntriesCopying(%s, %s, %s, %s) = %v, want %v", tt.ns, tt.topic, tt.from, tt.to, got, tt.want)
		}
		if c.Copies(tt.ns, tt.topic, tt.from, tt.to) != (len(tt.want) > 0) {
			t.Errorf("Copies(%s, %s, %s, %s) disagrees with EntriesCopying", tt.ns, tt.topic, tt.from, tt.to)
		}
	}
}

func TestThirdOrigins(t *testing.T) {
	c := factsConfig(t)
	tests := []struct {
		ns, topic, a, b string
		want            []string
	}{
		{"shop/orders", "orders", "east", "west", []string{"north"}},
		{"shop/orders", "orders", "west", "east", []string{"north"}},
		{"shop/orders", "orders", "east", "north", []string{"west"}},
		{"shop/orders", "orders", "west", "north", []string{"east"}},
		{"shop/orders", "orders", "east", "south", nil}, // south copies into east only
		{"shop/orders", "payments", "east", "west", nil},
		{"shop/other", "orders", "east", "west", nil},
		{"shop/other", "orders", "west", "north", nil},
	}
	for _, tt := range tests {
		if got := c.ThirdOrigins(tt.ns, tt.topic, tt.a, tt.b); !slices.Equal(got, tt.want) {
			t.Errorf("ThirdOrigins(%s, %s, %s, %s) = %v, want %v", tt.ns, tt.topic, tt.a, tt.b, got, tt.want)
		}
	}
	// Two entries from one origin into a and b: one origin, named once.
	c.Replication = append(c.Replication,
		Replication{Source: "south", Namespace: "shop/orders", Topics: []string{"orders"}, Targets: []string{"west"}})
	if got := c.ThirdOrigins("shop/orders", "orders", "east", "west"); !slices.Equal(got, []string{"north", "south"}) {
		t.Errorf("with south -> west added: %v, want [north south]", got)
	}
}
