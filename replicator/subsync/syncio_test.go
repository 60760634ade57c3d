package subsync

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// TestSubAdminStateOf: the state read from a subscription's stats: its
// type, the Key_Shared mode only as the broker spells AUTO_SPLIT and
// STICKY (anything else is unknown, never AUTO_SPLIT), and the
// applications' consumers only (a move's own, named under the follow
// prefix, is not one of them).
func TestSubAdminStateOf(t *testing.T) {
	p := pulsarSubAdmin{followPrefix: "geo-sidecar.repl.follow-"}
	ks := func(mode string) cluster.SubscriptionStats {
		return cluster.SubscriptionStats{Type: "Key_Shared", KeySharedMode: mode, Consumers: []cluster.ConsumerStats{{ConsumerName: "app"}}}
	}
	ksState := func(m subscription.KeySharedMode) subscription.State {
		return subscription.State{Exists: true, Type: subscription.KeyShared, Mode: m, Consumers: 1}
	}
	tests := []struct {
		name string
		ss   cluster.SubscriptionStats
		want subscription.State
	}{
		{"Failover, two applications", cluster.SubscriptionStats{Type: "Failover",
			Consumers: []cluster.ConsumerStats{{ConsumerName: "a"}, {ConsumerName: "b"}}},
			subscription.State{Exists: true, Type: subscription.Failover, Consumers: 2}},
		{"a move attached beside one", cluster.SubscriptionStats{Type: "Shared",
			Consumers: []cluster.ConsumerStats{{ConsumerName: "geo-sidecar.repl.follow-1a2b3c4d"}, {ConsumerName: "app"}}},
			subscription.State{Exists: true, Type: subscription.Shared, Consumers: 1}},
		{"only a move", cluster.SubscriptionStats{Type: "Failover",
			Consumers: []cluster.ConsumerStats{{ConsumerName: "geo-sidecar.repl.follow-1a2b3c4d"}}},
			subscription.State{Exists: true, Type: subscription.Failover}},
		{"Key_Shared out of order", cluster.SubscriptionStats{Type: "Key_Shared", AllowOutOfOrderDelivery: true},
			subscription.State{Exists: true, Type: subscription.KeyShared, AllowOutOfOrder: true}},
		{"nobody since the topic loaded", cluster.SubscriptionStats{Type: "None"},
			subscription.State{Exists: true}},
		{"Key_Shared AUTO_SPLIT", ks("AUTO_SPLIT"), ksState(subscription.AutoSplit)},
		{"Key_Shared STICKY", ks("STICKY"), ksState(subscription.Sticky)},
		{"Key_Shared, mode missing", ks(""), ksState(subscription.ModeUnknown)},
		{"Key_Shared, mode lower case", ks("auto_split"), ksState(subscription.ModeUnknown)},
		{"Key_Shared, mode padded", ks("AUTO_SPLIT "), ksState(subscription.ModeUnknown)},
		{"Key_Shared, a mode added later", ks("CONSISTENT_HASHING"), ksState(subscription.ModeUnknown)},
		{"a mode on another type", cluster.SubscriptionStats{Type: "Shared", KeySharedMode: "AUTO_SPLIT"},
			subscription.State{Exists: true, Type: subscription.Shared}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.stateOf(tt.ss); got != tt.want {
				t.Errorf("stateOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestSubAdminStatesMode: over the admin client a cluster.Clients holds,
// States and State read the Key_Shared mode from the stats answer (one
// stats request for States, the stats and internal stats for State:
// none added); over a plain pulsaradmin client, whose types drop the
// field, the mode stays unknown.
func TestSubAdminStatesMode(t *testing.T) {
	const topic = "persistent://shop/orders/a-partition-0"
	sub := func(mode string) string {
		if mode != "" {
			mode = `,"keySharedMode":` + mode
		}
		return `{"subscriptions":{"app":{"type":"Key_Shared","consumers":[{"consumerName":"west-app"},` +
			`{"consumerName":"geo-sidecar.repl.follow-1"}]` + mode + `}}}`
	}
	for _, tt := range []struct {
		name  string
		stats string
		plain bool // a pulsaradmin client, not a cluster.AdminClient
		want  subscription.KeySharedMode
	}{
		{"AUTO_SPLIT", sub(`"AUTO_SPLIT"`), false, subscription.AutoSplit},
		{"STICKY", sub(`"STICKY"`), false, subscription.Sticky},
		{"missing", sub(""), false, subscription.ModeUnknown},
		{"garbage: a number", sub(`0`), false, subscription.ModeUnknown},
		{"garbage: another spelling", sub(`"AutoSplit"`), false, subscription.ModeUnknown},
		{"garbage: null", sub(`null`), false, subscription.ModeUnknown},
		{"AUTO_SPLIT through pulsaradmin's types", sub(`"AUTO_SPLIT"`), true, subscription.ModeUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				paths = append(paths, r.URL.Path)
				mu.Unlock()
				switch {
				case strings.HasSuffix(r.URL.Path, "/stats"):
					_, _ = w.Write([]byte(tt.stats))
				case strings.HasSuffix(r.URL.Path, "/internalStats"):
					_, _ = w.Write([]byte(`{"lastConfirmedEntry":"7:9","cursors":{"app":{"markDeletePosition":"7:3"}}}`))
				default:
					w.WriteHeader(http.StatusNotFound)
				}
			}))
			defer srv.Close()
			pa, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			var a pulsaradmin.Client = cluster.NewAdminClient(pa, srv.Client(), srv.URL)
			if tt.plain {
				a = pa
			}
			sa := NewSubAdmin(a, "geo-sidecar.repl.follow-")
			want := subscription.State{Exists: true, Type: subscription.KeyShared, Mode: tt.want, Consumers: 1}
			states, err := sa.States(context.Background(), topic)
			if err != nil {
				t.Fatal(err)
			}
			if got := states["app"]; got != want || len(states) != 1 {
				t.Errorf("States = %+v, want app: %+v", states, want)
			}
			st, err := sa.State(context.Background(), topic, "app")
			if err != nil {
				t.Fatal(err)
			}
			want.MarkDelete = marker.Position{Ledger: 7, Entry: 3, Batch: -1}
			if st != want {
				t.Errorf("State = %+v, want %+v", st, want)
			}
			mu.Lock()
			defer mu.Unlock()
			wantPaths := []string{"/admin/v2/persistent/shop/orders/a-partition-0/stats",
				"/admin/v2/persistent/shop/orders/a-partition-0/stats", "/admin/v2/persistent/shop/orders/a-partition-0/internalStats"}
			if !slices.Equal(paths, wantPaths) {
				t.Errorf("requests %q, want %q", paths, wantPaths)
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
