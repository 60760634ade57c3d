package replicator

import (
	"context"
	"maps"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// The pair (east, west) on one partition that these tests build the sync of.
const syncTopic = "persistent://shop/orders/orders-partition-0"

var syncKey = []byte("sync-test-marker-key-0123456789")

const syncForYAML = `
sidecar:
  marker_key_env: GEO_SYNC_TEST_KEY
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
  - {source: east, namespace: shop/other, topics: [orders], targets: [west], subscriptions: [billing]}
  - {source: west, namespace: shop/other, topics: [orders], targets: [east]}
`

// TestSyncFor: the sync of a partition is built with the config's third
// origins (clusters whose copies reach both sides; south copies into east
// only) and starts Fresh only when its cursor does not exist yet and reads
// from the earliest message. A Fresh sync answers requests at once, naming
// every third origin as none seen; any other must first learn the third
// origins' watermarks.
func TestSyncFor(t *testing.T) {
	cfg, err := config.Parse([]byte(syncForYAML))
	if err != nil {
		t.Fatal(err)
	}
	own := cfg.Sidecar.CursorName("west")
	tests := []struct {
		name    string
		entry   int
		start   string
		cursors []string
		fresh   bool
		third   []string
		// atSetup: the partition was listed by the first discovery pass.
		atSetup bool
	}{
		{"new cursor from the earliest", 0, config.StartEarliest, []string{}, true, []string{"north"}, true},
		{"new cursor beside others", 0, config.StartEarliest, []string{"billing", cfg.Sidecar.CursorName("north")}, true, []string{"north"}, true},
		{"existing cursor", 0, config.StartEarliest, []string{"billing", own}, false, []string{"north"}, true},
		{"cursors unknown", 0, config.StartEarliest, nil, false, []string{"north"}, true},
		{"new cursor from the latest", 0, config.StartLatest, []string{}, false, []string{"north"}, true},
		{"latest, partition discovered after set-up", 0, config.StartLatest, []string{}, true, []string{"north"}, false},
		{"two clusters, existing cursor", 4, config.StartEarliest, []string{own}, false, nil, true},
		{"two clusters, new cursor", 4, config.StartEarliest, []string{}, true, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := cfg.Replication[tt.entry]
			rep.Start = tt.start
			p := &pair{rep: rep, cfg: cfg, keys: marker.NewKeys(syncKey),
				local: &cluster.Clients{Name: "east"}, remote: &cluster.Clients{Name: "west"},
				subscription: own, m: metrics.New(nil), log: zaptest.NewLogger(t), applied: &subsync.Applied{},
				setup: map[string]bool{syncTopic: tt.atSetup}}
			var layout *cluster.Layout
			if tt.cursors != nil {
				layout = &cluster.Layout{Cursors: tt.cursors}
			}
			s := p.syncFor(syncTopic, "orders", layout, p.startsLatest(syncTopic))

			var wantUnknown []string
			if !tt.fresh {
				wantUnknown = tt.third
			}
			if got := s.Machine.Unknown(); !slices.Equal(got, wantUnknown) {
				t.Errorf("unknown watermarks = %v, want %v", got, wantUnknown)
			}
			if !slices.Equal(s.CursorsAtStart, tt.cursors) || (s.CursorsAtStart == nil) != (tt.cursors == nil) {
				t.Errorf("cursors at start = %#v, want %#v", s.CursorsAtStart, tt.cursors)
			}
			// A request from west, read now.
			fw := &subsynctest.Sink{}
			s.Writer = fw
			subsynctest.ReadMarker(context.Background(), s, subsynctest.MarkerMsg(t, 2, 1, subsynctest.Request("west", "east", syncTopic), syncKey, "west"))
			got := fw.Take()
			if len(wantUnknown) > 0 {
				if len(got) > 0 {
					t.Errorf("request answered with %+v, want no answer before the watermarks are known", got)
				}
				// A copy from each third origin makes it answer.
				for i, c := range tt.third {
					subsynctest.ReadData(context.Background(), s, subsynctest.CopyMsg(2, int64(2+i), c, subsynctest.Pos(40, 1)))
				}
				subsynctest.ReadMarker(context.Background(), s, subsynctest.MarkerMsg(t, 2, 9, subsynctest.Request("west", "east", syncTopic), syncKey, "west"))
				got = fw.Take()
			}
			if len(got) != 1 || got[0].Kind != marker.KindSnapshotResponse {
				t.Fatalf("request answered with %+v, want one response", got)
			}
			want := map[string]marker.Position{}
			for _, c := range tt.third {
				want[c] = marker.NoneSeen
				if !tt.fresh {
					want[c] = subsynctest.Pos(40, 1)
				}
			}
			if !maps.Equal(got[0].Watermarks, want) && (len(want) > 0 || len(got[0].Watermarks) > 0) {
				t.Errorf("response watermarks = %v, want %v", got[0].Watermarks, want)
			}
		})
	}
}

// TestSyncForTracked: the sync follows the entry's subscriptions, never a
// replication cursor (this sidecar's or Pulsar's).
func TestSyncForTracked(t *testing.T) {
	cfg, err := config.Parse([]byte(syncForYAML))
	if err != nil {
		t.Fatal(err)
	}
	rep := cfg.Replication[0]
	rep.SubscriptionPatterns = []string{".*"}
	p := &pair{rep: rep, cfg: cfg, keys: marker.NewKeys(syncKey), local: &cluster.Clients{Name: "east"}, remote: &cluster.Clients{Name: "west"},
		subscription: cfg.Sidecar.CursorName("west"), m: metrics.New(nil), log: zaptest.NewLogger(t), applied: &subsync.Applied{}}
	s := p.syncFor(syncTopic, "orders", nil, false)
	for sub, want := range map[string]bool{
		"billing": true, "anything": true,
		cfg.Sidecar.CursorName("west"): false, cfg.Sidecar.CursorName("north"): false,
		"pulsar.repl.west": false,
	} {
		if got := s.Tracked(sub); got != want {
			t.Errorf("tracked(%q) = %v, want %v", sub, got, want)
		}
	}
	// No sync without a key or without subscriptions (and no admin call).
	p.keys = marker.Keys{}
	if s := p.newSync(context.Background(), syncTopic, "orders", false); s != nil {
		t.Error("newSync without a marker key returned a sync")
	}
	p.keys = marker.NewKeys(syncKey)
	p.rep = cfg.Replication[2]
	if s := p.newSync(context.Background(), syncTopic, "orders", false); s != nil {
		t.Error("newSync for an entry without subscriptions returned a sync")
	}
}
