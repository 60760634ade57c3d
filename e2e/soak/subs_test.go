package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
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
	cfg := sidecarConfig("127.0.0.1:1", "/k", "t/ns", "east", "west")
	if !strings.Contains(cfg, "    subscriptions: [soak-failover, soak-shared, soak-exclusive]\n") {
		t.Errorf("config:\n%s", cfg)
	}
}
