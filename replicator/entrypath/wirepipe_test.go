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
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
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
	// onEast, when set, sees east's commands first (after the ack check)
	// and may answer them itself, as a wiretest.Handler does.
	onEast wiretest.Handler
}

func newWireWorld(t *testing.T) *wireWorld {
	w := &wireWorld{t: t, east: wiretest.New(t), west: wiretest.New(t), keys: marker.NewKeys([]byte("0123456789abcdef"))}
	w.east.KeepEntries()
	w.west.KeepEntries()
	// Acknowledged only once copied: every ACK on east names entries
	// west holds a signed copy of.
	w.east.Handle(func(c *wiretest.Conn, cmd wire.Command, f wire.Frame) bool {
		a, ok := cmd.Body.(*wire.Ack)
		if !ok {
			w.mu.Lock()
			h := w.onEast
			w.mu.Unlock()
			return h != nil && h(c, cmd, f)
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

func (w *wireWorld) cluster(name string, b *wiretest.Broker) *cluster.Clients {
	c := &cluster.Clients{Name: name, Log: zaptest.NewLogger(w.t).Named(name),
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

// partition is the entry pipe from east to west as the pair builds it
// (New), with on_refused: skip when skip is set.
func (w *wireWorld) partition(skip bool) *Partition {
	return New(Config{
		Local: w.cluster("east", w.east), Remote: w.cluster("west", w.west),
		Topic: wireTopic, Subscription: "geo-sidecar-west", Start: wire.Earliest,
		MaxPending: 8, Keys: w.keys, ReaderPrefix: "geo-sidecar", SkipRefused: skip,
		Budget:   NewTargetBudgets(64<<20, []string{"west"}, nil).Of("west"),
		Pool:     NewReceivePools(512<<20, []string{"west"}, nil).Of("west"),
		ReadBack: NewReadBackPools(64<<20, []string{"west"}, nil).Of("west"),
		Metrics:  metrics.New(nil), Log: zaptest.NewLogger(w.t),
	})
}

// run runs p until the returned stop is called.
func (w *wireWorld) run(p *Partition) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("Run() = %v", err)
		}
	}
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
			// As a broker does for a producer fenced by an exclusive
			// one that took over since: the first SEND refused and every
			// one after it on that producer (ProducerFenced is terminal
			// for the producer, not for the topic); a new producer is
			// taken. (A terminated topic refuses every producer:
			// TestEntryPipeOverWireStops.)
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
				c.Send(&wire.SendError{ProducerID: s.ProducerID, SequenceID: s.SequenceID, Error: wire.ProducerFenced, Message: "fenced"})
				return true
			})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWireWorld(t)
			p := w.partition(false)
			defer w.run(p)()

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

// TestEntryPipeOverWireStops: the refusals that stop a partition, as the
// real wire client meets them (issue 21, item 4). Halfway through, west's
// topic is terminated (its producer closed, every later producer and
// send refused with TopicTerminatedError: the wire producer gives up
// reconnecting), or east no longer serves the schema version of the
// entries that follow (its GetSchema answered "not found", as for a
// deleted schema). The partition stops at the first entry it cannot
// copy with partitions_stopped{reason}, east's cursor acknowledging
// nothing past what west holds; with on_refused: skip the entries whose
// schema is gone are skipped and counted, while a terminated topic stops
// the partition all the same.
func TestEntryPipeOverWireStops(t *testing.T) {
	const n = 20
	v3 := []byte("\x00\x00\x00\x00\x00\x00\x00\x03")
	for _, tt := range []struct {
		name      string
		reason    string
		skippable bool
		fault     func(w *wireWorld)
		schema    []byte // of the entries after the fault
	}{
		{"target topic terminated", stopTargetTerminated, false, func(w *wireWorld) {
			w.west.Handle(func(c *wiretest.Conn, cmd wire.Command, _ wire.Frame) bool {
				switch x := cmd.Body.(type) {
				case *wire.ProducerCommand:
					c.Send(&wire.Error{RequestID: x.RequestID, Error: wire.TopicTerminatedError, Message: "Topic was already terminated"})
					return true
				case *wire.Send:
					c.Send(&wire.SendError{ProducerID: x.ProducerID, SequenceID: x.SequenceID, Error: wire.TopicTerminatedError, Message: "Topic was already terminated"})
					return true
				}
				return false
			})
			w.west.Unload(wireTopic) // the broker closes the producers of a topic it terminates
		}, nil},
		{"schema version deleted on the source", entryrule.SkipSourceSchemaMissing, true, func(w *wireWorld) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.onEast = func(c *wiretest.Conn, cmd wire.Command, _ wire.Frame) bool {
				x, ok := cmd.Body.(*wire.GetSchema)
				if !ok {
					return false
				}
				c.Send(&wire.GetSchemaResponse{RequestID: x.RequestID, HasError: true, ErrorCode: wire.TopicNotFound, ErrorMessage: "Topic not found or no-schema"})
				return true
			}
		}, v3},
	} {
		for _, skip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/skip=%v", tt.name, skip), func(t *testing.T) {
				w := newWireWorld(t)
				p := w.partition(skip)
				defer w.run(p)()
				w.add(0, n/2)
				w.copiedAll(n / 2)
				tt.fault(w)
				for i := n / 2; i < n; i++ {
					md := wire.MetadataBuilder{ProducerName: "app", SequenceID: uint64(i), PublishTime: 1_700_000_000_000 + uint64(i), NumMessagesInBatch: 1}.Append(nil)
					if tt.schema != nil {
						md = append(md, schemaVersion(tt.schema)...)
					}
					w.east.Append(wireTopic, md, []byte(fmt.Sprint("payload ", i)), 1)
				}
				deadline := time.Now().Add(time.Minute)
				if skip && tt.skippable {
					for w.east.MarkDelete(wireTopic, "geo-sidecar-west") < n {
						if time.Now().After(deadline) {
							t.Fatalf("east acknowledged %d entries, want all %d (skipped)", w.east.MarkDelete(wireTopic, "geo-sidecar-west"), n)
						}
						time.Sleep(10 * time.Millisecond)
					}
					if got := metricstest.Counter(p.m.Skipped, "east", "west", tt.reason); got != n/2 {
						t.Errorf("skipped{reason=%s} = %v, want %d", tt.reason, got, n/2)
					}
				} else {
					for metricstest.Gauge(p.m.PartitionsStopped, "east", "west", tt.reason) != 1 {
						if time.Now().After(deadline) {
							t.Fatalf("partitions_stopped{reason=%s} = %v, want 1", tt.reason, metricstest.Gauge(p.m.PartitionsStopped, "east", "west", tt.reason))
						}
						time.Sleep(10 * time.Millisecond)
					}
					if got := w.east.MarkDelete(wireTopic, "geo-sidecar-west"); got != n/2 {
						t.Errorf("east acknowledged %d entries, want %d (nothing past what west holds)", got, n/2)
					}
				}
				if got := len(w.west.Entries(wireTopic)); got != n/2 {
					t.Errorf("west holds %d entries, want %d", got, n/2)
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				if skip && tt.skippable {
					// Each skipped entry acknowledged once, with no copy.
					if len(w.violations) != n/2 {
						t.Errorf("%d acknowledgements without a copy, want the %d skipped entries': %v", len(w.violations), n/2, w.violations)
					}
					return
				}
				for _, v := range w.violations {
					t.Error(v)
				}
			})
		}
	}
}
