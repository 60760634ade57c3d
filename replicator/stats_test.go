package replicator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	gconfig "github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync"
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
		local: &cluster.Clients{Name: "east", Admin: admin}, remote: &cluster.Clients{Name: "west"},
		subscription: "geo-sidecar.repl.west",
		running:      map[string]*worker{topic.name: w},
		quiet:        map[string]time.Time{}, gauged: map[string]bool{},
		asked: map[string]time.Time{}, news: map[string]bool{},
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

// A round asks about at most statsPerRound topics, never-asked ones
// first, then those with news, least recently asked first, and news not
// served in one round is kept for the next; caught-up topics with no news
// are asked again after quietRefresh, at most quietPerRound a round.
func TestRefreshStatsBudget(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/stats") {
			http.NotFound(rw, r)
			return
		}
		mu.Lock()
		asked[strings.TrimSuffix(r.URL.Path, "/stats")]++
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte(`{"subscriptions":{"geo-sidecar.repl.west":{"msgBacklog":0,"consumers":[{"consumerName":"c"}]}}}`))
	}))
	defer srv.Close()
	admin, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	const n = 250
	var topics []topicInfo
	running := map[string]*worker{}
	for i := range n {
		tp := topicInfo{name: fmt.Sprintf("persistent://t/ns/t%03d", i)}
		topics = append(topics, tp)
		running[tp.name] = &worker{topic: tp.name}
	}
	p := &pair{
		local: &cluster.Clients{Name: "east", Admin: admin}, remote: &cluster.Clients{Name: "west"},
		subscription: "geo-sidecar.repl.west", running: running,
		quiet: map[string]time.Time{}, gauged: map[string]bool{},
		asked: map[string]time.Time{}, news: map[string]bool{},
		m: metrics.New(nil), log: zaptest.NewLogger(t),
	}
	// round runs one refresh and returns the topics it asked about (by
	// index); each refresh is a new round a millisecond later.
	round := func() []int {
		t.Helper()
		mu.Lock()
		clear(asked)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		p.refreshStats(context.Background(), topics)
		mu.Lock()
		defer mu.Unlock()
		var got []int
		for path, k := range asked {
			if k != 1 {
				t.Errorf("%s asked %d times in one round", path, k)
			}
			var i int
			fmt.Sscanf(path[strings.LastIndex(path, "/t")+2:], "%d", &i)
			got = append(got, i)
		}
		slices.Sort(got)
		return got
	}
	span := func(from, to int) []int {
		var out []int
		for i := from; i < to; i++ {
			out = append(out, i)
		}
		return out
	}
	expect := func(what string, got, want []int) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: asked %v, want %v", what, got, want)
		}
	}
	expect("round 1: never asked", round(), span(0, 100))
	expect("round 2: never asked", round(), span(100, 200))
	expect("round 3: the rest", round(), span(200, 250))
	expect("round 4: all caught up, no news", round(), nil)

	// News on every topic, and on one more (t010) while its first news
	// still waits: served in order of when each was last asked.
	for _, w := range running {
		w.received.Store(true)
	}
	expect("round 5: news", round(), span(0, 100))
	running[topics[10].name].received.Store(true)
	expect("round 6: news kept from round 5", round(), span(100, 200))
	expect("round 7: the rest, then t010's new news", round(), append([]int{10}, span(200, 250)...))
	expect("round 8: nothing new", round(), nil)

	// Caught up long ago: quietPerRound a round.
	for _, tp := range topics {
		p.quiet[tp.name] = time.Now().Add(-quietRefresh)
	}
	if got := round(); len(got) != quietPerRound {
		t.Errorf("quiet topics due: %d asked in a round, want %d", len(got), quietPerRound)
	}
}

// TestRefreshStatsOffersReading: where the pair keeps subscriptions in
// step, the backlog gauges' stats request asks for precise backlogs and
// hands its answer to the topic's poller, so that a resting sync sees it
// without a request of its own; without tracked subscriptions it does not.
func TestRefreshStatsOffersReading(t *testing.T) {
	var precise atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/stats") {
			http.NotFound(rw, r)
			return
		}
		if r.URL.Query().Get("getPreciseBacklog") == "true" {
			precise.Add(1)
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte(`{"subscriptions":{"geo-sidecar.repl.west":{"msgBacklog":0,"consumers":[{"consumerName":"c"}]},` +
			`"billing":{"msgBacklog":0,"lastMarkDeleteAdvancedTimestamp":42,"consumers":[{"consumerName":"app"}]}}}`))
	}))
	defer srv.Close()
	admin, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://t/ns/orders"
	for _, tracked := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracked=%v", tracked), func(t *testing.T) {
			precise.Store(0)
			pollers := subsync.NewPollers(100, 10, nil)
			poller, release := pollers.Acquire("east", subsync.NewStatsSource(admin, ""), topic, false)
			defer release()
			p := &pair{
				local: &cluster.Clients{Name: "east", Admin: admin}, remote: &cluster.Clients{Name: "west"},
				subscription: "geo-sidecar.repl.west", running: map[string]*worker{topic: {topic: topic}},
				quiet: map[string]time.Time{}, gauged: map[string]bool{},
				asked: map[string]time.Time{}, news: map[string]bool{},
				m: metrics.New(nil), log: zaptest.NewLogger(t), pollers: pollers,
				keys: marker.NewKeys([]byte("0123456789abcdef0123456789abcdef")), cfg: &gconfig.Config{},
			}
			if tracked {
				p.rep.Subscriptions = []string{"billing"}
			}
			p.refreshStats(context.Background(), []topicInfo{{name: topic}})
			r := poller.Latest()
			if !tracked {
				if r != nil || precise.Load() != 0 {
					t.Errorf("no tracked subscription: offered %v, precise asked %d times", r, precise.Load())
				}
				return
			}
			if precise.Load() != 1 {
				t.Errorf("precise backlog asked %d times, want 1", precise.Load())
			}
			if r == nil {
				t.Fatal("no reading offered")
			}
			if got := r.Partitions[topic]["billing"]; got != (subsync.SubStat{MarkDeleteAdvanced: 42, Consumers: 1}) {
				t.Errorf("billing in the offered reading: %+v", got)
			}
		})
	}
}

// TestRefreshStatsCaughtUpByServlet: with sidecar.positions: servlet and
// subscriptions kept in step, a topic whose cursor the servlet's shared
// backlogs reading shows caught up gets its gauges at 0 with no stats
// request; a backlog there, or a broker without the servlet, and the
// stats request reads it as before.
func TestRefreshStatsCaughtUpByServlet(t *testing.T) {
	const topic = "persistent://t/ns/orders"
	const cursor = "geo-sidecar.repl.west"
	tests := []struct {
		name      string
		servlet   int // HTTP status of the backlogs endpoint
		entries   int64
		wantStats int32
		wantAge   float64
	}{
		{"caught up: no stats request", http.StatusOK, 0, 0, 0},
		{"a backlog: the stats request reads its age", http.StatusOK, 5, 1, 7},
		{"no servlet: the stats request", http.StatusNotFound, 0, 1, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stats atomic.Int32
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				rw.Header().Set("Content-Type", "application/json")
				switch {
				case r.URL.Path == "/admin/v2/brokers":
					_, _ = fmt.Fprintf(rw, `[%q]`, strings.TrimPrefix(srv.URL, "http://"))
				case r.URL.Path == "/geo-sidecar/backlogs":
					if tt.servlet != http.StatusOK {
						rw.WriteHeader(tt.servlet)
						return
					}
					_, _ = fmt.Fprintf(rw, `{"v":1,"backlogs":[{"topic":%q,"subscription":%q,"entries":%d}]}`, topic, cursor, tt.entries)
				case strings.HasSuffix(r.URL.Path, "/stats"):
					stats.Add(1)
					_, _ = fmt.Fprintf(rw, `{"subscriptions":{%q:{"msgBacklog":5,"earliestMsgPublishTimeInBacklog":%d,"consumers":[{"consumerName":"c"}]}}}`,
						cursor, time.Now().Add(-7*time.Second).UnixMilli())
				default:
					http.NotFound(rw, r)
				}
			}))
			defer srv.Close()
			local, err := cluster.Dial(gconfig.Cluster{Name: "east", ServiceURL: "pulsar://127.0.0.1:1", AdminURL: srv.URL}, zaptest.NewLogger(t), cluster.SecurityEvents{})
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()
			m := metrics.New(nil)
			p := &pair{
				local: local, remote: &cluster.Clients{Name: "west"},
				subscription: cursor, running: map[string]*worker{topic: {topic: topic}},
				quiet: map[string]time.Time{}, gauged: map[string]bool{},
				asked: map[string]time.Time{}, news: map[string]bool{},
				m: m, log: zaptest.NewLogger(t), pollers: subsync.NewPollers(100, 10, nil),
				keys: marker.NewKeys([]byte("0123456789abcdef0123456789abcdef")),
				cfg:  &gconfig.Config{Sidecar: gconfig.Sidecar{Positions: gconfig.PositionsServlet}},
			}
			p.rep.Namespace, p.rep.Subscriptions = "t/ns", []string{"billing"}
			p.refreshStats(context.Background(), []topicInfo{{name: topic}})
			if got := stats.Load(); got != tt.wantStats {
				t.Errorf("stats requests %d, want %d", got, tt.wantStats)
			}
			labels := []string{"east", "west", metrics.TopicLabel(topic)}
			var d dto.Metric
			if err := m.OldestAge.WithLabelValues(labels...).Write(&d); err != nil {
				t.Fatal(err)
			}
			if got := d.GetGauge().GetValue(); got < tt.wantAge-1 || got > tt.wantAge+1 {
				t.Errorf("oldest age %v, want about %v", got, tt.wantAge)
			}
			if !p.gauged[topic] {
				t.Error("the topic's gauges not set")
			}
		})
	}
}
