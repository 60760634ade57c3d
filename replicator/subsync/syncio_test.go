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
