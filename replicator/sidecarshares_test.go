package replicator

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/entrypath"
)

// The sidecar gives each target cluster of the pairs it runs a budget of
// its own, an equal share of sidecar.send_budget.
func TestSidecarBudgetPerTarget(t *testing.T) {
	testSharePerTarget(t, "budget", func(c *config.Config) config.ByteSize { return c.Sidecar.SendBudget }, func(s *Sidecar, target string) *entrypath.ByteBudget {
		return s.budgets.Of(target)
	})
}

// The sidecar gives each target cluster of the pairs it runs a receive
// pool of its own, an equal share of sidecar.receive_budget.
func TestSidecarReceivePoolPerTarget(t *testing.T) {
	testSharePerTarget(t, "pool", func(c *config.Config) config.ByteSize { return c.Sidecar.ReceiveBudget }, func(s *Sidecar, target string) *entrypath.ReceivePool {
		return s.pools.Of(target)
	})
}

// The sidecar gives each target cluster of the pairs it runs a read-back
// pool of its own, an equal share of sidecar.readback_budget.
func TestSidecarReadBackPoolPerTarget(t *testing.T) {
	testSharePerTarget(t, "read-back pool", func(c *config.Config) config.ByteSize { return c.Sidecar.ReadBackBudget }, func(s *Sidecar, target string) *entrypath.ReadBackPool {
		return s.readBacks.Of(target)
	})
}

// testSharePerTarget checks that, with and without --cluster, of(s,
// target) is a limit of target's own (what names it in errors) whose
// Limit is an equal share of the budget total reads from the config
// (full.yaml sets each to a value other than its default).
func testSharePerTarget[L interface {
	comparable
	Limit() int64
}](t *testing.T, what string, total func(*config.Config) config.ByteSize, of func(*Sidecar, string) L) {
	t.Helper()
	cfg, err := config.Load("../config/testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sidecar.MarkerKeyFile, cfg.Sidecar.MarkerKeyAcceptedFile = "", "" // not on this machine; no limit depends on them
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
		var none L
		seen := map[L]bool{}
		for _, target := range tt.targets {
			l := of(s, target)
			if l == none || seen[l] {
				t.Fatalf("--cluster %q: target %s has %s %p, want one of its own", tt.cluster, target, what, any(l))
			}
			seen[l] = true
			if want := int64(total(cfg)) / int64(len(tt.targets)); l.Limit() != want {
				t.Errorf("--cluster %q: target %s limit %d, want %d", tt.cluster, target, l.Limit(), want)
			}
		}
	}
}

// Each partition's replicator gets its target's budget and pools: the
// ones the sidecar built per target (nil for one would leave that bound
// out, or stop the partition at its first read-back).
func TestSidecarPartitionsGetTheirTargetsShares(t *testing.T) {
	cfg, err := config.Load("../config/testdata/good/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pairs, conns, err := s.build()
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	if len(pairs) == 0 {
		t.Fatal("no pairs built")
	}
	for _, p := range pairs {
		target := p.remote.Name
		c := p.entryPartition("persistent://t/ns/x-partition-0")
		if c.Budget == nil || c.Budget != s.budgets.Of(target) || c.Pool == nil || c.Pool != s.pools.Of(target) ||
			c.ReadBack == nil || c.ReadBack != s.readBacks.Of(target) {
			t.Errorf("pair to %s: partition budget %p, pool %p, read-back pool %p; want its target's %p, %p, %p", target,
				c.Budget, c.Pool, c.ReadBack, s.budgets.Of(target), s.pools.Of(target), s.readBacks.Of(target))
		}
	}
}
