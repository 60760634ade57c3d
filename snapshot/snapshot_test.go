package snapshot

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

const topic = "persistent://t/ns/orders-partition-0"

// t0 is the fake clock's start.
var t0 = time.Unix(1_700_000_000, 0)

// ms is the marker time of t0 + d.
func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

// harness drives one Machine of local A for remote B, third origin C,
// with a fake clock and ids "id-1", "id-2"...
type harness struct {
	m   *Machine
	now time.Time
	ids int
}

func newHarness(mod func(*Config)) *harness {
	h := &harness{now: t0}
	cfg := Config{
		Topic: topic, Local: "A", Remote: "B",
		Interval: time.Second, Timeout: 10 * time.Second, CacheSize: 10,
		ThirdOrigins: []string{"C"}, Fresh: true,
		NewID: func() string { h.ids++; return fmt.Sprintf("id-%d", h.ids) },
		Now:   func() time.Time { return h.now },
	}
	if mod != nil {
		mod(&cfg)
	}
	h.m = New(cfg)
	return h
}

func pos(e int64) marker.Position { return marker.Position{Ledger: 1, Entry: e, Batch: -1} }

// A step advances the clock, then calls the Machine and checks its output.
type step struct {
	advance time.Duration
	op      func(m *Machine) []marker.Marker
	want    []marker.Marker
}

func run(t *testing.T, h *harness, steps []step) {
	t.Helper()
	for i, s := range steps {
		h.now = h.now.Add(s.advance)
		if got := s.op(h.m); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: got\n\t%+v\nwant\n\t%+v", i, got, s.want)
		}
	}
}

// Operations.

func data(e int64, origin string, oe int64) func(*Machine) []marker.Marker {
	return dataAt(pos(e), origin, pos(oe))
}

func dataAt(p marker.Position, origin string, op marker.Position) func(*Machine) []marker.Marker {
	return func(m *Machine) []marker.Marker { return m.Data(p, origin, op) }
}

func read(e int64, mk marker.Marker) func(*Machine) []marker.Marker {
	return func(m *Machine) []marker.Marker { return m.Marker(pos(e), mk) }
}

func learn(c string, p marker.Position) func(*Machine) []marker.Marker {
	return func(m *Machine) []marker.Marker { m.Learn(c, p); return nil }
}

func abandon(id string) func(*Machine) []marker.Marker {
	return func(m *Machine) []marker.Marker { m.Abandon(id); return nil }
}

func tick(linkUp bool) func(*Machine) []marker.Marker {
	return func(m *Machine) []marker.Marker { return m.Tick(linkUp) }
}

// Markers, as written by A (wantX) or read from B (fromB).

func wantRequest(id string, at time.Duration) []marker.Marker {
	return []marker.Marker{{Kind: marker.KindSnapshotRequest, From: "A", To: "B", Topic: topic, SnapshotID: id, Time: ms(at)}}
}

func wantResponse(id string, e int64, wm map[string]marker.Position, at time.Duration) []marker.Marker {
	return []marker.Marker{{Kind: marker.KindSnapshotResponse, From: "A", To: "B", Topic: topic, SnapshotID: id,
		Local: pos(e), Watermarks: wm, Time: ms(at)}}
}

func wantSnapshot(id string, a, b int64, at time.Duration) []marker.Marker {
	return []marker.Marker{{Kind: marker.KindSnapshot, From: "A", To: "B", Topic: topic, SnapshotID: id,
		Local: pos(a), Remote: pos(b), Time: ms(at)}}
}

func requestFromB(id string) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshotRequest, From: "B", To: "A", Topic: topic, SnapshotID: id}
}

func responseFromB(id string, b int64, wm map[string]marker.Position) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshotResponse, From: "B", To: "A", Topic: topic, SnapshotID: id,
		Local: pos(b), Watermarks: wm}
}

func snapshotMarker(id string, a, b marker.Position, t time.Time) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshot, From: "A", To: "B", Topic: topic, SnapshotID: id,
		Local: a, Remote: b, Time: t.UnixMilli()}
}

func with(mk marker.Marker, f func(*marker.Marker)) marker.Marker {
	f(&mk)
	return mk
}

func TestTick(t *testing.T) {
	five := func(c *Config) { c.MaxPending = 5 }
	tests := []struct {
		name  string
		steps []step
		stats Stats
		cfg   func(*Config)
	}{
		{"idle topic: no request", []step{
			{op: tick(true)},
			{advance: time.Minute, op: tick(true)},
		}, Stats{}, nil},
		{"data and link up: request", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
		}, Stats{Started: 1}, nil},
		{"data from any origin counts", []step{
			{op: data(1, "B", 7)},
			{op: tick(true), want: wantRequest("id-1", 0)},
		}, Stats{Started: 1}, nil},
		{"link down: no request, until up", []step{
			{op: data(1, "", 0)},
			{op: tick(false)},
			{advance: time.Second, op: tick(false)},
			{op: tick(true), want: wantRequest("id-1", time.Second)},
		}, Stats{Started: 1}, nil},
		{"markers are not data", []step{
			{op: read(1, requestFromB("x")), want: wantResponse("x", 1, map[string]marker.Position{"C": marker.NoneSeen}, 0)},
			{op: read(2, responseFromB("x", 5, nil))},
			{op: tick(true)},
		}, Stats{}, nil},
		{"one request in flight (the default)", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: data(2, "", 0)},
			{advance: 5 * time.Second, op: tick(true)},
			{op: read(3, responseFromB("id-1", 5, nil)), want: wantSnapshot("id-1", 3, 5, 5*time.Second)},
			{op: tick(true), want: wantRequest("id-2", 5*time.Second)},
		}, Stats{Started: 2, Completed: 1, LastRTT: 5 * time.Second}, nil},
		{"MaxPending 5: requests in flight, one an interval while data comes, at most 5", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: data(2, "", 0)},
			{advance: 999 * time.Millisecond, op: tick(true)},
			{advance: time.Millisecond, op: tick(true), want: wantRequest("id-2", time.Second)},
			{advance: time.Second, op: tick(true)}, // no data since id-2
			{op: data(3, "", 0)},
			{op: tick(true), want: wantRequest("id-3", 2*time.Second)},
			{op: data(4, "", 0)},
			{advance: time.Second, op: tick(true), want: wantRequest("id-4", 3*time.Second)},
			{op: data(5, "", 0)},
			{advance: time.Second, op: tick(true), want: wantRequest("id-5", 4*time.Second)},
			{op: data(6, "", 0)},
			{advance: time.Second, op: tick(true)}, // MaxPending (5) in flight
			// id-3 answered first (id-1 and id-2's answers lost): it
			// completes, and the two before it are dropped.
			{op: read(7, responseFromB("id-3", 9, nil)), want: wantSnapshot("id-3", 7, 9, 5*time.Second)},
			{op: tick(true), want: wantRequest("id-6", 5*time.Second)},
			{op: read(8, responseFromB("id-1", 5, nil))}, // dropped: ignored
			{op: read(9, responseFromB("id-5", 12, nil)), want: wantSnapshot("id-5", 9, 12, 5*time.Second)},
			{op: read(10, responseFromB("id-4", 11, nil))}, // dropped by id-5's completion
		}, Stats{Started: 6, Completed: 2, LastRTT: time.Second}, five},
		{"interval between requests", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{advance: 100 * time.Millisecond, op: read(2, responseFromB("id-1", 5, nil)), want: wantSnapshot("id-1", 2, 5, 100*time.Millisecond)},
			{op: data(3, "", 0)},
			{advance: 899 * time.Millisecond, op: tick(true)},
			{advance: time.Millisecond, op: tick(true), want: wantRequest("id-2", time.Second)},
		}, Stats{Started: 2, Completed: 1, LastRTT: 100 * time.Millisecond}, nil},
		{"no data since the last request: none", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: read(2, responseFromB("id-1", 5, nil)), want: wantSnapshot("id-1", 2, 5, 0)},
			{advance: time.Minute, op: tick(true)},
		}, Stats{Started: 1, Completed: 1}, nil},
		{"a timed-out request makes room for the next, and its late response still completes it", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{advance: 10*time.Second - time.Millisecond, op: tick(true)},
			{op: data(2, "", 0)},
			{advance: time.Millisecond, op: tick(true), want: wantRequest("id-2", 10*time.Second)},
			// A lagging copy: id-1 forwarded late, answered later still.
			{op: read(3, responseFromB("id-1", 5, nil)), want: wantSnapshot("id-1", 3, 5, 10*time.Second)},
			// id-2 is still pending: no request until it times out.
			{op: data(4, "", 0)},
			{advance: 9 * time.Second, op: tick(true)},
			{op: read(5, responseFromB("id-2", 6, nil)), want: wantSnapshot("id-2", 5, 6, 19*time.Second)},
			{advance: time.Second, op: tick(true), want: wantRequest("id-3", 20*time.Second)},
		}, Stats{Started: 3, TimedOut: 1, Completed: 2, Late: 1, LastRTT: 9 * time.Second}, nil},
		{"a late response completes the newest answered request, dropping the older late ones", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-2", 10*time.Second)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-3", 20*time.Second)},
			{op: read(2, responseFromB("id-2", 5, nil)), want: wantSnapshot("id-2", 2, 5, 20*time.Second)},
			{op: read(3, responseFromB("id-1", 4, nil))}, // dropped with id-2's completion
			{op: read(4, responseFromB("id-3", 6, nil)), want: wantSnapshot("id-3", 4, 6, 20*time.Second)},
		}, Stats{Started: 3, TimedOut: 2, Completed: 2, Late: 1}, nil},
		{"a timed-out request with a newer one pending is not tried again: the newer covers its data", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: data(2, "", 0)},
			{advance: 5 * time.Second, op: tick(true), want: wantRequest("id-2", 5*time.Second)},
			{advance: 5 * time.Second, op: tick(true)}, // id-1 times out; id-2 pending
			{advance: 4 * time.Second, op: tick(true)},
			{advance: time.Second, op: tick(true), want: wantRequest("id-3", 15*time.Second)}, // id-2 timed out: the tail again
		}, Stats{Started: 3, TimedOut: 2}, five},
		{"the tail: a timed-out request is tried again without new data, maxRetries times in a row", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-2", 10*time.Second)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-3", 20*time.Second)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-4", 30*time.Second)},
			{advance: 10 * time.Second, op: tick(true)},
			{advance: time.Minute, op: tick(true)},
			{op: data(2, "", 0)}, // new data: tried again, and may be retried again
			{op: tick(true), want: wantRequest("id-5", 100*time.Second)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-6", 110*time.Second)},
		}, Stats{Started: 6, TimedOut: 5}, nil},
		{"the tail: a retried request that completes covers the data", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{advance: 10 * time.Second, op: tick(true), want: wantRequest("id-2", 10*time.Second)},
			{op: read(2, responseFromB("id-2", 5, nil)), want: wantSnapshot("id-2", 2, 5, 10*time.Second)},
			{advance: time.Minute, op: tick(true)},
		}, Stats{Started: 2, TimedOut: 1, Completed: 1}, nil},
		{"a response past lateFor Timeouts is ignored", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{advance: 10 * time.Second, op: tick(false)},
			{advance: (lateFor - 1) * 10 * time.Second, op: tick(false)},
			{op: read(2, responseFromB("id-1", 5, nil))},
		}, Stats{Started: 1, TimedOut: 1}, nil},
		{"an abandoned request (its marker not written) makes room at once", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: abandon("id-1")},
			{advance: time.Second, op: tick(true), want: wantRequest("id-2", time.Second)},
			{op: read(2, responseFromB("id-1", 5, nil))}, // never written: a forgery or a replay
		}, Stats{Started: 2}, nil},
		{"a response naming NoneSeen needs nothing of that origin", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: read(2, responseFromB("id-1", 5, map[string]marker.Position{"C": marker.NoneSeen})), want: wantSnapshot("id-1", 2, 5, 0)},
		}, Stats{Started: 1, Completed: 1}, nil},
		{"a request waiting for watermarks times out too, and completes late when they come", []step{
			{op: data(1, "", 0)},
			{op: tick(true), want: wantRequest("id-1", 0)},
			{op: read(2, responseFromB("id-1", 5, map[string]marker.Position{"C": pos(9)}))},
			{advance: 10 * time.Second, op: tick(false)},
			{op: data(3, "C", 9), want: wantSnapshot("id-1", 3, 5, 10*time.Second)},
		}, Stats{Started: 1, TimedOut: 1, Completed: 1, Late: 1, LastRTT: 10 * time.Second}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(tt.cfg)
			run(t, h, tt.steps)
			if got := h.m.Stats(); got != tt.stats {
				t.Errorf("stats %+v, want %+v", got, tt.stats)
			}
		})
	}
}

func TestRespond(t *testing.T) {
	wm := func(kv ...any) map[string]marker.Position {
		m := map[string]marker.Position{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(marker.Position)
		}
		return m
	}
	tests := []struct {
		name       string
		cfg        func(*Config)
		steps      []step
		unanswered int64
	}{
		{"two clusters: b only", func(c *Config) { c.ThirdOrigins = nil }, []step{
			{op: data(1, "", 0)},
			{op: read(2, requestFromB("r1")), want: wantResponse("r1", 2, nil, 0)},
		}, 0},
		{"watermark: highest third-origin position at or before the request", nil, []step{
			{op: data(1, "C", 5)},
			{op: data(2, "C", 3)}, // a lower one (a resend) does not lower it
			{op: data(3, "B", 40)},
			{op: data(4, "D", 90)}, // not a third origin of this pair
			{op: data(5, "", 0)},
			{op: read(6, requestFromB("r1")), want: wantResponse("r1", 6, wm("C", pos(5)), 0)},
			{op: data(7, "C", 8)},
			{advance: time.Second, op: read(8, requestFromB("r2")), want: wantResponse("r2", 8, wm("C", pos(8)), time.Second)},
		}, 0},
		{"watermark with batch positions", nil, []step{
			{op: dataAt(pos(1), "C", marker.Position{Ledger: 3, Entry: 5, Batch: 2})},
			{op: dataAt(pos(2), "C", marker.Position{Ledger: 3, Entry: 5, Batch: 1})},
			{op: read(3, requestFromB("r1")), want: wantResponse("r1", 3, wm("C", marker.Position{Ledger: 3, Entry: 5, Batch: 2}), 0)},
			{op: dataAt(pos(4), "C", marker.Position{Ledger: 3, Entry: 5, Batch: -1})},
			{op: read(5, requestFromB("r2")), want: wantResponse("r2", 5, wm("C", marker.Position{Ledger: 3, Entry: 5, Batch: -1}), 0)},
		}, 0},
		{"fresh, nothing of C seen: NoneSeen", nil, []step{
			{op: read(1, requestFromB("r1")), want: wantResponse("r1", 1, wm("C", marker.NoneSeen), 0)},
		}, 0},
		{"not fresh, C unknown: no answer", func(c *Config) { c.Fresh = false }, []step{
			{op: data(1, "B", 3)},
			{op: read(2, requestFromB("r1"))},
			{op: read(3, requestFromB("r2"))},
		}, 2},
		{"not fresh, C learned from history (none seen): answered", func(c *Config) { c.Fresh = false }, []step{
			{op: learn("C", marker.NoneSeen)},
			{op: read(2, requestFromB("r1")), want: wantResponse("r1", 2, wm("C", marker.NoneSeen), 0)},
		}, 0},
		{"learning only raises a watermark; data raises it further", func(c *Config) { c.Fresh = false }, []step{
			{op: learn("C", pos(5))},
			{op: learn("C", pos(3))},
			{op: learn("C", marker.NoneSeen)},
			{op: read(1, requestFromB("r1")), want: wantResponse("r1", 1, wm("C", pos(5)), 0)},
			{op: data(2, "C", 7)},
			{op: read(3, requestFromB("r2")), want: wantResponse("r2", 3, wm("C", pos(7)), 0)},
		}, 0},
		{"learning an origin that is not a third origin: C still unknown", func(c *Config) { c.Fresh = false }, []step{
			{op: learn("D", pos(5))},
			{op: learn("B", pos(5))},
			{op: read(1, requestFromB("r1"))},
		}, 1},
		{"third origins: Local, Remote, empty and repeats dropped", func(c *Config) {
			c.ThirdOrigins = []string{"A", "", "C", "B", "C", "D"}
		}, []step{
			{op: data(1, "B", 3)},
			{op: data(2, "D", 4)},
			{op: read(3, requestFromB("r1")), want: wantResponse("r1", 3, wm("C", marker.NoneSeen, "D", pos(4)), 0)},
		}, 0},
		{"own request read back: ignored", nil, []step{
			{op: read(1, with(requestFromB("r1"), func(m *marker.Marker) { m.From, m.To = "A", "B" }))},
		}, 0},
		{"request from a third cluster: ignored", nil, []step{
			{op: read(1, with(requestFromB("r1"), func(m *marker.Marker) { m.From = "C" }))},
		}, 0},
		{"request to another cluster: ignored", nil, []step{
			{op: read(1, with(requestFromB("r1"), func(m *marker.Marker) { m.To = "C" }))},
		}, 0},
		{"request for another topic: ignored", nil, []step{
			{op: read(1, with(requestFromB("r1"), func(m *marker.Marker) { m.Topic = topic + "x" }))},
		}, 0},
		{"update: ignored", nil, []step{
			{op: read(1, marker.Marker{Kind: marker.KindUpdate, From: "B", To: "A", Topic: topic, Subscription: "s", Remote: pos(1)})},
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(tt.cfg)
			run(t, h, tt.steps)
			if got := h.m.Stats(); got != (Stats{Unanswered: tt.unanswered}) {
				t.Errorf("stats %+v, want Unanswered %d only", got, tt.unanswered)
			}
		})
	}
}

// TestRestart: a Machine whose cursor already existed answers requests
// only once it has seen each third origin, then with exact watermarks.
func TestRestart(t *testing.T) {
	h := newHarness(func(c *Config) {
		c.Fresh = false
		c.ThirdOrigins = []string{"C", "D"}
	})
	wm := map[string]marker.Position{"C": pos(12), "D": {Ledger: 4, Entry: 2, Batch: 0}}
	run(t, h, []step{
		{op: read(1, requestFromB("r1"))},
		{op: data(2, "", 0)},
		{op: data(3, "B", 5)},
		{op: data(4, "C", 11)},
		{op: read(5, requestFromB("r2"))}, // D still unknown
		{op: data(6, "C", 12)},
		{op: dataAt(pos(7), "D", marker.Position{Ledger: 4, Entry: 2, Batch: 0})},
		{op: read(8, requestFromB("r3")), want: wantResponse("r3", 8, wm, 0)},
	})
	if got := h.m.Stats(); got != (Stats{Unanswered: 2}) {
		t.Errorf("stats %+v, want Unanswered 2", got)
	}
}

func TestResponse(t *testing.T) {
	need := func(e int64) map[string]marker.Position { return map[string]marker.Position{"C": pos(e)} }
	// Every case starts with request id-1 written at t0.
	start := []step{
		{op: data(1, "", 0)},
		{op: tick(true), want: wantRequest("id-1", 0)},
	}
	tests := []struct {
		name  string
		cfg   func(*Config)
		steps []step
		done  int64
	}{
		{"no watermarks: completes where read", nil, []step{
			{advance: 300 * time.Millisecond, op: read(5, responseFromB("id-1", 40, nil)), want: wantSnapshot("id-1", 5, 40, 300*time.Millisecond)},
		}, 1},
		{"watermarks already met", nil, []step{
			{op: data(2, "C", 7)},
			{op: read(5, responseFromB("id-1", 40, need(7))), want: wantSnapshot("id-1", 5, 40, 0)},
		}, 1},
		{"watermarks met later: completes at that data message", nil, []step{
			{op: read(5, responseFromB("id-1", 40, need(7)))},
			{op: data(6, "C", 6)},
			{op: data(7, "", 0)},
			{op: data(8, "B", 90)},
			{advance: time.Second, op: data(9, "C", 7), want: wantSnapshot("id-1", 9, 40, time.Second)},
			{op: data(10, "C", 8)},
		}, 1},
		{"watermark of an origin not third: ignored", nil, []step{
			{op: read(5, responseFromB("id-1", 40, map[string]marker.Position{"D": pos(99), "B": pos(99), "A": pos(99)})),
				want: wantSnapshot("id-1", 5, 40, 0)},
		}, 1},
		{"requester not fresh waits for what it has not seen", func(c *Config) { c.Fresh = false }, []step{
			{op: read(5, responseFromB("id-1", 40, need(3)))},
			{op: data(6, "C", 3), want: wantSnapshot("id-1", 6, 40, 0)},
		}, 1},
		{"unknown id: ignored, the pending one still completes", nil, []step{
			{op: read(5, responseFromB("id-9", 40, nil))},
			{op: read(6, responseFromB("id-1", 41, nil)), want: wantSnapshot("id-1", 6, 41, 0)},
		}, 1},
		{"second response after completion: ignored", nil, []step{
			{op: read(5, responseFromB("id-1", 40, nil)), want: wantSnapshot("id-1", 5, 40, 0)},
			{op: read(6, responseFromB("id-1", 41, nil))},
		}, 1},
		{"second response while waiting: the first stands", nil, []step{
			{op: read(5, responseFromB("id-1", 40, need(7)))},
			{op: read(6, responseFromB("id-1", 41, nil))},
			{op: data(7, "C", 7), want: wantSnapshot("id-1", 7, 40, 0)},
		}, 1},
		{"rewound cursor: never before the response", nil, []step{
			{op: read(5, responseFromB("id-1", 40, need(7)))},
			{op: data(3, "C", 7), want: wantSnapshot("id-1", 5, 40, 0)},
		}, 1},
		{"response from elsewhere or for another topic: ignored", nil, []step{
			{op: read(5, with(responseFromB("id-1", 40, nil), func(m *marker.Marker) { m.From = "C" }))},
			{op: read(6, with(responseFromB("id-1", 40, nil), func(m *marker.Marker) { m.To = "C" }))},
			{op: read(7, with(responseFromB("id-1", 40, nil), func(m *marker.Marker) { m.From, m.To = "A", "B" }))},
			{op: read(8, with(responseFromB("id-1", 40, nil), func(m *marker.Marker) { m.Topic = "other" }))},
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(tt.cfg)
			run(t, h, append(append([]step(nil), start...), tt.steps...))
			if got := h.m.Stats(); got.Started != 1 || got.Completed != tt.done {
				t.Errorf("stats %+v, want Started 1, Completed %d", got, tt.done)
			}
		})
	}
}

func TestSnapshotMarkersFillTheCache(t *testing.T) {
	h := newHarness(nil) // no pending state: as after a restart
	at := time.UnixMilli(ms(time.Hour))
	good := snapshotMarker("s1", pos(5), pos(40), at)
	for _, mk := range []marker.Marker{
		good,
		good, // read again: deduplicated
		with(good, func(m *marker.Marker) { m.SnapshotID, m.From, m.To = "s2", "B", "A" }),
		with(good, func(m *marker.Marker) { m.SnapshotID, m.To = "s3", "C" }),
		with(good, func(m *marker.Marker) { m.SnapshotID, m.Topic = "s4", "other" }),
		with(good, func(m *marker.Marker) { m.SnapshotID, m.Kind = "s5", marker.KindUpdate }),
	} {
		if out := h.m.Marker(pos(50), mk); out != nil {
			t.Errorf("Marker(%+v) = %+v, want nothing", mk, out)
		}
	}
	want := []Snapshot{{ID: "s1", Local: pos(5), Remote: pos(40), Time: at}}
	if got := h.m.cache.s; !reflect.DeepEqual(got, want) {
		t.Errorf("cache %+v, want %+v", got, want)
	}
	if got := h.m.Stats(); got != (Stats{}) {
		t.Errorf("stats %+v, want none", got)
	}
}

// TestRoundTrip runs one snapshot through the output of Tick and the
// returned snapshot marker read back, as the replicator does.
func TestRoundTrip(t *testing.T) {
	h := newHarness(nil)
	h.m.Data(pos(1), "", pos(0))
	req := h.m.Tick(true)
	if len(req) != 1 {
		t.Fatalf("no request: %v", req)
	}
	h.m.Marker(pos(2), req[0]) // read back: ignored
	h.now = h.now.Add(250 * time.Millisecond)
	snap := h.m.Marker(pos(3), responseFromB(req[0].SnapshotID, 77, nil))
	if len(snap) != 1 {
		t.Fatalf("no snapshot: %v", snap)
	}
	want := Snapshot{ID: "id-1", Local: pos(3), Remote: pos(77), Time: time.UnixMilli(ms(250 * time.Millisecond))}
	// Cached as it completes, before its marker is written and read back.
	if got, ok := h.m.Covering(pos(3)); !ok || got != want {
		t.Fatalf("Covering at completion = %+v, %v; want %+v", got, ok, want)
	}
	// Pruned past, then its marker read back: not cached again.
	h.m.Data(pos(5), "", pos(0))
	h.now = h.now.Add(time.Second)
	req2 := h.m.Tick(true)
	snap2 := h.m.Marker(pos(6), responseFromB(req2[0].SnapshotID, 78, nil))
	h.m.Prune(pos(6))
	h.m.Marker(pos(7), snap[0])
	if got, ok := h.m.Covering(pos(5)); ok {
		t.Errorf("a snapshot pruned came back when its marker was read back: %+v", got)
	}
	h.m.Marker(pos(8), snap2[0])
	if got, ok := h.m.Covering(pos(6)); !ok || got.ID != "id-2" {
		t.Errorf("Covering(6) = %+v, %v; want id-2", got, ok)
	}
	// Another instance's marker (not completed here) is cached when read.
	other := snap[0]
	other.SnapshotID, other.Local, other.Remote = "other", pos(9), pos(79)
	h.m.Marker(pos(10), other)
	if got, ok := h.m.Covering(pos(9)); !ok || got.ID != "other" {
		t.Errorf("Covering(9) = %+v, %v; want the other instance's", got, ok)
	}
	if st := h.m.Stats(); st != (Stats{Started: 2, Completed: 2}) {
		t.Errorf("stats %+v", st)
	}
}

func TestNewDefaults(t *testing.T) {
	m := New(Config{Topic: topic, Local: "A", Remote: "B"})
	if m.cfg.Interval != time.Second || m.cfg.Timeout != 30*time.Second || m.cache.size != 10 {
		t.Errorf("defaults: %v %v %d", m.cfg.Interval, m.cfg.Timeout, m.cache.size)
	}
	m.Data(pos(1), "", pos(0))
	a := m.Tick(true)
	m.Tick(false) // drop nothing: not timed out
	if len(a) != 1 {
		t.Fatalf("no request")
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !uuid.MatchString(a[0].SnapshotID) {
		t.Errorf("id %q is not a UUID", a[0].SnapshotID)
	}
	if id := newUUID(); id == a[0].SnapshotID {
		t.Errorf("two ids alike: %s", id)
	}
	if d := time.Since(time.UnixMilli(a[0].Time)); d < 0 || d > time.Minute {
		t.Errorf("request time %d is not now", a[0].Time)
	}
}

// TestConcurrentUse is for the race detector: the reader and the ticker
// call the Machine from different goroutines.
func TestConcurrentUse(t *testing.T) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Millisecond); return now }
	m := New(Config{Topic: topic, Local: "A", Remote: "B", Interval: time.Millisecond, Timeout: 5 * time.Millisecond,
		CacheSize: 3, ThirdOrigins: []string{"C"}, Fresh: true, Now: clock})
	m.Data(pos(0), "", pos(0)) // data before the ticker starts, so a request is due
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		for i := range int64(500) {
			for _, mk := range m.Data(pos(i), "C", pos(i)) {
				m.Marker(pos(i), mk)
			}
			m.Marker(pos(i), requestFromB(fmt.Sprint(i)))
		}
	}()
	go func() {
		defer wg.Done()
		for range 500 {
			for _, mk := range m.Tick(true) {
				for _, out := range m.Marker(pos(1000), responseFromB(mk.SnapshotID, 5, nil)) {
					m.Marker(pos(1001), out)
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range int64(500) {
			m.Covering(pos(i))
			m.Prune(pos(i / 2))
			m.Stats()
		}
	}()
	wg.Wait()
	if st := m.Stats(); st.Started == 0 {
		t.Errorf("no request started: %+v", st)
	}
}

func TestUnknown(t *testing.T) {
	h := newHarness(func(c *Config) { c.Fresh = false; c.ThirdOrigins = []string{"C", "D"} })
	if got := h.m.Unknown(); !reflect.DeepEqual(got, []string{"C", "D"}) {
		t.Fatalf("Unknown() = %v, want [C D]", got)
	}
	h.m.Learn("D", marker.NoneSeen)
	h.m.Data(pos(1), "C", pos(2))
	if got := h.m.Unknown(); got != nil {
		t.Fatalf("Unknown() = %v after learning both, want none", got)
	}
	fresh := newHarness(func(c *Config) { c.ThirdOrigins = []string{"C"} })
	if got := fresh.m.Unknown(); got != nil {
		t.Fatalf("fresh Unknown() = %v, want none", got)
	}
}

// TestMaxLate: at most maxLate timed-out requests wait for their
// response; the oldest go first.
func TestMaxLate(t *testing.T) {
	h := newHarness(func(c *Config) { c.MaxPending = 5 })
	var ids []string
	for i := range 40 {
		h.m.Data(pos(int64(i+1)), "", pos(0))
		for _, mk := range h.m.Tick(true) {
			ids = append(ids, mk.SnapshotID)
		}
		h.now = h.now.Add(time.Second)
	}
	late := len(h.m.pending) - h.m.live()
	if late != maxLate || len(ids) < maxLate+6 {
		t.Fatalf("%d requests, %d late kept, want %d", len(ids), late, maxLate)
	}
	kept := h.m.pending[0].id
	k := slices.Index(ids, kept)
	if k < 1 {
		t.Fatalf("oldest kept %s among %v", kept, ids)
	}
	// The older ones went: their responses count for nothing.
	for _, id := range ids[:k] {
		if got := h.m.Marker(pos(100), responseFromB(id, 5, nil)); got != nil {
			t.Errorf("response to %s, dropped: got %v", id, got)
		}
	}
	if got := h.m.Marker(pos(101), responseFromB(kept, 6, nil)); len(got) != 1 || got[0].SnapshotID != kept {
		t.Errorf("response to %s, late but kept: got %v", kept, got)
	}
}
