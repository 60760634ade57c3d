package replicator

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/entrypath"
)

// The sidecar gives each target cluster of the pairs it runs a budget of
// its own, an equal share of entrypath.InflightBudget.
func TestSidecarBudgetPerTarget(t *testing.T) {
	cfg, err := config.Load("../config/testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sidecar.MarkerKeyFile, cfg.Sidecar.MarkerKeyAcceptedFile = "", "" // not on this machine; no budget depends on them
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
		seen := map[*entrypath.ByteBudget]bool{}
		for _, target := range tt.targets {
			b := s.budgets.Of(target)
			if b == nil || seen[b] {
				t.Fatalf("--cluster %q: target %s has budget %p, want one of its own", tt.cluster, target, b)
			}
			seen[b] = true
			if want := int64(entrypath.InflightBudget / len(tt.targets)); b.Limit() != want {
				t.Errorf("--cluster %q: target %s limit %d, want %d", tt.cluster, target, b.Limit(), want)
			}
		}
	}
}
