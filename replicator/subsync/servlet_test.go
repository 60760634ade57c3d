package subsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// The positions servlet's side of the follow (servlet.go): the brokers'
// servlet faked in memory behind positions.Client's Doer.

const servletCursor = "geo.west"

// fakeBrokers is a cluster's brokers as the servlet shows them: each
// broker's subscriptions (by topic, then name) and whether it runs the
// servlet. Every answer is full (the servlet's first answer's form),
// which View turns into changes.
type fakeBrokers struct {
	mu    sync.Mutex
	subs  map[string]map[string]map[string]marker.Position // broker, topic, sub
	acked map[positions.Key][]positions.Range
	// truncated: the servlet says there are more ranges than it lists.
	truncated map[positions.Key]bool
	noPlugin  map[string]bool
	asked     map[string]int // requests per broker
	seq       int64
	// ackAsked counts the acknowledge requests per broker, ackLines the
	// moves they carried; a request waits for hold (when set) first.
	ackAsked map[string]int
	ackLines []int
	hold     chan struct{}
	noAckAPI bool // answer 404 to acknowledge (an older NAR)
	// backlogAsked counts the backlogs requests per broker.
	backlogAsked map[string]int
}

func newFakeBrokers() *fakeBrokers {
	return &fakeBrokers{subs: map[string]map[string]map[string]marker.Position{}, acked: map[positions.Key][]positions.Range{},
		noPlugin: map[string]bool{}, asked: map[string]int{}, ackAsked: map[string]int{}, backlogAsked: map[string]int{}}
}

// set puts sub of topic on broker at md.
func (f *fakeBrokers) set(broker, topic, sub string, md marker.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs[broker] == nil {
		f.subs[broker] = map[string]map[string]marker.Position{}
	}
	if f.subs[broker][topic] == nil {
		f.subs[broker][topic] = map[string]marker.Position{}
	}
	f.subs[broker][topic][sub] = md
}

func (f *fakeBrokers) requests(broker string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[broker]
}

func (f *fakeBrokers) list(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for b := range f.subs {
		out = append(out, b)
	}
	for b := range f.noPlugin {
		out = append(out, b)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeBrokers) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost {
		return f.acknowledge(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	broker := req.URL.Scheme + "://" + req.URL.Host
	f.asked[broker]++
	if f.noPlugin[broker] {
		return &http.Response{StatusCode: http.StatusNotFound, Body: io.NopCloser(strings.NewReader("not found"))}, nil
	}
	q := req.URL.Query()
	if req.URL.Path == positions.BacklogsPath {
		f.backlogAsked[broker]++
		type item struct {
			Topic        string `json:"topic"`
			Subscription string `json:"subscription"`
			Entries      int64  `json:"entries"`
		}
		items := []item{}
		for topic, subs := range f.subs[broker] {
			for sub, md := range subs {
				if slices.Contains(q["namespace"], TopicNamespace(topic)) && slices.Contains(q["subscription"], sub) {
					items = append(items, item{topic, sub, 100 - md.Entry}) // the fake's last entry is 100
				}
			}
		}
		body, _ := json.Marshal(map[string]any{"v": 1, "backlogs": items})
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(string(body)))}, nil
	}
	f.seq++
	type item struct {
		Topic        string    `json:"topic"`
		Subscription string    `json:"subscription"`
		Seq          int64     `json:"seq"`
		MarkDelete   []int64   `json:"markDelete"`
		Acked        [][]int64 `json:"acked"`
		Truncated    bool      `json:"truncated,omitempty"`
	}
	items := []item{}
	for topic, subs := range f.subs[broker] {
		if !slices.Contains(q["namespace"], TopicNamespace(topic)) {
			continue
		}
		for sub, md := range subs {
			if !slices.Contains(q["subscription"], sub) {
				continue
			}
			acked := [][]int64{}
			for _, r := range f.acked[positions.Key{Topic: topic, Subscription: sub}] {
				acked = append(acked, []int64{r.From.Ledger, r.From.Entry, r.To.Ledger, r.To.Entry})
			}
			items = append(items, item{topic, sub, f.seq, []int64{md.Ledger, md.Entry}, acked, f.truncated[positions.Key{Topic: topic, Subscription: sub}]})
		}
	}
	body, _ := json.Marshal(map[string]any{"v": 1, "epoch": "e1", "seq": f.seq, "full": true, "subscriptions": items})
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(string(body)))}, nil
}

// acknowledge answers POST /geo-sidecar/acknowledge as the servlet does:
// cumulatively, forward only, per line.
func (f *fakeBrokers) acknowledge(req *http.Request) (*http.Response, error) {
	if f.hold != nil {
		<-f.hold
	}
	body, _ := io.ReadAll(req.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	broker := req.URL.Scheme + "://" + req.URL.Host
	if f.noAckAPI || f.noPlugin[broker] || req.URL.Path != positions.AckPath {
		return &http.Response{StatusCode: http.StatusNotFound, Body: io.NopCloser(strings.NewReader("not found"))}, nil
	}
	f.ackAsked[broker]++
	type result struct {
		Topic        string  `json:"topic"`
		Subscription string  `json:"subscription"`
		Outcome      string  `json:"outcome"`
		MarkDelete   []int64 `json:"markDelete,omitempty"`
	}
	results := []result{}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	f.ackLines = append(f.ackLines, len(lines))
	for _, line := range lines {
		var rawTopic, rawSub string
		var l, e int64
		fmt.Sscanf(line, "%s %s %d %d", &rawTopic, &rawSub, &l, &e)
		topic, _ := url.QueryUnescape(rawTopic)
		sub, _ := url.QueryUnescape(rawSub)
		r := result{Topic: topic, Subscription: sub}
		md, ok := f.subs[broker][topic][sub]
		target := marker.Position{Ledger: l, Entry: e, Batch: -1}
		switch {
		case f.subs[broker][topic] == nil:
			r.Outcome = "not-here"
		case !ok:
			r.Outcome = "no-subscription"
		case target.Compare(md) <= 0:
			r.Outcome, r.MarkDelete = "not-forward", []int64{md.Ledger, md.Entry}
		default:
			f.subs[broker][topic][sub] = target
			r.Outcome, r.MarkDelete = "moved", []int64{l, e}
		}
		results = append(results, r)
	}
	out, _ := json.Marshal(map[string]any{"v": 1, "results": results})
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(string(out)))}, nil
}

func newTestServlet(t *testing.T, f *fakeBrokers, m *metrics.Metrics) *Servlet {
	s := NewServlet(ServletConfig{Cluster: "east", Client: positions.New(f), Brokers: f.list,
		Every: 100 * time.Millisecond, Log: zaptest.NewLogger(t), Metrics: m})
	s.Watch("shop/orders", "billing", "audit", servletCursor)
	return s
}

// TestServletPositions: a partition is reported by the broker that lists
// the pair's cursor on it, with its subscriptions in scope; one on a
// broker without the servlet (404), or on none, is not (the admin path
// follows it). Follows asking within Every share one request per broker,
// however many ask at once.
func TestServletPositions(t *testing.T) {
	const b1, b2 = "http://b1:8080", "http://b2:8080"
	onB2 := "persistent://shop/orders/orders-partition-1"
	f := newFakeBrokers()
	f.set(b1, syncTopic, servletCursor, subsynctest.Pos(1, 40))
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 12))
	f.set(b1, syncTopic, "adhoc", subsynctest.Pos(1, 3)) // not in scope
	f.set(b1, "persistent://shop/orders/bare", "billing", subsynctest.Pos(2, 1))
	f.noPlugin[b2] = true
	m := metrics.New(nil)
	s := newTestServlet(t, f, m)
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { s.Positions(ctx, syncTopic, servletCursor, time.Minute, time.Time{}) })
	}
	wg.Wait()
	if f.requests(b1) != 1 || f.requests(b2) != 1 {
		t.Fatalf("requests b1 %d, b2 %d; want one each for 20 follows", f.requests(b1), f.requests(b2))
	}

	tests := []struct {
		name  string
		topic string
		want  map[string]marker.Position // nil: not reported
	}{
		{"on b1", syncTopic, map[string]marker.Position{"billing": subsynctest.Pos(1, 12)}},
		{"on b1 without the cursor", "persistent://shop/orders/bare", nil},
		{"on b2 (no servlet)", onB2, nil},
		{"nowhere", "persistent://shop/orders/gone", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states, at, ok := s.Positions(ctx, tt.topic, servletCursor, time.Minute, time.Time{})
			if ok != (tt.want != nil) {
				t.Fatalf("ok = %v, want %v", ok, tt.want != nil)
			}
			if !ok {
				return
			}
			if at.IsZero() {
				t.Error("no poll time")
			}
			got := map[string]marker.Position{}
			for name, st := range states {
				got[name] = st.MarkDelete
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("positions %v, want %v", got, tt.want)
			}
		})
	}
	if f.requests(b1) != 1 {
		t.Errorf("b1 asked %d times within maxAge, want 1", f.requests(b1))
	}
	if got := metricstest.Gauge(m.PositionsBrokers, "east", "servlet"); got != 1 {
		t.Errorf("positions_brokers{servlet} = %v, want 1", got)
	}
	if got := metricstest.Gauge(m.PositionsBrokers, "east", "admin"); got != 1 {
		t.Errorf("positions_brokers{admin} = %v, want 1", got)
	}

	// A change, seen by the next poll once maxAge passed; b2 is not asked
	// again before noServletRetry.
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 5))
	time.Sleep(150 * time.Millisecond)
	states, _, ok := s.Positions(ctx, syncTopic, servletCursor, 0, time.Time{})
	if !ok || states["billing"].MarkDelete != subsynctest.Pos(1, 5) {
		t.Errorf("after a rewind: %v, %v; want billing at 1:5", states, ok)
	}
	if f.requests(b1) != 2 || f.requests(b2) != 1 {
		t.Errorf("requests b1 %d, b2 %d; want 2 and 1", f.requests(b1), f.requests(b2))
	}
}

// newServletRig is a sync rig whose positions come from a servlet on one
// broker, b1, which has the partition.
func newServletRig(t *testing.T) (*syncRig, *fakeBrokers) {
	r := newSyncRig(t, rigConfig{})
	f := newFakeBrokers()
	f.set("http://b1:8080", syncTopic, servletCursor, subsynctest.Pos(1, 99))
	r.s.Servlet = newTestServlet(t, f, r.m)
	r.s.Cursor, r.s.ServletNamesKnown = servletCursor, true
	return r, f
}

// TestFollowFromServlet: with the servlet reporting the partition, a
// follow sends updates from its positions with no position read from the
// admin API; a rewind there is seen at the next poll, and a snapshot
// completing behind the position before the rewind sends no update past
// it (the stale position the admin path's heuristics guarded against).
// A partition the servlet stops reporting is followed by the admin path.
func TestFollowFromServlet(t *testing.T) {
	const b1 = "http://b1:8080"
	r, f := newServletRig(t)
	ctx := context.Background()
	cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 12))
	r.local.MD = map[string]marker.Position{"billing": subsynctest.Pos(1, 12)}
	r.readBefore(map[string]marker.Position{"billing": subsynctest.Pos(1, 11)})
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := updatesWritten(r.sink.Take()); len(got) != 1 || got["billing"].Remote != subsynctest.Pos(7, 20) {
		t.Fatalf("updates %v, want billing to 7:20", got)
	}
	if r.local.MDCalls != 0 {
		t.Errorf("%d position reads from the admin API, want 0", r.local.MDCalls)
	}
	if got := metricstest.Counter(r.m.PositionsFromServlet, "east"); got != 1 {
		t.Errorf("positions_from_servlet_total = %v, want 1", got)
	}

	// The operator rewinds billing to 1:5; a snapshot completes at 1:11,
	// behind where billing was.
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 5))
	cacheSnapshot(t, r, "s2", subsynctest.Pos(1, 11), subsynctest.Pos(7, 30))
	time.Sleep(150 * time.Millisecond) // past Every: the next follow polls
	for range 3 {
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) != 0 {
			t.Fatalf("after the rewind to 1:5 an update %v went out: the remote skips what the operator rewound to", got)
		}
	}
	if got := r.s.fl.mds["billing"]; got != subsynctest.Pos(1, 5) {
		t.Errorf("billing at %v, want 1:5", got)
	}

	// The partition moved to a broker without the servlet: admin path.
	f.mu.Lock()
	delete(f.subs[b1], syncTopic)
	f.mu.Unlock()
	time.Sleep(600 * time.Millisecond) // past maxAge: the next follow polls
	r.local.SetMD("billing", subsynctest.Pos(1, 6))
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if r.local.MDCalls == 0 {
		t.Error("a partition no broker reports was not read from the admin API")
	}
}

// TestServletNewPositionConfirmed: a position that would send an update
// and was not held at the previous read (a subscription created there:
// confirm.go) waits for a poll begun an interval later, as it waits for a
// read by the admin path.
func TestServletNewPositionConfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const b1 = "http://b1:8080"
		r, f := newServletRig(t)
		ctx := context.Background()
		cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
		f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 12))
		r.readBefore(map[string]marker.Position{})
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) != 0 {
			t.Fatalf("a new position sent %v before its confirming poll", got)
		}
		time.Sleep(600 * time.Millisecond) // a new poll, less than an interval later
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) != 0 {
			t.Fatalf("sent %v on a poll less than an interval after", got)
		}
		time.Sleep(600 * time.Millisecond)
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) != 1 {
			t.Fatalf("updates %v after the confirming poll, want billing's", got)
		}
		if r.local.MDCalls != 0 {
			t.Errorf("%d admin position reads, want 0", r.local.MDCalls)
		}
	})
}

// TestServletNoPluginAnywhere: a cluster whose brokers all answer 404 is
// asked once; its follows then take the admin path at once, without a
// request or a wait, until noServletRetry passes.
func TestServletNoPluginAnywhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const b1 = "http://b1:8080"
		f := newFakeBrokers()
		f.noPlugin[b1] = true
		s := newTestServlet(t, f, metrics.New(nil))
		ctx := context.Background()
		for i := range 5 {
			start := time.Now()
			if _, _, ok := s.Positions(ctx, syncTopic, servletCursor, 0, time.Now()); ok {
				t.Fatal("a broker without the servlet reported positions")
			}
			if i > 0 && time.Since(start) > 0 {
				t.Errorf("follow %d waited %s for a poll", i, time.Since(start))
			}
		}
		if f.requests(b1) != 1 {
			t.Errorf("b1 asked %d times, want 1", f.requests(b1))
		}
		time.Sleep(noServletRetry)
		s.Positions(ctx, syncTopic, servletCursor, 0, time.Now())
		if f.requests(b1) != 2 {
			t.Errorf("b1 asked %d times after noServletRetry, want 2", f.requests(b1))
		}
	})
}

// TestServletScopeGrows: a name put in scope after a poll (a pattern's
// subscription an admin read found) is asked for at the next follow, not
// after maxAge: the brokers are asked again in full.
func TestServletScopeGrows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const b1 = "http://b1:8080"
		f := newFakeBrokers()
		f.set(b1, syncTopic, servletCursor, subsynctest.Pos(1, 40))
		f.set(b1, syncTopic, "ledger", subsynctest.Pos(1, 7))
		s := newTestServlet(t, f, metrics.New(nil))
		ctx := context.Background()
		if states, _, ok := s.Positions(ctx, syncTopic, servletCursor, time.Minute, time.Time{}); !ok || len(states) != 0 {
			t.Fatalf("before ledger is in scope: %v, %v; want the partition with nothing in scope", states, ok)
		}
		s.Watch("shop/orders", "ledger")
		states, _, ok := s.Positions(ctx, syncTopic, servletCursor, time.Minute, time.Time{})
		if !ok || states["ledger"].MarkDelete != subsynctest.Pos(1, 7) {
			t.Fatalf("after ledger joined the scope: %v, %v; want ledger at 1:7", states, ok)
		}
		if f.requests(b1) != 2 {
			t.Errorf("b1 asked %d times, want 2", f.requests(b1))
		}
	})
}

// TestServletWakes: a poll made for any follow wakes the follows of the
// partitions whose subscriptions it saw change, and only those; a nudged
// pacer has its follow due at once.
func TestServletWakes(t *testing.T) {
	const b1 = "http://b1:8080"
	other := "persistent://shop/orders/orders-partition-1"
	f := newFakeBrokers()
	f.set(b1, syncTopic, servletCursor, subsynctest.Pos(1, 40))
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 5))
	f.set(b1, other, servletCursor, subsynctest.Pos(2, 40))
	f.set(b1, other, "billing", subsynctest.Pos(2, 5))
	s := newTestServlet(t, f, metrics.New(nil))
	woken := map[string]int{}
	var mu sync.Mutex
	for _, topic := range []string{syncTopic, other} {
		release := s.Register(topic, func() { mu.Lock(); woken[topic]++; mu.Unlock() })
		defer release()
	}
	ctx := context.Background()
	s.Positions(ctx, other, servletCursor, 0, time.Now()) // first poll: both appear
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 9))
	s.Positions(ctx, other, servletCursor, 0, time.Now()) // asked for other, syncTopic moved
	mu.Lock()
	got := fmt.Sprint(woken)
	mu.Unlock()
	if want := fmt.Sprint(map[string]int{syncTopic: 2, other: 1}); got != want {
		t.Errorf("woken %s, want %s", got, want)
	}

	p := pacer{wake: make(chan struct{}, 1)}
	now := time.Now()
	p.begin(now, "s1")
	p.paced(false, time.Second)
	if p.due(now.Add(time.Millisecond), time.Second, "s1", func() bool { return true }) {
		t.Fatal("due right after a follow")
	}
	p.sleeping.Store(true)
	p.nudge()
	if !p.due(now.Add(time.Millisecond), time.Second, "s1", func() bool { return true }) || len(p.wake) != 1 {
		t.Errorf("a nudge did not make the follow due and wake run")
	}
	p.begin(now.Add(time.Millisecond), "s1")
	if p.due(now.Add(2*time.Millisecond), time.Second, "s1", func() bool { return true }) {
		t.Error("still due after the nudged follow began")
	}
}

// TestServletMoves: a move goes to the broker that owns the partition;
// the moves that come while a request is under way go together in the
// next one; the servlet's answers map to the route's outcomes, and what
// it cannot serve is left to the other routes (ErrUnavailable), as is
// every move on a broker without the acknowledge endpoint.
func TestServletMoves(t *testing.T) {
	const b1 = "http://b1:8080"
	f := newFakeBrokers()
	var topics []string
	for i := range 20 {
		topic := fmt.Sprintf("persistent://shop/orders/orders-partition-%d", i)
		topics = append(topics, topic)
		f.set(b1, topic, servletCursor, subsynctest.Pos(1, 40))
		f.set(b1, topic, "billing", subsynctest.Pos(1, 10))
	}
	m := metrics.New(nil)
	s := newTestServlet(t, f, m)
	ctx := context.Background()
	if s.CanMove(topics[0], servletCursor) {
		t.Fatal("CanMove before any poll")
	}
	if _, _, ok := s.Positions(ctx, topics[0], servletCursor, time.Minute, time.Time{}); !ok {
		t.Fatal("not polled")
	}
	if !s.CanMove(topics[0], servletCursor) || s.CanMove("persistent://shop/orders/elsewhere", servletCursor) {
		t.Fatal("CanMove: want only the partitions the broker lists")
	}
	move := func(topic, sub string, at marker.Position) (subscription.Moved, error) {
		return servletMover{s: s, cursor: servletCursor}.Move(ctx, topic, sub, subscription.Decision{Route: subscription.RouteServlet, At: at})
	}

	// Batching: the first request is held; 19 more moves queue behind it.
	f.hold = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(topics))
	wg.Go(func() {
		if _, err := move(topics[0], "billing", subsynctest.Pos(1, 20)); err != nil {
			errs <- err
		}
	})
	for !func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.acks[b1] != nil && s.acks[b1].sending && len(s.acks[b1].waiting) == 0
	}() {
		time.Sleep(time.Millisecond)
	}
	for _, topic := range topics[1:] {
		wg.Go(func() {
			if _, err := move(topic, "billing", subsynctest.Pos(1, 20)); err != nil {
				errs <- err
			}
		})
	}
	for func() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.acks[b1].waiting) }() < len(topics)-1 {
		time.Sleep(time.Millisecond)
	}
	close(f.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f.hold = nil
	if f.ackAsked[b1] != 2 || !slices.Equal(f.ackLines, []int{1, len(topics) - 1}) {
		t.Fatalf("%d requests carrying %v moves, want 2 carrying [1 %d]", f.ackAsked[b1], f.ackLines, len(topics)-1)
	}
	for _, topic := range topics {
		if got := f.subs[b1][topic]["billing"]; got != subsynctest.Pos(1, 20) {
			t.Errorf("%s billing at %v, want 1:20", topic, got)
		}
	}
	if got := metricstest.Counter(m.PositionsAckRequests, "east", "ok"); got != 2 {
		t.Errorf("positions_acknowledge_requests_total{ok} = %v, want 2", got)
	}

	tests := []struct {
		name        string
		topic, sub  string
		at          marker.Position
		want        subscription.Moved
		unavailable bool
	}{
		{"moved", topics[1], "billing", subsynctest.Pos(1, 30), subscription.Moved{After: subsynctest.Pos(1, 30)}, false},
		{"there already: before = after", topics[1], "billing", subsynctest.Pos(1, 25), subscription.Moved{Before: subsynctest.Pos(1, 30), After: subsynctest.Pos(1, 30), HasBefore: true}, false},
		{"no such subscription", topics[1], "audit", subsynctest.Pos(1, 30), subscription.Moved{}, true},
		{"owner unknown", "persistent://shop/orders/elsewhere", "billing", subsynctest.Pos(1, 30), subscription.Moved{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := move(tt.topic, tt.sub, tt.at)
			if errors.Is(err, subscription.ErrUnavailable) != tt.unavailable || (!tt.unavailable && err != nil) {
				t.Fatalf("error %v, want unavailable: %t", err, tt.unavailable)
			}
			if got != tt.want {
				t.Errorf("Move = %+v, want %+v", got, tt.want)
			}
		})
	}

	// A broker without the endpoint: unavailable, and no move goes there
	// again for a while.
	f.noAckAPI = true
	if _, err := move(topics[2], "billing", subsynctest.Pos(1, 35)); !errors.Is(err, subscription.ErrUnavailable) {
		t.Fatalf("no endpoint: %v, want ErrUnavailable", err)
	}
	if s.CanMove(topics[2], servletCursor) {
		t.Error("CanMove after the broker answered 404 to a move")
	}
}

// TestServletBacklogs: the backlogs of a partition's subscriptions come
// from one request per broker shared by every partition within maxAge; a
// partition whose broker does not list every subscription asked for is
// not answered (the caller reads stats).
func TestServletBacklogs(t *testing.T) {
	const b1, b2 = "http://b1:8080", "http://b2:8080"
	other := "persistent://shop/orders/orders-partition-1"
	f := newFakeBrokers()
	f.set(b1, syncTopic, servletCursor, subsynctest.Pos(1, 100))
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 60))
	f.set(b2, other, servletCursor, subsynctest.Pos(1, 90))
	s := newTestServlet(t, f, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { s.Backlogs(ctx, syncTopic, []string{servletCursor}, time.Minute) })
	}
	wg.Wait()
	got, ok := s.Backlogs(ctx, syncTopic, []string{servletCursor, "billing"}, time.Minute)
	if !ok || got["billing"] != 40 || got[servletCursor] != 0 {
		t.Fatalf("backlogs %v, %v; want billing 40, the cursor 0", got, ok)
	}
	if f.backlogAsked[b1] != 1 || f.backlogAsked[b2] != 1 {
		t.Fatalf("backlogs asked b1 %d, b2 %d times; want once each for 11 callers", f.backlogAsked[b1], f.backlogAsked[b2])
	}
	if _, ok := s.Backlogs(ctx, other, []string{"billing"}, time.Minute); ok {
		t.Error("a partition without billing answered for billing")
	}
	if got, ok := s.Backlogs(ctx, other, []string{servletCursor}, time.Minute); !ok || got[servletCursor] != 10 {
		t.Errorf("other partition: %v, %v", got, ok)
	}
	if _, ok := s.Backlogs(ctx, "persistent://shop/orders/nowhere", nil, time.Minute); ok {
		t.Error("a partition no broker lists answered")
	}
	f.noPlugin[b2] = true
	time.Sleep(10 * time.Millisecond)
	if _, ok := s.Backlogs(ctx, syncTopic, []string{servletCursor}, time.Millisecond); ok {
		t.Error("answered while a broker failed (its partitions would look empty)")
	}
}

// TestApplyByServletBeforeAnyFollow: an update that arrives before any
// follow polled the servlet (a standby cluster's follows run every few
// minutes) polls it to learn the partition's broker and is applied by
// the servlet, not by reset-cursor.
func TestApplyByServletBeforeAnyFollow(t *testing.T) {
	const b1 = "http://b1:8080"
	r, f := newServletRig(t)
	f.set(b1, syncTopic, "billing", subsynctest.Pos(1, 5))
	r.s.apply(context.Background(), "billing", subsynctest.Pos(1, 30))
	if got := f.subs[b1][syncTopic]["billing"]; got != subsynctest.Pos(1, 30) {
		t.Fatalf("billing at %v, want 1:30 (moved by the servlet)", got)
	}
	if f.ackAsked[b1] != 1 || f.requests(b1) != 1 {
		t.Errorf("%d acknowledge and %d positions requests, want one each", f.ackAsked[b1], f.requests(b1))
	}
	if got := metricstest.Counter(r.m.UpdatesApplied, "east", "servlet", "applied"); got != 1 {
		t.Errorf("updates applied by the servlet: %v, want 1", got)
	}
}
