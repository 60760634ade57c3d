package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/auth"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The replicator/wire package against real brokers: raw entries read on
// east through a Failover subscription are sent whole to west, with
// replicated_from and a property appended to their metadata, and
// pulsar-client-go consumers compare the two sides message by message.

func wireClient(t *testing.T, cluster string) *wire.Client {
	t.Helper()
	c, err := wire.NewClient(wire.ClientOptions{
		ServiceURL:       Get(cluster).ServiceURL,
		OperationTimeout: 30 * time.Second,
		Logger:           zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wireProduceMix publishes to topic, with pulsar-client-go, non-batched
// messages (with properties, keys, ordering keys, event times, an empty
// payload) and LZ4 and ZSTD compressed batches. It returns the number of
// messages.
func wireProduceMix(t *testing.T, c pulsar.Client, topic string) int {
	t.Helper()
	n := 0
	send := func(opts pulsar.ProducerOptions, msgs []*pulsar.ProducerMessage) {
		opts.Topic = topic
		p, err := c.CreateProducer(opts)
		if err != nil {
			t.Fatalf("producer on %s: %v", topic, err)
		}
		defer p.Close()
		var wg sync.WaitGroup
		errs := make(chan error, len(msgs))
		for _, m := range msgs {
			wg.Add(1)
			p.SendAsync(context.Background(), m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					errs <- err
				}
				wg.Done()
			})
		}
		if err := p.Flush(); err != nil {
			t.Fatalf("flush: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("send: %v", err)
		}
		n += len(msgs)
	}
	eventTime := time.UnixMilli(1_700_000_000_000)
	var single []*pulsar.ProducerMessage
	for i := range 5 {
		m := &pulsar.ProducerMessage{
			Payload:    []byte(fmt.Sprintf("single-%d", i)),
			Key:        fmt.Sprintf("key-%d", i),
			Properties: map[string]string{"i": fmt.Sprint(i), "kind": "single"},
		}
		if i%2 == 0 {
			m.EventTime = eventTime.Add(time.Duration(i) * time.Second)
			m.OrderingKey = fmt.Sprintf("ok-%d", i)
		}
		single = append(single, m)
	}
	// No empty payload here: pulsar-client-go v0.21 drops a non-batched
	// message with an empty payload as corrupt on receive (ErrEOM). A null
	// value (no payload, no value) is fine.
	single = append(single, &pulsar.ProducerMessage{Key: "tombstone", Properties: map[string]string{"kind": "single", "null": "yes"}})
	send(pulsar.ProducerOptions{DisableBatching: true, Name: "wire-single"}, single)

	batch := func(prefix string) []*pulsar.ProducerMessage {
		var out []*pulsar.ProducerMessage
		for i := range 50 {
			out = append(out, &pulsar.ProducerMessage{
				Payload:    []byte(fmt.Sprintf("%s-%d-%s", prefix, i, string(make([]byte, 100)))),
				Key:        fmt.Sprintf("k%d", i%7),
				Properties: map[string]string{"batch": prefix, "i": fmt.Sprint(i)},
				EventTime:  eventTime.Add(time.Duration(i) * time.Millisecond),
			})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ct   pulsar.CompressionType
	}{{"lz4", pulsar.LZ4}, {"zstd", pulsar.ZSTD}, {"plain", pulsar.NoCompression}} {
		send(pulsar.ProducerOptions{
			Name:                    "wire-batch-" + tc.name,
			CompressionType:         tc.ct,
			BatchingMaxPublishDelay: 50 * time.Millisecond,
			BatchingMaxMessages:     20,
		}, batch(tc.name))
	}
	return n
}

// wireForward reads entries from src on east (subscription sub) until want
// messages were seen, sends each to dst on west through p, acknowledging
// the source entry when the target confirmed. It returns the number of
// entries and the time spent.
func wireForward(t *testing.T, cons *wire.Consumer, p *wire.Producer, want int, firstSeq uint64) (entries int, spent time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	seq := firstSeq
	var start time.Time // from the first entry: Failover activation delays the first dispatch
	for got := 0; got < want; {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d of %d messages: %v", got, want, err)
		}
		if start.IsZero() {
			start = time.Now()
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			t.Fatalf("entry %v: %v", e.ID, err)
		}
		if md.NumMessagesInBatch != e.NumMessages {
			t.Fatalf("entry %v: NumMessages %d, metadata says %d", e.ID, e.NumMessages, md.NumMessagesInBatch)
		}
		got += int(e.NumMessages)
		entries++
		patched, err := wire.PatchMetadata(nil, e.Metadata, wire.Patch{
			ReplicatedFrom: "east",
			Properties:     []wire.KeyValue{{Key: "geo-sidecar.origin-id", Value: e.ID.String()}},
			DropTxn:        md.HasTxnID,
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		seq++
		err = p.Send(ctx, wire.Outgoing{
			Metadata: patched, Payload: e.Payload, NumMessages: e.NumMessages, SequenceID: seq, IsChunk: md.HasChunk,
		}, func(r wire.Receipt, err error) {
			defer wg.Done()
			if err == nil {
				err = cons.Ack(e.ID)
			}
			if err == nil {
				err = cons.Release(e)
			}
			if err != nil {
				mu.Lock()
				sendErr = errors.Join(sendErr, err)
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatalf("send entry %v: %v", e.ID, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	wg.Wait()
	spent = time.Since(start)
	if sendErr != nil {
		t.Fatalf("forwarding: %v", sendErr)
	}
	return entries, spent
}

func TestWireForwardEntries(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "wire")
	CreatePartitioned(t, topic, 0, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()

	// Lookups and partitioned metadata.
	if n, err := weast.PartitionedMetadata(ctx, topic); err != nil || n != 0 {
		t.Fatalf("partitioned metadata of %s: %d, %v; want 0 partitions", topic, n, err)
	}
	if b, err := weast.Lookup(ctx, topic); err != nil {
		t.Fatalf("lookup: %v", err)
	} else {
		t.Logf("lookup %s: %+v", topic, b)
	}

	var active sync.Map
	cons, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{
		Topic: topic, Subscription: "geo-sidecar.repl.west", Name: "wire-e2e-a",
		InitialPosition: wire.Earliest, Permits: 100,
		OnActiveChange: func(a bool) { active.Store("a", a) },
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	// Reference subscription on east, created before producing.
	ref, err := east.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ref", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()

	want := wireProduceMix(t, east, topic)

	prod, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.east.wire"})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer prod.Close()
	if got := prod.LastSequenceID(); got != -1 {
		t.Errorf("last sequence id without deduplication: %d, want -1", got)
	}

	entries, spent := wireForward(t, cons, prod, want, 0)
	t.Logf("forwarded %d messages in %d entries east->west in %s (%.0f µs per entry)",
		want, entries, spent, float64(spent.Microseconds())/float64(entries))
	if a, ok := active.Load("a"); !ok || a != true {
		t.Errorf("active consumer change: got %v (seen %v), want true", a, ok)
	}

	// The cursor moved: every entry was acknowledged.
	Eventually(t, 10*time.Second, func() error {
		st, err := Admin(t, "east").Topics().GetStats(*mustTopicName(t, topic))
		if err != nil {
			return err
		}
		if b := st.Subscriptions["geo-sidecar.repl.west"].MsgBacklog; b != 0 {
			return fmt.Errorf("cursor backlog %d", b)
		}
		return nil
	})

	orig := wireReceive(t, ref, want)
	copies := Consume(t, west, topic, "check", want, 30*time.Second)
	if len(copies) != want {
		t.Fatalf("west has %d messages, want %d", len(copies), want)
	}
	for i, o := range orig {
		c := copies[i]
		props := maps.Clone(o.Properties())
		if props == nil {
			props = map[string]string{}
		}
		cp := maps.Clone(c.Properties())
		originID := cp["geo-sidecar.origin-id"]
		delete(cp, "geo-sidecar.origin-id")
		wantID := fmt.Sprintf("%d:%d", msgLedger(o.ID()), msgEntry(o.ID()))
		switch {
		case string(c.Payload()) != string(o.Payload()):
			t.Errorf("message %d: payload %q, want %q", i, c.Payload(), o.Payload())
		case c.Key() != o.Key() || c.OrderingKey() != o.OrderingKey():
			t.Errorf("message %d: key %q/%q, want %q/%q", i, c.Key(), c.OrderingKey(), o.Key(), o.OrderingKey())
		case !maps.Equal(cp, props):
			t.Errorf("message %d: properties %v, want %v", i, cp, props)
		case o.Properties()["kind"] == "single" && originID != wantID:
			// Entry-level properties reach clients only for non-batched
			// entries; a batch's messages carry their own (checked raw
			// below).
			t.Errorf("message %d: origin id %q, want %q", i, originID, wantID)
		case !c.EventTime().Equal(o.EventTime()) || !c.PublishTime().Equal(o.PublishTime()):
			t.Errorf("message %d: event/publish time %v/%v, want %v/%v", i, c.EventTime(), c.PublishTime(), o.EventTime(), o.PublishTime())
		case c.IsNullValue() != o.IsNullValue():
			t.Errorf("message %d: null value %v, want %v", i, c.IsNullValue(), o.IsNullValue())
		case c.ProducerName() != o.ProducerName():
			t.Errorf("message %d: producer name %q, want %q", i, c.ProducerName(), o.ProducerName())
		case !c.IsReplicated() || c.GetReplicatedFrom() != "east":
			t.Errorf("message %d: replicated %v from %q, want from east", i, c.IsReplicated(), c.GetReplicatedFrom())
		}
	}

	// The target's last entry says where the copy stopped.
	last, ok, err := wwest.LastEntry(ctx, topic)
	if err != nil || !ok {
		t.Fatalf("last entry on west: %v (found %v)", err, ok)
	}
	lmd, err := wire.ParseMetadata(last.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	lastOrig := orig[len(orig)-1].ID()
	if id, _ := lmd.Property("geo-sidecar.origin-id"); id != fmt.Sprintf("%d:%d", lastOrig.LedgerID(), lastOrig.EntryID()) {
		t.Errorf("west's last entry %v has origin id %q, want the last source entry %d:%d", last.ID, id, lastOrig.LedgerID(), lastOrig.EntryID())
	}
	CreatePartitioned(t, Topic(ns, "empty"), 0, "west")
	if _, ok, err := wwest.LastEntry(ctx, Topic(ns, "empty")); err != nil || ok {
		t.Errorf("last entry of an empty topic: found %v, %v", ok, err)
	}
	var be *wire.BrokerError
	if _, _, err := wwest.LastEntry(ctx, Topic(ns, "missing")); !errors.As(err, &be) || be.Code != wire.TopicNotFound {
		t.Errorf("last entry of a missing topic: %v, want TopicNotFound", err)
	}

	// The copies, raw: every entry says where it came from.
	raw, err := wire.Subscribe(ctx, wwest, wire.ConsumerOptions{
		Topic: topic, Subscription: "raw-check", Name: "raw", InitialPosition: wire.Earliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range entries {
		e, err := raw.Receive(rctx)
		if err != nil {
			t.Fatalf("raw entry %d of %d on west: %v", i, entries, err)
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := md.Property("geo-sidecar.origin-id"); !ok || md.ReplicatedFrom != "east" {
			t.Errorf("west entry %v: replicated_from %q, origin id %q", e.ID, md.ReplicatedFrom, id)
		}
	}
}

// TestWireLastSequenceID: with deduplication on the target, a producer
// re-created with the same name learns the last sequence id the broker
// persisted, and a resent entry is confirmed but not stored twice.
func TestWireLastSequenceID(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "dedup")
	CreatePartitioned(t, topic, 0, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()

	cons, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{
		Topic: topic, Subscription: "geo-sidecar.repl.west", Name: "wire-e2e", InitialPosition: wire.Earliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	const n = 20
	ProduceN(t, east, topic, "m", n)

	const name = "geo-sidecar.east.dedup"
	// The policy is set before the topic is created, so the topic loads
	// with deduplication on.
	prod, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if got := prod.LastSequenceID(); got != -1 {
		t.Errorf("last sequence id of a new name: %d, want -1", got)
	}
	defer func() { prod.Close() }()

	const firstSeq = 1000
	entries, _ := wireForward(t, cons, prod, n, firstSeq)
	lastSeq := int64(firstSeq + entries)
	prod.Close()

	var last int64
	Eventually(t, 30*time.Second, func() error {
		p, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: name})
		if err != nil {
			return err
		}
		last = p.LastSequenceID()
		if last == lastSeq {
			prod = p
			return nil
		}
		p.Close()
		return fmt.Errorf("last sequence id %d, want %d", last, lastSeq)
	})

	// Resend the last entry with its sequence id: confirmed, dropped.
	md := wire.MetadataBuilder{ProducerName: "x", SequenceID: 1, PublishTime: uint64(time.Now().UnixMilli())}.Append(nil)
	done := make(chan wire.Receipt, 1)
	if err := prod.Send(ctx, wire.Outgoing{Metadata: md, Payload: []byte("dup"), NumMessages: 1, SequenceID: uint64(lastSeq)},
		func(r wire.Receipt, err error) {
			if err != nil {
				t.Errorf("duplicate: %v", err)
			}
			done <- r
		}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	t.Logf("receipt of a duplicate: %+v", r)
	got := Consume(t, west, topic, "check", n+1, 5*time.Second)
	if len(got) != n {
		t.Fatalf("west has %d messages, want %d (the duplicate must be dropped)", len(got), n)
	}
}

// TestWireThroughput forwards a backlog of single-message entries and
// reports the rate (one process, both clusters on this machine).
func TestWireThroughput(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "rate")
	CreatePartitioned(t, topic, 0, "east", "west")
	east := Client(t, "east")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()
	cons, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{
		Topic: topic, Subscription: "geo-sidecar.repl.west", Name: "wire-rate", InitialPosition: wire.Earliest, Permits: 2000,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	const n = 20000
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 5000})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	for i := range n {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload, Key: fmt.Sprint(i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	prod, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.east.rate", MaxPending: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	entries, spent := wireForward(t, cons, prod, n, 0)
	t.Logf("forwarded %d entries of 1 KiB east->west in %s: %.0f entries/s, %.1f µs per entry",
		entries, spent, float64(entries)/spent.Seconds(), float64(spent.Microseconds())/float64(entries))
	stats, err := Admin(t, "west").Topics().GetStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	if stats.MsgCounterIn != n {
		t.Errorf("west topic counted %d messages in, want %d", stats.MsgCounterIn, n)
	}
}

func wireReceive(t *testing.T, c pulsar.Consumer, n int) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []pulsar.Message
	for len(out) < n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("reference consumer after %d of %d: %v", len(out), n, err)
		}
		c.Ack(m)
		out = append(out, m)
	}
	return out
}

func msgLedger(id pulsar.MessageID) int64 { return id.LedgerID() }
func msgEntry(id pulsar.MessageID) int64  { return id.EntryID() }

// wireRelay forwards what cons receives to p until ctx ends. Sequence ids
// come from seqs, which assigns one per source entry the first time it is
// seen, so a redelivered entry gets its old id and the target's
// deduplication drops it.
type wireRelay struct {
	// identity, when set, is stored as the entries' producer name (with
	// their sequence ids), so the target's deduplication survives reloads.
	identity string
	mu       sync.Mutex
	seqs     map[wire.MessageID]uint64
	next     uint64
}

func (r *wireRelay) seq(id wire.MessageID) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	id = wire.EntryID(id.Ledger, id.Entry)
	s, ok := r.seqs[id]
	if !ok {
		r.next++
		s = r.next
		r.seqs[id] = s
	}
	return s
}

func (r *wireRelay) run(ctx context.Context, t *testing.T, cons *wire.Consumer, p *wire.Producer) {
	for {
		e, err := cons.Receive(ctx)
		if err != nil {
			return // closed or done
		}
		seq := r.seq(e.ID)
		t.Logf("relay %p: entry %v (%d messages, redelivery %d) seq %d", cons, e.ID, e.NumMessages, e.RedeliveryCount, seq)
		patch := wire.Patch{ReplicatedFrom: "east"}
		if r.identity != "" {
			patch.Identity = &wire.Identity{ProducerName: r.identity, SequenceID: seq}
		}
		patched, err := wire.PatchMetadata(nil, e.Metadata, patch)
		if err != nil {
			t.Errorf("patch: %v", err)
			return
		}
		err = p.Send(ctx, wire.Outgoing{Metadata: patched, Payload: e.Payload, NumMessages: e.NumMessages, SequenceID: seq},
			func(_ wire.Receipt, err error) {
				if err == nil {
					_ = cons.Ack(e.ID) // lost acks are redelivered, then dropped as duplicates
					_ = cons.Release(e)
				}
			})
		if err != nil && ctx.Err() == nil {
			t.Errorf("send: %v", err)
			return
		}
	}
}

// TestWireReconnectAndFailover: two consumers share the cursor on one
// connection (one active); topics are unloaded on both clusters under
// them (the brokers close consumer and producer, which look up again and
// resume), then the active consumer closes and the other takes over.
// Deduplication on the target makes the copy exact.
func TestWireReconnectAndFailover(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "failover")
	CreatePartitioned(t, topic, 0, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var amu sync.Mutex
	active := map[string]bool{}
	cons := map[string]*wire.Consumer{}
	for _, name := range []string{"a", "b"} {
		c, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{
			Topic: topic, Subscription: "geo-sidecar.repl.west", Name: name, InitialPosition: wire.Earliest, Permits: 50,
			OnActiveChange: func(a bool) { amu.Lock(); active[name] = a; amu.Unlock() },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cons[name] = c
	}
	activeOne := func() (string, error) {
		amu.Lock()
		defer amu.Unlock()
		var on []string
		for n, a := range active {
			if a {
				on = append(on, n)
			}
		}
		if len(on) != 1 {
			return "", fmt.Errorf("active consumers %v", active)
		}
		return on[0], nil
	}
	Eventually(t, 10*time.Second, func() error { _, err := activeOne(); return err })

	prod, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.east.failover", MaxPending: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	relay := &wireRelay{seqs: map[wire.MessageID]uint64{}, identity: "geo-sidecar.east.failover"}
	var wg sync.WaitGroup
	for _, c := range cons {
		wg.Add(1)
		go func() { defer wg.Done(); relay.run(ctx, t, c, prod) }()
	}
	defer wg.Wait()
	defer cancel()

	// Topic stats reset on unload: count on a subscription instead.
	check, err := west.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "check", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var got []string
	checked := map[string]bool{}
	westCount := func(n int) func() error {
		return func() error {
			for len(got) < n {
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				m, err := check.Receive(rctx)
				rcancel()
				if err != nil {
					return fmt.Errorf("west has %d messages, want %d", len(got), n)
				}
				check.Ack(m)
				// pulsar-client-go groups acks for 100 ms: an unload right
				// after a receive redelivers to this checker.
				if !checked[string(m.Payload())] {
					checked[string(m.Payload())] = true
					got = append(got, string(m.Payload()))
				}
			}
			return nil
		}
	}
	var want []string
	produce := func(prefix string) {
		want = append(want, ProduceN(t, east, topic, prefix, 100)...)
	}

	produce("one")
	Eventually(t, 30*time.Second, westCount(100))

	for _, c := range []string{"east", "west"} {
		if err := Admin(t, c).Topics().Unload(*mustTopicName(t, topic)); err != nil {
			t.Fatalf("unload on %s: %v", c, err)
		}
	}
	produce("two")
	Eventually(t, 60*time.Second, westCount(200))

	first, err := activeOne()
	if err != nil {
		t.Fatal(err)
	}
	cons[first].Close()
	amu.Lock()
	delete(active, first)
	amu.Unlock()
	Eventually(t, 10*time.Second, func() error { _, err := activeOne(); return err })
	produce("three")
	Eventually(t, 60*time.Second, westCount(300))

	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("west has %d messages, want %d in order:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	// Exactly once: a fresh subscription reads each message once.
	got = Payloads(Consume(t, west, topic, "final", len(want)+1, 5*time.Second))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("west has %d messages, want %d in order:\n got %v\nwant %v", len(got), len(want), got, want)
	}
}

// TestWireDedupStateAfterReload pins down a broker behaviour the data path
// must design around: after a topic reload the broker rebuilds its
// deduplication state from the producer_name and sequence_id stored in the
// entries' metadata, not from the producer's name and the SENDs' sequence
// ids. Entries forwarded with the origin's metadata therefore leave the
// sidecar's producer name unknown after a reload (last_sequence_id -1),
// unless the metadata carries the sidecar's identity (Patch.Identity).
func TestWireDedupStateAfterReload(t *testing.T) {
	for _, tc := range []struct {
		name     string
		identity bool
		want     int64
	}{
		{"origin identity", false, -1},
		{"sidecar identity", true, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := NewNamespace(t, "west")
			if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
				t.Fatal(err)
			}
			topic := Topic(ns, "reload")
			CreatePartitioned(t, topic, 0, "west")
			wwest := wireClient(t, "west")
			ctx := context.Background()
			const name = "geo-sidecar.east.reload"
			p, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			md := wire.MetadataBuilder{ProducerName: "origin-producer", SequenceID: 3, PublishTime: uint64(time.Now().UnixMilli())}.Append(nil)
			patch := wire.Patch{ReplicatedFrom: "east"}
			if tc.identity {
				patch.Identity = &wire.Identity{ProducerName: name, SequenceID: 7}
			}
			md, _ = wire.PatchMetadata(nil, md, patch)
			done := make(chan error, 1)
			if err := p.Send(ctx, wire.Outgoing{Metadata: md, Payload: []byte("x"), NumMessages: 1, SequenceID: 7},
				func(_ wire.Receipt, err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			p.Close()
			if err := Admin(t, "west").Topics().Unload(*mustTopicName(t, topic)); err != nil {
				t.Fatal(err)
			}
			Eventually(t, 30*time.Second, func() error {
				p, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: name})
				if err != nil {
					return err
				}
				defer p.Close()
				if got := p.LastSequenceID(); got != tc.want {
					return fmt.Errorf("last sequence id after reload %d, want %d", got, tc.want)
				}
				return nil
			})
		})
	}
}

// TestWireSecure runs the wire client against the secure cluster south:
// TLS with host name verification, token and client-certificate
// authentication through pulsar-client-go's auth providers, and the errors
// for a wrong host name, a bad token and a missing permission.
func TestWireSecure(t *testing.T) {
	UpSouth(t)
	ns := NewSecureNamespace(t, "east")
	Grant(t, ns, "wire-role", "produce", "consume")
	Grant(t, ns, "geo-sidecar-tls", "produce", "consume")
	topic := Topic(ns, "secure")
	if err := SouthAdmin(t).Topics().Create(*mustTopicName(t, topic), 0); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(SouthFile("tls/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in ca.pem")
	}
	client := func(t *testing.T, url string, a auth.Provider) *wire.Client {
		t.Helper()
		if err := a.Init(); err != nil {
			t.Fatal(err)
		}
		c, err := wire.NewClient(wire.ClientOptions{
			ServiceURL:       url,
			OperationTimeout: 10 * time.Second,
			Conn:             wire.ConnOptions{Auth: a, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx := context.Background()
	roundTrip := func(t *testing.T, c *wire.Client, name string) {
		t.Helper()
		cons, err := wire.Subscribe(ctx, c, wire.ConsumerOptions{Topic: topic, Subscription: "s-" + name, InitialPosition: wire.Earliest})
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		defer cons.Close()
		p, err := wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.wire." + name})
		if err != nil {
			t.Fatalf("create producer: %v", err)
		}
		defer p.Close()
		md := wire.MetadataBuilder{ProducerName: name, SequenceID: 1, PublishTime: uint64(time.Now().UnixMilli())}.Append(nil)
		done := make(chan error, 1)
		if err := p.Send(ctx, wire.Outgoing{Metadata: md, Payload: []byte(name), NumMessages: 1, SequenceID: 1},
			func(_ wire.Receipt, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("send: %v", err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for {
			e, err := cons.Receive(rctx)
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			cons.Ack(e.ID)
			if string(e.Payload) == name {
				return
			}
		}
	}

	t.Run("token", func(t *testing.T) {
		roundTrip(t, client(t, South.ServiceURL, auth.NewAuthenticationToken(MintToken(t, "wire-role", 0))), "token")
	})
	t.Run("client certificate", func(t *testing.T) {
		a := auth.NewAuthenticationTLS(SouthFile("tls/client-geo-sidecar-tls.pem"), SouthFile("tls/client-geo-sidecar-tls.key.pem"))
		roundTrip(t, client(t, South.ServiceURL, a), "tls")
	})
	t.Run("host name not in certificate", func(t *testing.T) {
		c := client(t, SouthMisnamed.ServiceURL, auth.NewAuthenticationToken(MintToken(t, "wire-role", 0)))
		_, err := c.Lookup(ctx, topic)
		if err == nil || wire.IsRetryable(err) {
			t.Fatalf("lookup through a misnamed host: %v (retryable %v), want a terminal certificate error", err, wire.IsRetryable(err))
		}
		t.Logf("misnamed host: %v", err)
	})
	t.Run("bad token", func(t *testing.T) {
		c := client(t, South.ServiceURL, auth.NewAuthenticationToken("not-a-token"))
		_, err := c.Lookup(ctx, topic)
		var be *wire.BrokerError
		if !errors.As(err, &be) || be.Code != wire.AuthenticationError || wire.IsRetryable(err) {
			t.Fatalf("bad token: %v, want a terminal AuthenticationError", err)
		}
	})
	t.Run("no permission", func(t *testing.T) {
		c := client(t, South.ServiceURL, auth.NewAuthenticationToken(MintToken(t, "nobody", 0)))
		_, err := wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.wire.nobody"})
		var be *wire.BrokerError
		if !errors.As(err, &be) || be.Code != wire.AuthorizationError || wire.IsRetryable(err) {
			t.Fatalf("no permission: %v, want a terminal AuthorizationError", err)
		}
	})
}

// TestWireSchema forwards entries written with a JSON schema: the schema is
// fetched from east by the entry's schema_version, registered on west, and
// the entry's schema_version rewritten to west's, so that a schema-aware
// consumer on west decodes the copies.
func TestWireSchema(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "schema")
	CreatePartitioned(t, topic, 0, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()

	type order struct {
		ID   int    `json:"id"`
		Item string `json:"item"`
	}
	const def = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}`
	cons, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{Topic: topic, Subscription: "geo-sidecar.repl.west", InitialPosition: wire.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	// Batched: pulsar-client-go v0.21 leaves schema_version out of
	// non-batched messages (genMetadata), only batches carry it.
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(def, nil)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: order{ID: i, Item: fmt.Sprint("item-", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()

	// West already knows another version of the record (with an optional
	// field more), so the copies' schema gets another version there.
	const defWest = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"},{"name":"note","type":["null","string"],"default":null}]}`
	pw, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(defWest, nil)})
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()

	prod, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.east.schema"})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	versions := map[string][]byte{} // east version -> west version
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range n {
		e, err := cons.Receive(rctx)
		if err != nil {
			t.Fatal(err)
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if md.SchemaVersion == nil {
			t.Fatalf("entry %d has no schema version: %+v %x", i, md, e.Metadata)
		}
		wv, ok := versions[string(md.SchemaVersion)]
		if !ok {
			s, v, err := weast.GetSchema(ctx, topic, md.SchemaVersion)
			if err != nil {
				t.Fatalf("schema %x on east: %v", md.SchemaVersion, err)
			}
			if string(v) != string(md.SchemaVersion) {
				t.Errorf("east answered version %x for %x", v, md.SchemaVersion)
			}
			if wv, err = wwest.GetOrCreateSchema(ctx, topic, s); err != nil {
				t.Fatalf("schema on west: %v", err)
			}
			t.Logf("schema %q type %d: east version %x, west version %x", s.Name, s.Type, md.SchemaVersion, wv)
			versions[string(md.SchemaVersion)] = wv
		}
		patched, err := wire.PatchMetadata(nil, e.Metadata, wire.Patch{ReplicatedFrom: "east", SchemaVersion: wv})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		if err := prod.Send(ctx, wire.Outgoing{Metadata: patched, Payload: e.Payload, NumMessages: e.NumMessages, SequenceID: uint64(i)},
			func(_ wire.Receipt, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		cons.Ack(e.ID)
	}

	wc, err := west.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "check", Schema: pulsar.NewJSONSchema(def, nil),
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("schema-aware consumer on west: %v", err)
	}
	defer wc.Close()
	for i := range n {
		m, err := wc.Receive(rctx)
		if err != nil {
			t.Fatal(err)
		}
		var o order
		if err := m.GetSchemaValue(&o); err != nil {
			t.Fatal(err)
		}
		if o.ID != i || o.Item != fmt.Sprint("item-", i) {
			t.Fatalf("message %d decoded as %+v", i, o)
		}
		for ev, wv := range versions {
			if string(m.SchemaVersion()) != string(wv) || ev == string(wv) {
				t.Fatalf("message %d: schema version %x; east's %x, west's %x", i, m.SchemaVersion(), ev, wv)
			}
		}
	}
}

// TestWirePartitioned copies every partition of a partitioned topic to the
// same partition on west, each over its own consumer and producer, all on
// one connection per cluster.
func TestWirePartitioned(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "parts")
	const parts = 4
	CreatePartitioned(t, topic, parts, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()
	n, err := weast.PartitionedMetadata(ctx, topic)
	if err != nil || n != parts {
		t.Fatalf("partitions %d, %v; want %d", n, err, parts)
	}
	counts := make([]int, parts)
	cons := make([]*wire.Consumer, parts)
	prods := make([]*wire.Producer, parts)
	for i := range parts {
		part := fmt.Sprintf("%s-partition-%d", topic, i)
		c, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{Topic: part, Subscription: "geo-sidecar.repl.west", Name: "wire", InitialPosition: wire.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: part, Name: fmt.Sprintf("geo-sidecar.east.%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		cons[i], prods[i] = c, p
	}
	// Unbatched so that the partition counts are message counts.
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const total = 200
	for i := range total {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m-", i)), Key: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		counts[id.PartitionIdx()]++
	}
	p.Close()
	for i := range parts {
		if counts[i] > 0 {
			wireForward(t, cons[i], prods[i], counts[i], 0)
		}
	}
	got := Consume(t, west, topic, "check", total, 30*time.Second)
	if len(got) != total {
		t.Fatalf("west has %d messages, want %d", len(got), total)
	}
	for _, m := range got {
		// Same key, same partition: the copy sits where the original did.
		var i int
		fmt.Sscanf(string(m.Payload()), "m-%d", &i)
		if m.Key() != fmt.Sprint("k", i) {
			t.Fatalf("message %q has key %q", m.Payload(), m.Key())
		}
	}
	// One connection per cluster: the broker sees one client address.
	st, err := Admin(t, "east").Topics().GetPartitionedStats(*mustTopicName(t, topic), true)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]bool{}
	for _, ps := range st.Partitions {
		for _, c := range ps.Subscriptions["geo-sidecar.repl.west"].Consumers {
			addrs[c.Address] = true
		}
	}
	if len(addrs) != 1 {
		t.Errorf("consumers of %d partitions came from %d connections %v, want 1", parts, len(addrs), addrs)
	}
}

// TestWireAuthRefresh: south checks credentials every 5 s and challenges a
// connection whose token expired; the wire connection answers with the
// provider's current token and stays open (no reconnect, same connection,
// the producer keeps sending).
func TestWireAuthRefresh(t *testing.T) {
	UpSouth(t)
	ns := NewSecureNamespace(t, "east")
	Grant(t, ns, "wire-refresh", "produce", "consume")
	topic := Topic(ns, "refresh")
	if err := SouthAdmin(t).Topics().Create(*mustTopicName(t, topic), 0); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(SouthFile("tls/ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var mu sync.Mutex
	minted := 0
	// Every call mints a token that expires 3 s later.
	a := auth.NewAuthenticationTokenFromSupplier(func() (string, error) {
		mu.Lock()
		minted++
		mu.Unlock()
		return MintToken(t, "wire-refresh", 3*time.Second), nil
	})
	c, err := wire.NewClient(wire.ClientOptions{
		ServiceURL: South.ServiceURL,
		Conn:       wire.ConnOptions{Auth: a, TLS: &tls.Config{RootCAs: pool}},
		Logger:     zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	p, err := wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.wire.refresh"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, err := c.Lookup(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.Conn(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	send := func(seq uint64) {
		t.Helper()
		md := wire.MetadataBuilder{ProducerName: "x", SequenceID: seq, PublishTime: uint64(time.Now().UnixMilli())}.Append(nil)
		done := make(chan error, 1)
		if err := p.Send(ctx, wire.Outgoing{Metadata: md, Payload: []byte("x"), NumMessages: 1, SequenceID: seq},
			func(_ wire.Receipt, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("send %d: %v", seq, err)
		}
	}
	deadline := time.Now().Add(16 * time.Second)
	for seq := uint64(1); time.Now().Before(deadline); seq++ {
		send(seq)
		time.Sleep(500 * time.Millisecond)
	}
	select {
	case <-conn.Done():
		t.Fatalf("connection closed: %v", conn.Err())
	default:
	}
	if again, err := c.Conn(ctx, b); err != nil || again != conn {
		t.Fatalf("a new connection was dialled (%v)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// One token per connection at CONNECT (service URL and broker may be
	// one connection or two), then one per challenge.
	if minted < 3 {
		t.Fatalf("%d tokens minted over 16 s of 3 s tokens: the broker's challenges were not answered", minted)
	}
	t.Logf("%d tokens minted", minted)
}

// TestWireChunked forwards the chunks of chunked messages one entry each;
// pulsar-client-go on west puts them back together.
func TestWireChunked(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "chunks")
	CreatePartitioned(t, topic, 0, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()
	cons, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{Topic: topic, Subscription: "geo-sidecar.repl.west", InitialPosition: wire.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true, ChunkMaxMessageSize: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for i := range 2 {
		payload := bytes.Repeat([]byte{byte('a' + i)}, 250<<10)
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload, Key: fmt.Sprint("big-", i)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, payload)
	}
	p.Close()
	prod, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar.east.chunks"})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	entries, _ := wireForward(t, cons, prod, 6, 0) // 3 chunks per message
	if entries != 6 {
		t.Fatalf("%d entries, want 6 chunks", entries)
	}
	got := Consume(t, west, topic, "check", 2, 30*time.Second)
	if len(got) != 2 {
		t.Fatalf("west has %d messages, want 2", len(got))
	}
	for i, m := range got {
		if !bytes.Equal(m.Payload(), want[i]) || m.Key() != fmt.Sprint("big-", i) {
			t.Fatalf("message %d: %d bytes, key %q", i, len(m.Payload()), m.Key())
		}
	}
}

// TestWireRedeliver: entries received and not acknowledged come again
// after RedeliverUnacknowledged (what the pipeline does when the target
// failed), and acknowledged ones do not.
func TestWireRedeliver(t *testing.T) {
	ns := NewNamespace(t, "east")
	topic := Topic(ns, "redeliver")
	CreatePartitioned(t, topic, 0, "east")
	weast := wireClient(t, "east")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: wire.Earliest, Permits: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := Client(t, "east").CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	var first []wire.Entry
	for range 10 {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, e)
	}
	for _, e := range first[:4] {
		if err := cons.Ack(e.ID); err != nil {
			t.Fatal(err)
		}
		cons.Release(e)
	}
	if err := cons.RedeliverUnacknowledged(); err != nil {
		t.Fatal(err)
	}
	for _, want := range first[4:] {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.ID != want.ID || string(e.Payload) != string(want.Payload) {
			t.Fatalf("redelivered %v %q, want %v %q", e.ID, e.Payload, want.ID, want.Payload)
		}
	}
	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if e, err := cons.Receive(short); err == nil {
		t.Fatalf("entry %v came a second time", e.ID)
	}
}

// TestWireIdleScale subscribes to every partition of a 100-partition topic
// on east and creates a producer on every partition on west: one
// connection per cluster, no goroutine per partition, and nothing to do
// while idle.
func TestWireIdleScale(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "idle")
	const parts = 100
	CreatePartitioned(t, topic, parts, "east", "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	ctx := context.Background()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	start := time.Now()
	for i := range parts {
		part := fmt.Sprintf("%s-partition-%d", topic, i)
		c, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{Topic: part, Subscription: "geo-sidecar.repl.west", Name: "wire"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := wire.CreateProducer(ctx, wwest, wire.ProducerOptions{Topic: part, Name: fmt.Sprint("geo-sidecar.east.", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
	}
	setup := time.Since(start)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	time.Sleep(5 * time.Second)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	t.Logf("%d partitions: set up in %s; goroutines %d -> %d; heap %+d KiB; CPU over 5 s idle: %s",
		parts, setup.Round(time.Millisecond), g0, g1, (int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/1024, cpu)
	if g1-g0 > 10 {
		t.Errorf("%d goroutines more for %d idle consumers and producers", g1-g0, 2*parts)
	}
}
