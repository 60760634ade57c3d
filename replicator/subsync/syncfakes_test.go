package subsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

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
	syncTopic      = subsynctest.Topic
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

// The admin fakes are subsynctest's.
type (
	fakeSyncAdmin = subsynctest.SyncAdmin
	fakeSubAdmin  = subsynctest.SubAdmin
)

// fakeHistory is a HistorySource over subsynctest's History (which
// cannot name HistoryReader).
type fakeHistory struct {
	subsynctest.History
	perEntry time.Duration // each Next waits this long first (a slow re-read)
}

func (h *fakeHistory) Open(ctx context.Context, from marker.Position) (HistoryReader, error) {
	r, err := h.History.Open(ctx, from)
	if err != nil {
		return nil, err
	}
	return fakeHistoryReader{r, h.perEntry}, nil
}

type fakeHistoryReader struct {
	*subsynctest.HistoryReader
	wait time.Duration
}

func (r fakeHistoryReader) Next(ctx context.Context) (HistoryEntry, bool, error) {
	if r.wait > 0 {
		time.Sleep(r.wait)
	}
	e, ok, err := r.HistoryReader.Next(ctx)
	return HistoryEntry(e), ok, err
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
