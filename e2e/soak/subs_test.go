package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// TestSlackOf: one snapshot interval of a partition's traffic, both
// clusters' load spread over the topics and the topic's partitions,
// rounded up.
func TestSlackOf(t *testing.T) {
	for _, tc := range []struct {
		rate int
		tk   topicKind
		want int64
	}{
		{100, topicKind{Short: "plain"}, 50},                 // 200/4 (the late topic too)
		{100, topicKind{Short: "parted", Partitions: 4}, 13}, // 50/4 = 12.5
		{30, topicKind{Short: "single"}, 15},
		{1, topicKind{Short: "parted", Partitions: 4}, 1},
	} {
		if got := slackOf(tc.rate, tc.tk); got != tc.want {
			t.Errorf("rate %d %s: slack %d, want %d", tc.rate, tc.tk.Short, got, tc.want)
		}
	}
}

// TestSubBacklogOver: the goal is the source's backlog plus the slack.
func TestSubBacklogOver(t *testing.T) {
	for _, tc := range []struct {
		b    SubBacklog
		over bool
	}{
		{SubBacklog{Source: 0, Target: 0, Slack: 17}, false},
		{SubBacklog{Source: 10, Target: 27, Slack: 17}, false},
		{SubBacklog{Source: 10, Target: 28, Slack: 17}, true},
		{SubBacklog{Source: 30, Target: 0, Slack: 17}, false},
	} {
		if got := tc.b.Over(); got != tc.over {
			t.Errorf("%+v: over %v, want %v", tc.b, got, tc.over)
		}
	}
}

func TestTopicPartitions(t *testing.T) {
	if got := topicPartitions("t/ns", topicKind{Short: "plain"}); len(got) != 1 || got[0] != "persistent://t/ns/plain" {
		t.Errorf("plain: %v", got)
	}
	got := topicPartitions("t/ns", topicKind{Short: "parted", Partitions: 4})
	if len(got) != 4 || got[3] != "persistent://t/ns/parted-partition-3" {
		t.Errorf("parted: %v", got)
	}
}

// TestWriteSubs: the report gives each row, source beside target, and
// whether the goal was met; a row over the goal is named.
func TestWriteSubs(t *testing.T) {
	rows := []SubBacklog{
		{Sub: "soak-shared", Partition: "persistent://t/ns/parted-partition-1", From: "east", To: "west", Source: 3, Target: 5, Slack: 17, TargetConsumed: true},
		{Sub: "soak-exclusive", Partition: "persistent://t/ns/plain", From: "east", To: "west", Source: 0, Target: 400, Slack: 67},
	}
	for _, tc := range []struct {
		r    SubsResult
		want []string
	}{
		{SubsResult{Received: 100, Acked: 90, Rows: rows[:1], Settled: true, After: 4 * time.Second}, []string{
			"100 messages received, 90 acknowledged",
			"met, read 4s after the drain",
			"soak-shared  east->west  parted-partition-1               3               5     17                 yes  ok",
		}},
		{SubsResult{Rows: rows, After: time.Minute}, []string{
			"MISSED, last read 1m0s after the drain (flagged; does not fail the run)",
			"soak-exclusive  east->west               plain               0             400     67                  no  OVER",
		}},
		{SubsResult{Err: "stats of x on west:\n refused"}, []string{"not read: stats of x on west: refused"}},
	} {
		var b bytes.Buffer
		writeSubs(&b, tc.r)
		for _, want := range tc.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("lacks %q:\n%s", want, b.String())
			}
		}
	}
}

// TestSidecarConfigSubscriptions: every instance keeps every
// application's subscription in step.
func TestSidecarConfigSubscriptions(t *testing.T) {
	cfg := sidecarConfig("127.0.0.1:1", "/k", "t/ns", topologyOf(false), "east", "a", e2e.Cluster{}, topicPatterns(false, false))
	if !strings.Contains(cfg, "    subscriptions: [soak-failover, soak-shared, soak-exclusive]\n") {
		t.Errorf("config:\n%s", cfg)
	}
}

// TestSidecarConfigNorth: with north, east copies to west and north,
// north to east (the markers' way back), west to east only; east's b
// instance reaches north through the WAN proxy's addresses, every other
// instance and cluster directly.
func TestSidecarConfigNorth(t *testing.T) {
	topo := topologyOf(true)
	behind := e2e.Cluster{Name: "north", ServiceURL: "pulsar://127.0.0.1:1", AdminURL: "http://127.0.0.1:2"}
	for _, tc := range []struct {
		src, suffix, targets string
		wan                  bool
	}{
		{"east", "a", "[west, north]", false},
		{"east", "b", "[west, north]", true},
		{"west", "b", "[east]", false},
		{"north", "b", "[east]", false},
	} {
		cfg := sidecarConfig("127.0.0.1:1", "/k", "t/ns", topo, tc.src, tc.suffix, behind, topicPatterns(false, false))
		if !strings.Contains(cfg, "    targets: "+tc.targets+"\n") || !strings.Contains(cfg, "  - source: "+tc.src+"\n") {
			t.Errorf("%s-%s: config:\n%s", tc.src, tc.suffix, cfg)
		}
		if strings.Contains(cfg, behind.ServiceURL+"\n") != tc.wan || strings.Contains(cfg, behind.AdminURL+"\n") != tc.wan {
			t.Errorf("%s-%s: through the WAN %v, config:\n%s", tc.src, tc.suffix, tc.wan, cfg)
		}
		if !strings.Contains(cfg, "  - name: north\n") {
			t.Errorf("%s-%s: north not among the clusters:\n%s", tc.src, tc.suffix, cfg)
		}
	}
	if got := topo.WANInstance(); got != "east-b" {
		t.Errorf("WANInstance = %q", got)
	}
	reach := topo.Reach()
	if !slices.Equal(reach["east"], []string{"east", "west", "north"}) || !slices.Equal(reach["west"], []string{"west", "east"}) {
		t.Errorf("reach %v", reach)
	}
}

// TestTopicPatternsReconfig: without the config change every topic is
// copied; with it the added topic is under topic_patterns only after the
// change, every load topic (the late one too) before and after, and the
// applications do not consume it.
func TestTopicPatternsReconfig(t *testing.T) {
	if got := topicPatterns(false, false); got != `[".*"]` {
		t.Errorf("without the change: %s", got)
	}
	before, after := topicPatterns(true, false), topicPatterns(true, true)
	if want := `["plain", "parted", "single", "late"]`; before != want {
		t.Errorf("before the change: %s, want %s", before, want)
	}
	if want := `["plain", "parted", "single", "late", "added"]`; after != want {
		t.Errorf("after the change: %s, want %s", after, want)
	}
	if n := len(runTopics(true)); n != len(loadTopics)+1 || len(runTopics(false)) != len(loadTopics) {
		t.Errorf("runTopics: %d with the change", n)
	}
	for _, tk := range appTopics() {
		if tk.Added || tk.Late {
			t.Errorf("applications consume %s", tk.Short)
		}
	}
	if reconfigAt(3*time.Minute) != 90*time.Second || reconfigAt(3*time.Minute) <= lateAt(3*time.Minute) {
		t.Errorf("reconfigAt(3m) = %s", reconfigAt(3*time.Minute))
	}
}
