// Package subsynctest holds fakes for the tests of the subscription sync
// and of what feeds it (entrypath's entry pipe, replicator's pair.syncFor):
// a marker sink that records what it was given, the messages a sync reads
// from its local partition, the admin APIs it asks (SyncAdmin, SubAdmin)
// and the history it re-reads at start (History). It exists so that those
// tests share one copy; only tests import it.
//
// It does not import subsync, so that subsync's own (internal) tests can
// import it: a sync is fed through Feed, which *subsync.Sync satisfies,
// and a test wraps History in a few lines to return subsync's reader
// types. The rigs that build a sync stay in the tests that use them
// (subsync's reaches into the sync).
package subsynctest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Pos is an entry position (no batch).
func Pos(ledger, entry int64) marker.Position {
	return marker.Position{Ledger: ledger, Entry: entry, Batch: -1}
}

// PositionOf is where a message read by pulsar-client-go sits in its
// partition (as subsync reads it).
func PositionOf(id pulsar.MessageID) marker.Position {
	return marker.Position{Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
}

// Sink is a subsync.MarkerSink recording what was written. Safe for
// concurrent use.
type Sink struct {
	mu      sync.Mutex
	written []marker.Marker
	failN   int // fail the next failN writes
	// Closed counts the calls of Close.
	Closed int
	open   bool // written since the last Close (Holds)
}

func (s *Sink) Write(_ context.Context, mk marker.Marker) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failN > 0 {
		s.failN--
		return errors.New("marker producer unavailable")
	}
	s.written = append(s.written, mk)
	s.open = true
	return nil
}

func (s *Sink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Closed++
	s.open = false
}

// Holds reports whether the sink holds a producer, as the real one does
// from a write until Close: the marker producer's name is one per
// partition and direction, so a standby that holds it refuses every
// marker of the active instance.
func (s *Sink) Holds() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Take returns what was written since the last Take.
func (s *Sink) Take() []marker.Marker {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.written
	s.written = nil
	return out
}

// FailNext makes the next n writes fail.
func (s *Sink) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN = n
}

// KindsOf is the kind of each of mks.
func KindsOf(mks []marker.Marker) []marker.Kind {
	var out []marker.Kind
	for _, mk := range mks {
		out = append(out, mk.Kind)
	}
	return out
}

// Msg is a pulsar.Message read from the local cluster (the start-up
// re-read's reader returns them). Only the methods the sync uses are
// implemented; any other call panics on the nil embedded interface, which
// flags an unexpected dependency.
type Msg struct {
	pulsar.Message

	MsgID    pulsar.MessageID
	Body     []byte
	Props    map[string]string
	Producer string
}

func (m *Msg) ID() pulsar.MessageID          { return m.MsgID }
func (m *Msg) Payload() []byte               { return m.Body }
func (m *Msg) Properties() map[string]string { return m.Props }
func (m *Msg) ProducerName() string          { return m.Producer }

// MsgAt is a plain message at position (ledger, entry, batch) of partition 0.
func MsgAt(ledger, entry int64, batch int32, payload string) *Msg {
	return &Msg{
		MsgID: pulsar.NewMessageID(ledger, entry, batch, 0),
		Body:  []byte(payload),
		Props: map[string]string{},
	}
}

// MarkerMsg is a message at (ledger, entry) of the local partition holding
// mk signed with key. A non-empty copiedFrom makes it a copy from that
// cluster (origin properties set), as a remote's markers arrive.
func MarkerMsg(t testing.TB, ledger, entry int64, mk marker.Marker, key []byte, copiedFrom string) *Msg {
	t.Helper()
	payload, err := marker.Encode(mk, key)
	if err != nil {
		t.Fatalf("marker.Encode(%+v): %v", mk, err)
	}
	m := MsgAt(ledger, entry, -1, "")
	m.Body = payload
	m.Props = marker.Properties(mk.Kind)
	if copiedFrom != "" {
		m.Props[marker.PropOriginCluster] = copiedFrom
		m.Props[marker.PropOriginID] = fmt.Sprintf("90:%d:-1", entry) // each copy's origin after the one before
	}
	return m
}

// CopyMsg is a data message at (ledger, entry) copied from origin, where it
// was at opos.
func CopyMsg(ledger, entry int64, origin string, opos marker.Position) *Msg {
	m := MsgAt(ledger, entry, -1, "data")
	m.Props[marker.PropOriginCluster] = origin
	m.Props[marker.PropOriginID] = fmt.Sprintf("%d:%d:%d", opos.Ledger, opos.Entry, opos.Batch)
	return m
}

// ReadOrigin is where msg says it was copied from, as the entry pipe hands
// a copy's origin to the sync after checking it (entryrule.Origin): a copy
// whose origin id parses counts as signed here, so that these tests judge
// the sync's rules, not the signature (entrypath's entryguards_test.go
// does that).
func ReadOrigin(msg *Msg) marker.Origin {
	at, ok := marker.ParsePosition(msg.Props[marker.PropOriginID])
	cluster := msg.Props[marker.PropOriginCluster]
	return marker.Origin{Cluster: cluster, At: at, Signed: cluster != "" && ok}
}

// Feed is what the entry pipe gives a sync of what it reads;
// *subsync.Sync is one.
type Feed interface {
	MarkerAt(ctx context.Context, at marker.Position, payload []byte, from marker.Origin, producer string) (forward bool)
	DataAt(ctx context.Context, at marker.Position, origin string, opos marker.Position)
}

// ReadMarker gives s a marker message read from the local partition, as
// the entry pipe does (Sync.MarkerAt).
func ReadMarker(ctx context.Context, s Feed, msg *Msg) (forward bool) {
	return s.MarkerAt(ctx, PositionOf(msg.ID()), msg.Payload(), ReadOrigin(msg), msg.ProducerName())
}

// ReadData gives s a data message read from the local partition, as the
// entry pipe does (Sync.DataAt): a copy with a signed origin as a copy,
// anything else as local data.
func ReadData(ctx context.Context, s Feed, msg *Msg) {
	if from := ReadOrigin(msg); from.Signed {
		s.DataAt(ctx, PositionOf(msg.ID()), from.Cluster, from.At)
		return
	}
	s.DataAt(ctx, PositionOf(msg.ID()), "", marker.Position{})
}

// Request is a snapshot request from one cluster to another for topic.
func Request(from, to, topic string) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshotRequest, SnapshotID: "req-1", From: from, To: to, Topic: topic, Time: 1}
}
