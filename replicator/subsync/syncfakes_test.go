package subsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// Fakes and builders for the subscription-sync tests (sync_test.go): the
// admin APIs, the marker producer and the start-up reader of one pair
// (east, west) on one partition.

const (
	syncTopic      = "persistent://shop/orders/orders-partition-0"
	syncOtherTopic = "persistent://shop/orders/orders-partition-1"
	syncTopicLabel = "shop/orders/orders"
)

var (
	syncKey      = []byte("sync-test-marker-key-0123456789")
	syncOtherKey = []byte("another-marker-key-0123456789")
)

// syncTracked is the rig's subscription selection: billing and audit.
func syncTracked(sub string) bool { return sub == "billing" || sub == "audit" }

// errAdmin is what failing fakes return.
var errAdmin = errors.New("admin API unavailable")

// fakeSyncAdmin is a Admin with settable answers. Safe for concurrent
// use.
type fakeSyncAdmin struct {
	mu       sync.Mutex
	md       map[string]marker.Position
	backlog  map[string]int64
	mdErr    error
	blogErr  error
	mdCalls  int
	lagCalls int
}

func (a *fakeSyncAdmin) MarkDeletes(_ context.Context, topic string) (map[string]marker.Position, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mdCalls++
	if topic != syncTopic {
		return nil, fmt.Errorf("unexpected topic %q", topic)
	}
	if a.mdErr != nil {
		return nil, a.mdErr
	}
	return maps.Clone(a.md), nil
}

func (a *fakeSyncAdmin) Backlogs(_ context.Context, topic string) (map[string]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lagCalls++
	if topic != syncTopic {
		return nil, fmt.Errorf("unexpected topic %q", topic)
	}
	if a.blogErr != nil {
		return nil, a.blogErr
	}
	return maps.Clone(a.backlog), nil
}

func (a *fakeSyncAdmin) setMD(sub string, p marker.Position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.md == nil {
		a.md = map[string]marker.Position{}
	}
	a.md[sub] = p
}

// fakeSubAdmin is a subscription.Admin over an in-memory set of
// subscriptions of syncTopic. Reset and Create put the subscription's
// mark-delete position just before `at`, as Pulsar does. Safe for
// concurrent use.
type fakeSubAdmin struct {
	mu       sync.Mutex
	subs     map[string]subscription.State
	stateErr error
	resetErr error
	calls    []string // "reset billing 1:20:-1", "create audit 3:4:-1"
	states   int      // State calls
}

func (a *fakeSubAdmin) State(_ context.Context, topic, sub string) (subscription.State, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.states++
	if topic != syncTopic {
		return subscription.State{}, fmt.Errorf("unexpected topic %q", topic)
	}
	if a.stateErr != nil {
		return subscription.State{}, a.stateErr
	}
	return a.subs[sub], nil
}

func (a *fakeSubAdmin) Create(_ context.Context, topic, sub string, at marker.Position) error {
	return a.move("create", topic, sub, at)
}

func (a *fakeSubAdmin) Reset(_ context.Context, topic, sub string, at marker.Position) error {
	return a.move("reset", topic, sub, at)
}

func (a *fakeSubAdmin) move(op, topic, sub string, at marker.Position) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if topic != syncTopic {
		return fmt.Errorf("unexpected topic %q", topic)
	}
	a.calls = append(a.calls, fmt.Sprintf("%s %s %s", op, sub, at))
	if op == "reset" && a.resetErr != nil {
		return a.resetErr
	}
	if a.subs == nil {
		a.subs = map[string]subscription.State{}
	}
	st := a.subs[sub]
	st.Exists = true
	st.MarkDelete = subsynctest.Pos(at.Ledger, at.Entry-1)
	a.subs[sub] = st
	return nil
}

func (a *fakeSubAdmin) set(sub string, st subscription.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.subs == nil {
		a.subs = map[string]subscription.State{}
	}
	a.subs[sub] = st
}

func (a *fakeSubAdmin) stateReads() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.states
}

func (a *fakeSubAdmin) takeCalls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.calls
	a.calls = nil
	return out
}

// fakeHistory is a HistorySource over a fixed list of messages.
type fakeHistory struct {
	mu      sync.Mutex
	msgs    []pulsar.Message
	openErr error
	nextErr error // after the messages, Next fails with it (nil: the end)
	opened  int
	closed  int
	read    int
	froms   []marker.Position // where each reader started
}

func (h *fakeHistory) Open(ctx context.Context, from marker.Position) (HistoryReader, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opened++
	h.froms = append(h.froms, from)
	if h.openErr != nil {
		return nil, h.openErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	i := 0
	if from.Ledger >= 0 {
		for i < len(h.msgs) && positionOf(h.msgs[i].ID()).Compare(from) < 0 {
			i++
		}
	}
	return &fakeHistoryReader{h: h, i: i}, nil
}

func (h *fakeHistory) opens() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opened
}

type fakeHistoryReader struct {
	h *fakeHistory
	i int
}

func (r *fakeHistoryReader) Next(ctx context.Context) (HistoryEntry, bool, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return HistoryEntry{}, false, err
	}
	if r.i >= len(r.h.msgs) {
		return HistoryEntry{}, false, r.h.nextErr
	}
	m := r.h.msgs[r.i]
	r.i++
	r.h.read++
	e := HistoryEntry{Pos: positionOf(m.ID())}
	if e.Kind, e.Marker = marker.KindOf(m.Properties()); e.Marker {
		e.Payload = m.Payload()
	}
	return e, true, nil
}

func (r *fakeHistoryReader) Close() {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.h.closed++
}

// syncRig is one Sync for (east, west) on syncTopic with fakes around
// it.
type syncRig struct {
	s       *Sync
	local   *fakeSyncAdmin
	remote  *fakeSyncAdmin
	subs    *fakeSubAdmin
	sink    *subsynctest.Sink
	hist    *fakeHistory
	applied *Applied
	m       *metrics.Metrics
}

// rigConfig varies the rig's snapshot machine and start-up state.
type rigConfig struct {
	third   []string // third origins
	fresh   bool
	cursors []string // cursors at start
}

func newSyncRig(t *testing.T, rc rigConfig) *syncRig {
	t.Helper()
	ids := 0
	r := &syncRig{
		local: &fakeSyncAdmin{}, remote: &fakeSyncAdmin{}, subs: &fakeSubAdmin{},
		sink: &subsynctest.Sink{}, hist: &fakeHistory{}, applied: &Applied{}, m: metrics.New(nil),
	}
	r.s = &Sync{
		Config: Config{
			Local: "east", Remote: "west", Topic: syncTopic, Keys: marker.NewKeys(syncKey),
			Interval: 1e9, // 1 s
			Tracked:  syncTracked,
			Machine: snapshot.New(snapshot.Config{
				Topic: syncTopic, Local: "east", Remote: "west",
				ThirdOrigins: rc.third, Fresh: rc.fresh,
				NewID: func() string { ids++; return fmt.Sprintf("snap-%d", ids) },
			}),
			Planner:        subscription.NewPlanner(),
			Writer:         r.sink,
			LocalAdmin:     r.local,
			RemoteAdmin:    r.remote,
			SubAdmin:       r.subs,
			History:        r.hist,
			Metrics:        r.m,
			Log:            zaptest.NewLogger(t),
			Applied:        r.applied,
			CursorsAtStart: slices.Clone(rc.cursors),
		},
		pace: pacer{wake: make(chan struct{}, 1)},
	}
	return r
}

// pending returns the updates waiting to be applied.
func (r *syncRig) pending() map[string]marker.Position {
	return r.s.queue.waiting()
}

// lagSeries returns the subscription-lag series (entries and seconds) by
// subscription.
func lagSeries(t *testing.T, m *metrics.Metrics) map[string][2]float64 {
	t.Helper()
	out := map[string][2]float64{}
	read := func(g *prometheus.GaugeVec, i int) {
		ch := make(chan prometheus.Metric, 100)
		g.Collect(ch)
		close(ch)
		for pm := range ch {
			var d dto.Metric
			if err := pm.Write(&d); err != nil {
				t.Fatal(err)
			}
			labels := map[string]string{}
			for _, lp := range d.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["source"] != "east" || labels["target"] != "west" || labels["topic"] != syncTopicLabel {
				t.Errorf("lag series with unexpected labels %v", labels)
			}
			v := out[labels["subscription"]]
			v[i] = d.GetGauge().GetValue()
			out[labels["subscription"]] = v
		}
	}
	read(m.SubscriptionLag, 0)
	read(m.SubscriptionLagSeconds, 1)
	return out
}

// readBefore has the rig's sync hold mds as the positions an earlier
// follow read: a position new to a follow, or behind the one read
// before, waits for a confirming read before it sends an update
// (confirm.go).
func (r *syncRig) readBefore(mds map[string]marker.Position) { r.s.fl.mds = maps.Clone(mds) }

// eventLog records the order in which things happened, across goroutines.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, e)
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

// blockingSubAdmin is a fakeSubAdmin whose Reset waits for release (not
// for its context: a call in flight when the stop came), recording in log
// when it began and returned.
type blockingSubAdmin struct {
	*fakeSubAdmin
	release chan struct{}
	log     *eventLog
}

func (a *blockingSubAdmin) Reset(ctx context.Context, topic, sub string, at marker.Position) error {
	a.log.add("reset began")
	<-a.release
	err := a.fakeSubAdmin.Reset(ctx, topic, sub, at)
	a.log.add("reset returned")
	return err
}

// positionOf is where a message read by pulsar-client-go (the fakes'
// messages) sits in its partition.
func positionOf(id pulsar.MessageID) marker.Position {
	return marker.Position{Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
}

// blockingHistory is a HistorySource whose readers return no entry until
// release is closed (then the end), or until their context ends; it
// counts the readers open at once.
type blockingHistory struct {
	release chan struct{}

	mu             sync.Mutex
	open, most     int
	opened, closed int
}

func (h *blockingHistory) Open(ctx context.Context, _ marker.Position) (HistoryReader, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open++
	h.opened++
	h.most = max(h.most, h.open)
	return &blockingHistoryReader{h: h}, nil
}

func (h *blockingHistory) counts() (open, most, opened, closed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.most, h.opened, h.closed
}

type blockingHistoryReader struct{ h *blockingHistory }

func (r *blockingHistoryReader) Next(ctx context.Context) (HistoryEntry, bool, error) {
	select {
	case <-r.h.release:
		return HistoryEntry{}, false, nil
	case <-ctx.Done():
		return HistoryEntry{}, false, ctx.Err()
	}
}

func (r *blockingHistoryReader) Close() {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	r.h.open--
	r.h.closed++
}
