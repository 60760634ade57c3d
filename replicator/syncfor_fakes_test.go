package replicator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync"
)

// Builders for the tests of pair.syncFor (syncfor_test.go): a marker
// sink and the messages of one pair (east, west) on one partition, copied
// from subsync's test fakes.

const syncTopic = "persistent://shop/orders/orders-partition-0"

var syncKey = []byte("sync-test-marker-key-0123456789")

func pos(ledger, entry int64) marker.Position {
	return marker.Position{Ledger: ledger, Entry: entry, Batch: -1}
}

type fakeSink struct {
	mu      sync.Mutex
	written []marker.Marker
	failN   int // fail the next failN writes
	closed  int
}

func (s *fakeSink) Write(_ context.Context, mk marker.Marker) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failN > 0 {
		s.failN--
		return errors.New("marker producer unavailable")
	}
	s.written = append(s.written, mk)
	return nil
}

func (s *fakeSink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
}

func (s *fakeSink) take() []marker.Marker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.written
	s.written = nil
	return out
}

func (s *fakeSink) failNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN = n
}

type fakeMsg struct {
	pulsar.Message

	id       pulsar.MessageID
	payload  []byte
	props    map[string]string
	producer string
}

func (m *fakeMsg) ID() pulsar.MessageID          { return m.id }
func (m *fakeMsg) Payload() []byte               { return m.payload }
func (m *fakeMsg) Properties() map[string]string { return m.props }
func (m *fakeMsg) ProducerName() string          { return m.producer }

func msgAt(ledger, entry int64, batch int32, payload string) *fakeMsg {
	return &fakeMsg{
		id:      pulsar.NewMessageID(ledger, entry, batch, 0),
		payload: []byte(payload),
		props:   map[string]string{},
	}
}

func readOrigin(msg *fakeMsg) marker.Origin {
	at, ok := marker.ParsePosition(msg.props[marker.PropOriginID])
	cluster := msg.props[marker.PropOriginCluster]
	return marker.Origin{Cluster: cluster, At: at, Signed: cluster != "" && ok}
}

func readMarker(ctx context.Context, s *subsync.Sync, msg *fakeMsg) (forward bool) {
	return s.MarkerAt(ctx, positionOf(msg.ID()), msg.Payload(), readOrigin(msg), msg.ProducerName())
}

func readData(ctx context.Context, s *subsync.Sync, msg *fakeMsg) {
	if from := readOrigin(msg); from.Signed {
		s.DataAt(ctx, positionOf(msg.ID()), from.Cluster, from.At)
		return
	}
	s.DataAt(ctx, positionOf(msg.ID()), "", marker.Position{})
}

func markerMsg(t *testing.T, ledger, entry int64, mk marker.Marker, key []byte, copiedFrom string) *fakeMsg {
	t.Helper()
	payload, err := marker.Encode(mk, key)
	if err != nil {
		t.Fatalf("marker.Encode(%+v): %v", mk, err)
	}
	m := msgAt(ledger, entry, -1, "")
	m.payload = payload
	m.props = marker.Properties(mk.Kind)
	if copiedFrom != "" {
		m.props[marker.PropOriginCluster] = copiedFrom
		m.props[marker.PropOriginID] = fmt.Sprintf("90:%d:-1", entry) // each copy's origin after the one before
	}
	return m
}

func copyMsg(ledger, entry int64, origin string, opos marker.Position) *fakeMsg {
	m := msgAt(ledger, entry, -1, "data")
	m.props[marker.PropOriginCluster] = origin
	m.props[marker.PropOriginID] = fmt.Sprintf("%d:%d:%d", opos.Ledger, opos.Entry, opos.Batch)
	return m
}

func positionOf(id pulsar.MessageID) marker.Position {
	return marker.Position{Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
}

func request(from, to, topic string) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshotRequest, SnapshotID: "req-1", From: from, To: to, Topic: topic, Time: 1}
}
