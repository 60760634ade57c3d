package replicator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
)

// A pair whose namespace is missing on the target, or whose credentials
// may not administer it there, starts no partition and says so by name;
// before, a non-partitioned topic passed discovery and its partition
// retried TopicNotFound at debug level while readiness said ok.
func TestPairTargetChecked(t *testing.T) {
	tests := []struct {
		name string
		fail error
		want string // in the error; "" for none
	}{
		{"namespace missing", rest.Error{Code: 404, Reason: "Namespace does not exist"}, "namespace negt/ns does not exist on west"},
		{"forbidden", rest.Error{Code: 403, Reason: "Unauthorized"}, "may not administer namespace negt/ns there (HTTP 403)"},
		{"unauthenticated", rest.Error{Code: 401}, "(HTTP 401)"},
		{"unreachable is not a setup problem", errors.New("connection refused"), ""},
		{"fine", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := &fakeControl{have: map[string]int{}}
			remote := &fakeControl{have: map[string]int{}, fail: tt.fail}
			p := &pair{rep: config.Replication{Source: "east", Namespace: "negt/ns"}, cfg: &config.Config{},
				local: &cluster.Clients{Name: "east", Control: local}, remote: &cluster.Clients{Name: "west", Control: remote},
				m: metrics.New(nil), log: zaptest.NewLogger(t), running: map[string]*worker{}}
			_, err := p.discover(context.Background())
			if tt.want == "" {
				if errors.Is(err, errPairSetup) {
					t.Fatalf("discover: %v, want no setup problem", err)
				}
				return
			}
			if !errors.Is(err, errPairSetup) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("discover: %v, want a setup problem saying %q", err, tt.want)
			}
			if len(p.running) != 0 {
				t.Fatalf("%d partitions started", len(p.running))
			}
		})
	}
}

// The problem is the pair's readiness and metric while it lasts, and both
// clear once the target is set up.
func TestPairProblemReported(t *testing.T) {
	remote := &fakeControl{have: map[string]int{}, fail: rest.Error{Code: 404}}
	m := metrics.New(nil)
	p := &pair{rep: config.Replication{Source: "east", Namespace: "negt/ns"}, cfg: &config.Config{},
		local: &cluster.Clients{Name: "east", Control: &fakeControl{have: map[string]int{}}}, remote: &cluster.Clients{Name: "west", Control: remote},
		m: m, log: zaptest.NewLogger(t), running: map[string]*worker{}, interval: 10 * time.Millisecond}
	s := &Sidecar{pairs: []*pair{p}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.run(ctx, func() { s.ready.Store(true) }) }()
	defer wg.Wait()
	defer cancel()
	problem := func() float64 { return metricstest.Gauge(m.PairProblems, "east", "west") }
	waitUntil(t, "the problem reported", func() bool { return s.NotReady() != "" && problem() == 1 })
	if why := s.NotReady(); !strings.Contains(why, "east->west negt/ns") || !strings.Contains(why, "does not exist on west") {
		t.Errorf("not ready because %q, want the pair and the missing namespace named", why)
	}
	remote.mu.Lock()
	remote.fail = nil
	remote.mu.Unlock()
	waitUntil(t, "the problem cleared", func() bool { return s.NotReady() == "" && problem() == 0 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
