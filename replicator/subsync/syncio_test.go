package subsync

import (
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// TestSubAdminStateOf: the state read from a subscription's stats: its
// type, and the applications' consumers only (a move's own, named under
// the follow prefix, is not one of them).
func TestSubAdminStateOf(t *testing.T) {
	p := pulsarSubAdmin{followPrefix: "geo-sidecar.repl.follow-"}
	tests := []struct {
		name string
		ss   utils.SubscriptionStats
		want subscription.State
	}{
		{"Failover, two applications", utils.SubscriptionStats{SubType: "Failover",
			Consumers: []utils.ConsumerStats{{ConsumerName: "a"}, {ConsumerName: "b"}}},
			subscription.State{Exists: true, Type: subscription.Failover, Consumers: 2}},
		{"a move attached beside one", utils.SubscriptionStats{SubType: "Shared",
			Consumers: []utils.ConsumerStats{{ConsumerName: "geo-sidecar.repl.follow-1a2b3c4d"}, {ConsumerName: "app"}}},
			subscription.State{Exists: true, Type: subscription.Shared, Consumers: 1}},
		{"only a move", utils.SubscriptionStats{SubType: "Failover",
			Consumers: []utils.ConsumerStats{{ConsumerName: "geo-sidecar.repl.follow-1a2b3c4d"}}},
			subscription.State{Exists: true, Type: subscription.Failover}},
		{"Key_Shared out of order", utils.SubscriptionStats{SubType: "Key_Shared", AllowOutOfOrderDelivery: true},
			subscription.State{Exists: true, Type: subscription.KeyShared, AllowOutOfOrder: true}},
		{"nobody since the topic loaded", utils.SubscriptionStats{SubType: "None"},
			subscription.State{Exists: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.stateOf(tt.ss); got != tt.want {
				t.Errorf("stateOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestStatsSourceSubStats: the shared reading counts the applications'
// consumers, not a move's, and carries the backlog, the timestamp and the
// ranges acknowledged one by one.
func TestStatsSourceSubStats(t *testing.T) {
	s := adminStats{followPrefix: "geo-sidecar.repl.follow-"}
	got := s.subStats(map[string]utils.SubscriptionStats{
		"app": {MsgBacklog: 7, LastMarkDeleteAdvancedTimestamp: 11, NonContiguousDeletedMessagesRanges: 2,
			Consumers: []utils.ConsumerStats{{ConsumerName: "geo-sidecar.repl.follow-1a2b3c4d"}, {ConsumerName: "app-1"}}},
		"standby": {MsgBacklog: 3, Consumers: []utils.ConsumerStats{{ConsumerName: "geo-sidecar.repl.follow-1a2b3c4d"}}},
	})
	want := map[string]SubStat{
		"app":     {Backlog: 7, MarkDeleteAdvanced: 11, Ranges: 2, Consumers: 1},
		"standby": {Backlog: 3},
	}
	if len(got) != len(want) || got["app"] != want["app"] || got["standby"] != want["standby"] {
		t.Errorf("subStats = %+v, want %+v", got, want)
	}
}
