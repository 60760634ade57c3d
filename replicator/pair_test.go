package replicator

import (
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// start: latest skips only what existed when replication was set up: a
// topic created later, or a partition added by growth, is copied from its
// first message (issue 20: at latest, 200 of 220 messages of a topic
// created after start-up were never copied).
func TestStartLatestOnlyAtSetup(t *testing.T) {
	orders := topicInfo{name: "persistent://t/ns/orders", partitions: 2}
	grown := topicInfo{name: orders.name, partitions: 3}
	fresh := topicInfo{name: "persistent://t/ns/fresh-1"}
	tests := []struct {
		name   string
		start  string
		passes [][]topicInfo // discovery passes, in order
		want   map[string]wire.InitialPosition
	}{
		{"earliest: every partition", config.StartEarliest,
			[][]topicInfo{{orders}, {orders, fresh}},
			map[string]wire.InitialPosition{orders.name + "-partition-0": wire.Earliest, fresh.name: wire.Earliest}},
		{"latest: the first pass's partitions", config.StartLatest,
			[][]topicInfo{{orders}},
			map[string]wire.InitialPosition{orders.name + "-partition-0": wire.Latest, orders.name + "-partition-1": wire.Latest}},
		{"latest: a topic created later", config.StartLatest,
			[][]topicInfo{{orders}, {orders, fresh}},
			map[string]wire.InitialPosition{orders.name + "-partition-1": wire.Latest, fresh.name: wire.Earliest}},
		{"latest: a partition added later", config.StartLatest,
			[][]topicInfo{{orders}, {grown}},
			map[string]wire.InitialPosition{orders.name + "-partition-0": wire.Latest, orders.name + "-partition-2": wire.Earliest}},
		{"latest: the first pass found nothing", config.StartLatest,
			[][]topicInfo{{}, {fresh}},
			map[string]wire.InitialPosition{fresh.name: wire.Earliest}},
		{"latest: a topic deleted and created again", config.StartLatest,
			[][]topicInfo{{orders, fresh}, {orders}, {orders, fresh}},
			map[string]wire.InitialPosition{orders.name + "-partition-0": wire.Latest, fresh.name: wire.Earliest}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pair{rep: config.Replication{Start: tt.start}, cfg: &config.Config{},
				local: &cluster.Clients{Name: "east"}, remote: &cluster.Clients{Name: "west"},
				m: metrics.New(nil), log: zaptest.NewLogger(t)}
			for _, pass := range tt.passes {
				p.noteListed(pass)
			}
			for pt, want := range tt.want {
				got := p.entryPartition(pt).Start
				if got != want {
					t.Errorf("%s starts at %v, want %v", pt, got, want)
				}
			}
		})
	}
}

// The pair hands its running partitions to the continuous verifier, in
// name order, each with its active flag; without sidecar.verify it hands
// nothing and starts nothing.
func TestPairAssignsVerifier(t *testing.T) {
	p := &pair{running: map[string]*worker{"persistent://t/ns/b": {}, "persistent://t/ns/a": {}}}
	p.noteAssigned()
	if got := p.assignedNow(); got != nil {
		t.Errorf("verifier off: assigned %v", got)
	}
	p.runVerifier(t.Context())() // off: returns at once
	p.verify = &config.Verify{}
	p.noteAssigned()
	got := p.assignedNow()
	if len(got) != 2 || got[0].Partition != "persistent://t/ns/a" || got[1].Partition != "persistent://t/ns/b" ||
		got[0].Active != &p.running["persistent://t/ns/a"].active {
		t.Fatalf("assigned %+v", got)
	}
	p.running["persistent://t/ns/a"].active.Store(true)
	if !got[0].Active.Load() || got[1].Active.Load() {
		t.Error("the verifier does not see the partitions' active flags")
	}
}
