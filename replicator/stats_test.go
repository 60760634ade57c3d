package replicator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"go.uber.org/zap/zaptest"
)

// A caught-up topic's stats are asked for again at the next round only
// once one of its cursors read something; otherwise after quietRefresh.
func TestRefreshStatsQuietTopic(t *testing.T) {
	var calls atomic.Int32
	backlog := atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/stats") {
			http.NotFound(rw, r)
			return
		}
		calls.Add(1)
		rw.Header().Set("Content-Type", "application/json")
		b := "0"
		if backlog.Load() > 0 {
			b = "5"
		}
		_, _ = rw.Write([]byte(`{"subscriptions":{"geo-sidecar.repl.west":{"msgBacklog":` + b + `,"consumers":[{"consumerName":"c"}]}}}`))
	}))
	defer srv.Close()
	admin, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	topic := topicInfo{name: "persistent://t/ns/orders"}
	w := &worker{topic: topic.name}
	p := &pair{
		local: &cluster.Conn{Name: "east", Admin: admin}, remote: &cluster.Conn{Name: "west"},
		subscription: "geo-sidecar.repl.west",
		running:      map[string]*worker{topic.name: w},
		quiet:        map[string]time.Time{}, gauged: map[string]bool{},
		m: metrics.New(nil), log: zaptest.NewLogger(t),
	}
	ctx := context.Background()
	round := func(want int32, what string) {
		t.Helper()
		before := calls.Load()
		p.refreshStats(ctx, []topicInfo{topic})
		if got := calls.Load() - before; got != want {
			t.Errorf("%s: %d stats requests, want %d", what, got, want)
		}
	}
	round(1, "first round")
	round(0, "caught up, nothing read")
	w.received.Store(true)
	backlog.Store(1)
	round(1, "its cursor read something")
	round(1, "a backlog: not quiet")
	backlog.Store(0)
	round(1, "caught up again")
	round(0, "quiet again")
	p.quiet[topic.name] = time.Now().Add(-quietRefresh)
	round(1, "quietRefresh passed")
}
