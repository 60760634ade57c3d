package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReadBackBudgetOneWindow: with sidecar.readback_budget at its floor
// (8MiB: one read-back window for west), the sidecar is killed (-9) under
// load on 8 partitions and started again, so that every partition's new
// session reads west back at once. They take turns: every message
// arrives, none twice (each read-back found the copies its partition had
// sent before the kill), and the read-back gauge never shows more than
// the one window reserved.
func TestReadBackBudgetOneWindow(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "rb")
	CreatePartitioned(t, topic, 8, "east", "west")
	listen := FreeAddr(t)
	cfg := Config(listen, []string{"east", "west"}, entry("east", ns, "topics: [rb]", "west"))
	cfg = strings.Replace(cfg, "sidecar:\n", "sidecar:\n  readback_budget: 8MiB\n", 1)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := StartSidecarFile(t, path, listen)

	// The gauges, sampled every 10 ms over both processes (one address).
	var (
		mu                    sync.Mutex
		most, waiting         float64
		samples, reservedSeen int
	)
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		probe := &Sidecar{Listen: listen}
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			r := probe.Metric("geo_sidecar_readback_reserved_bytes", `cluster="west"`)
			w := probe.Metric("geo_sidecar_readback_waiting_partitions", `cluster="west"`)
			mu.Lock()
			samples++
			most, waiting = max(most, r), max(waiting, w)
			if r > 0 {
				reservedSeen++
			}
			mu.Unlock()
		}
	}()

	const n, rate = 6000, 1000
	load := startLoad(t, Client(t, "east"), topic, "m", n, rate)
	load.waitSent(t, 2000)
	s.Kill()
	s = s.Restart()
	load.wait(t)
	got := drain(t, Client(t, "west"), topic, "check", n, 60*time.Second, 3*time.Second)
	close(stop)
	<-sampled
	missing, dups, breaks := checkPartitions(t, got, "m", n, false)
	t.Logf("readback_budget 8MiB, kill -9 / start under %d msg/s on 8 partitions: %d messages, %d missing, %d duplicates, %d out of order; %.0f skipped as already on the target; read-back gauge over %d samples: at most %.0f bytes reserved (%d samples above 0), at most %.0f partitions waiting",
		rate, n, missing, dups, breaks, s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`), samples, most, reservedSeen, waiting)
	noReadBackDuplicates(t, dups)
	if most > 8<<20 {
		t.Errorf("readback_reserved_bytes reached %.0f, over the 8MiB budget", most)
	}
	if samples == 0 {
		t.Error("no sample of the read-back gauges")
	}
}
