package entrypath

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire/wiretest"
)

// The entry pipe end to end: a Partition built by New, over the real wire
// clients of two clusters whose brokers are wiretest's (east the local,
// west the remote), with no fake of its ends. The unit tests beside it
// (entrypipe_test.go) fake the ends at the interface to stage what a
// broker rarely does on cue; this one proves the pieces fit: cursor,
// producer, deduplication records, signed origins and the read-back over
// the binary protocol, across reconnects.

const wireTopic = "persistent://t/ns/x-partition-0"

// wireAdmin is the remote's admin API as the read-back uses it: the
// partition's ledger list (internal stats), from the west broker.
type wireAdmin struct {
	pulsaradmin.Client
	b *wiretest.Broker
}

func (a wireAdmin) Topics() admin.Topics { return wireTopics{b: a.b} }

type wireTopics struct {
	admin.Topics
	b *wiretest.Broker
}

func (t wireTopics) GetInternalStatsWithContext(_ context.Context, tn utils.TopicName) (utils.PersistentTopicInternalStats, error) {
	var st utils.PersistentTopicInternalStats
	if es := t.b.Entries(tn.String()); len(es) > 0 {
		st.Ledgers = []utils.LedgerInfo{{LedgerID: int64(es[0].ID.Ledger), Entries: int64(len(es))}}
	}
	return st, nil
}

// wireWorld is east and west with the partition's entries.
type wireWorld struct {
	t          *testing.T
	east, west *wiretest.Broker
	keys       marker.Keys
	mu         sync.Mutex
	violations []string
}

func newWireWorld(t *testing.T) *wireWorld {
	w := &wireWorld{t: t, east: wiretest.New(t), west: wiretest.New(t), keys: marker.NewKeys([]byte("0123456789abcdef"))}
	w.east.KeepEntries()
	w.west.KeepEntries()
	// Acknowledged only once copied: every ACK on east names entries
	// west holds a signed copy of.
	w.east.Handle(func(_ *wiretest.Conn, cmd wire.Command, _ wire.Frame) bool {
		a, ok := cmd.Body.(*wire.Ack)
		if !ok {
			return false
		}
		copies := w.copies()
		for _, id := range a.MessageIDs {
			if copies[entryPos(id)] == 0 {
				w.mu.Lock()
				w.violations = append(w.violations, fmt.Sprintf("east entry %v acknowledged with no copy on west", id))
				w.mu.Unlock()
			}
		}
		return false
	})
	return w
}

// copies counts west's copies by the east position their origin names,
// each checked as the read-back checks it (its signature over the bytes).
func (w *wireWorld) copies() map[marker.Position]int {
	ours := bySignature(w.keys, wireTopic, "west")
	n := map[marker.Position]int{}
	for _, e := range w.west.Entries(wireTopic) {
		c := readBackCopy(wire.Entry{ID: e.ID, Metadata: e.Metadata, Payload: e.Payload})
		if !ours(c) || c.origins[0].cluster != "east" {
			w.t.Errorf("west entry %v is no signed copy of east's", e.ID)
			continue
		}
		n[c.origins[0].pos]++
	}
	return n
}

func (w *wireWorld) add(from, to int) {
	for i := from; i < to; i++ {
		md := wire.MetadataBuilder{ProducerName: "app", SequenceID: uint64(i), PublishTime: 1_700_000_000_000 + uint64(i), NumMessagesInBatch: 1}.Append(nil)
		w.east.Append(wireTopic, md, []byte(fmt.Sprint("payload ", i)), 1)
	}
}

// copiedAll waits until west holds n copies and east's cursor acknowledged
// n entries.
func (w *wireWorld) copiedAll(n int) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(w.west.Entries(wireTopic)) < n || w.east.MarkDelete(wireTopic, "geo-sidecar-west") < n {
		if time.Now().After(deadline) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.t.Fatalf("west holds %d entries, east acknowledged %d; want %d (%v)", len(w.west.Entries(wireTopic)), w.east.MarkDelete(wireTopic, "geo-sidecar-west"), n, w.violations)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *wireWorld) cluster(name string, b *wiretest.Broker) *cluster.Conn {
	c := &cluster.Conn{Name: name, Log: zaptest.NewLogger(w.t).Named(name),
		Config: config.Cluster{Name: name, ServiceURL: b.URL(), KeepAlive: config.Duration{Duration: 30 * time.Second}}}
	if b == w.west {
		c.Admin = wireAdmin{b: b}
	}
	w.t.Cleanup(func() {
		if wc, err := c.WireClient(); err == nil {
			wc.Close()
		}
	})
	return c
}

// TestEntryPipeOverWire copies east's partition to west through the real
// entry pipe and wire client while a fault strikes halfway: every entry
// ends on west exactly once, byte for byte and signed, and east
// acknowledges each only after west stored its copy.
func TestEntryPipeOverWire(t *testing.T) {
	const n = 40
	for _, tt := range []struct {
		name  string
		fault func(w *wireWorld)
	}{
		{"no fault", func(*wireWorld) {}},
		{"both topics unloaded: cursor and producer reconnect", func(w *wireWorld) {
			w.east.Unload(wireTopic)
			w.west.Unload(wireTopic)
		}},
		{"a receipt lost with its connection: the read-back proves the copy", func(w *wireWorld) {
			var once sync.Once
			w.west.LoseReceipts(func(c *wiretest.Conn, _ wiretest.Stored) (lost bool) {
				once.Do(func() { lost = true; c.Close() })
				return lost
			})
		}},
		{"a producer's sends refused for good: the next session sends them again", func(w *wireWorld) {
			// As a broker does for a terminated topic: the first SEND
			// refused and every one after it on that producer; a new
			// producer is taken.
			var mu sync.Mutex
			var refusing *wiretest.Conn
			var id uint64
			w.west.Handle(func(c *wiretest.Conn, cmd wire.Command, _ wire.Frame) bool {
				s, ok := cmd.Body.(*wire.Send)
				if !ok {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				if refusing == nil {
					refusing, id = c, s.ProducerID
				}
				if c != refusing || s.ProducerID != id {
					return false
				}
				c.Send(&wire.SendError{ProducerID: s.ProducerID, SequenceID: s.SequenceID, Error: wire.TopicTerminatedError, Message: "terminated"})
				return true
			})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWireWorld(t)
			p := New(Config{
				Local: w.cluster("east", w.east), Remote: w.cluster("west", w.west),
				Topic: wireTopic, Subscription: "geo-sidecar-west", Start: wire.Earliest,
				MaxPending: 8, Keys: w.keys, ReaderPrefix: "geo-sidecar",
				Budget:   NewTargetBudgets(64<<20, []string{"west"}, nil).Of("west"),
				Pool:     NewReceivePools(512<<20, []string{"west"}, nil).Of("west"),
				ReadBack: NewReadBackPools(64<<20, []string{"west"}, nil).Of("west"),
				Metrics:  metrics.New(nil), Log: zaptest.NewLogger(t),
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run() = %v", err)
				}
			}()

			w.add(0, n/2)
			w.copiedAll(n / 2)
			tt.fault(w)
			w.add(n/2, n)
			w.copiedAll(n)

			east := w.east.Entries(wireTopic)
			copies := w.copies()
			for _, e := range east {
				if got := copies[entryPos(e.ID)]; got != 1 {
					t.Errorf("east entry %v: %d copies on west, want 1", e.ID, got)
				}
			}
			if len(w.west.Entries(wireTopic)) != n {
				t.Errorf("west holds %d entries, want %d", len(w.west.Entries(wireTopic)), n)
			}
			for i, c := range w.west.Entries(wireTopic)[:min(n, len(w.west.Entries(wireTopic)))] {
				if !bytes.Equal(c.Payload, east[i].Payload) {
					t.Errorf("west entry %d: payload %q, want east's %q in order", i, c.Payload, east[i].Payload)
				}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, v := range w.violations {
				t.Error(v)
			}
		})
	}
}
