package replicator

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/entrypath"
)

// The sidecar gives each target cluster of the pairs it runs a receive
// pool of its own, an equal share of entrypath.ReceiveBudget.
func TestSidecarReceivePoolPerTarget(t *testing.T) {
	cfg, err := config.Load("../config/testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sidecar.MarkerKeyFile, cfg.Sidecar.MarkerKeyAcceptedFile = "", "" // not on this machine; no pool depends on them
	for _, tt := range []struct {
		cluster string
		targets []string
	}{
		{"", []string{"west", "north_2", "east"}},
		{"east", []string{"west", "north_2"}},
	} {
		s, err := New(cfg, Options{Cluster: tt.cluster})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[*entrypath.ReceivePool]bool{}
		for _, target := range tt.targets {
			p := s.pools.Of(target)
			if p == nil || seen[p] {
				t.Fatalf("--cluster %q: target %s has pool %p, want one of its own", tt.cluster, target, p)
			}
			seen[p] = true
			if want := int64(entrypath.ReceiveBudget / len(tt.targets)); p.Limit() != want {
				t.Errorf("--cluster %q: target %s limit %d, want %d", tt.cluster, target, p.Limit(), want)
			}
		}
	}
}
