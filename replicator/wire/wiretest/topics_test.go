package wiretest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire/wiretest"
)

const topic = "persistent://t/ns/x-partition-0"

func client(t *testing.T, b *wiretest.Broker) *wire.Client {
	t.Helper()
	c, err := wire.NewClient(wire.ClientOptions{ServiceURL: b.URL(), OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func metadata(seq uint64) []byte {
	return wire.MetadataBuilder{ProducerName: "p", SequenceID: seq, PublishTime: 1, NumMessagesInBatch: 1}.Append(nil)
}

// send sends seqs and returns the receipts' message ids, in order.
func send(t *testing.T, p *wire.Producer, seqs ...uint64) []wire.MessageID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids := make([]wire.MessageID, len(seqs))
	for i, seq := range seqs {
		err := p.Send(ctx, wire.Outgoing{Metadata: metadata(seq), Payload: []byte(fmt.Sprint("m", seq)), NumMessages: 1, SequenceID: seq},
			func(r wire.Receipt, err error) {
				if err != nil {
					t.Errorf("seq %d: %v", seq, err)
				}
				ids[i] = r.MessageID
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// receive reads n entries and returns their payloads.
func receive(t *testing.T, c *wire.Consumer, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []string
	for range n {
		e, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		out = append(out, string(e.Payload))
		_ = c.Release(e)
	}
	return out
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestKeepEntriesDeduplicates: a SEND at or below the producer name's
// record is answered as a duplicate and not stored; the record is what a
// producer of that name is told at creation.
func TestKeepEntriesDeduplicates(t *testing.T) {
	b := wiretest.New(t)
	b.KeepEntries()
	c := client(t, b)
	ctx := context.Background()
	p, err := wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: topic, Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.LastSequenceID(); got != -1 {
		t.Fatalf("a new name's record %d, want -1", got)
	}
	ids := send(t, p, 1, 2, 3, 3, 4)
	if int64(ids[3].Ledger) >= 0 || ids[2].Entry != 2 || ids[4].Entry != 3 {
		t.Fatalf("receipts %v: want the second 3 a duplicate (-1:-1), entries 0..3 for the rest", ids)
	}
	if n := len(b.Entries(topic)); n != 4 {
		t.Fatalf("%d entries stored, want 4", n)
	}
	p.Close()
	p, err = wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: topic, Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.LastSequenceID(); got != 4 {
		t.Fatalf("record %d, want 4", got)
	}
}

// TestKeepEntriesCursors: a durable cursor delivers from its first
// unacknowledged entry, again after a reconnect or a new consumer; a
// reader starts at its start id, inclusive with a batch index.
func TestKeepEntriesCursors(t *testing.T) {
	b := wiretest.New(t)
	b.KeepEntries()
	var ids []wire.MessageID
	for i := range 5 {
		ids = append(ids, b.Append(topic, metadata(uint64(i)), []byte(fmt.Sprint("m", i)), 1))
	}
	c := client(t, b)
	ctx := context.Background()

	cons, err := wire.Subscribe(ctx, c, wire.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: wire.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, cons, 5); !equal(got, []string{"m0", "m1", "m2", "m3", "m4"}) {
		t.Fatalf("durable cursor read %v", got)
	}
	for _, i := range []int{0, 1, 3} {
		if err := cons.Ack(ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	md := func() int {
		deadline := time.Now().Add(5 * time.Second)
		for b.MarkDelete(topic, "s") != 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return b.MarkDelete(topic, "s")
	}
	if got := md(); got != 2 {
		t.Fatalf("mark-delete %d, want 2 (entry 2 unacknowledged)", got)
	}
	// The acknowledgement of entry 3 may still be on its way when the
	// mark-delete shows 2; a request answered on the same connection comes
	// after it, so the unload below finds it served.
	if _, _, err := cons.LastMessageID(ctx); err != nil {
		t.Fatal(err)
	}
	b.Unload(topic)
	if got := receive(t, cons, 2); !equal(got, []string{"m2", "m4"}) {
		t.Fatalf("after the unload the cursor read %v, want the unacknowledged m2 m4", got)
	}
	cons.Close()

	for _, tt := range []struct {
		name  string
		start wire.MessageID
		want  []string
	}{
		{"inclusive", wire.MessageID{Ledger: ids[3].Ledger, Entry: 3, Partition: -1, BatchIndex: 0}, []string{"m3", "m4"}},
		{"exclusive", wire.MessageID{Ledger: ids[3].Ledger, Entry: 3, Partition: -1, BatchIndex: -1}, []string{"m4"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := wire.Subscribe(ctx, c, wire.ConsumerOptions{Topic: topic, Subscription: "r-" + tt.name, NonDurable: true, StartMessageID: &tt.start})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := receive(t, r, len(tt.want)); !equal(got, tt.want) {
				t.Fatalf("reader read %v, want %v", got, tt.want)
			}
		})
	}
	e, ok, err := c.LastEntry(ctx, topic)
	if err != nil || !ok || string(e.Payload) != "m4" {
		t.Fatalf("last entry %q %v %v, want m4", e.Payload, ok, err)
	}
	var be *wire.BrokerError
	if _, _, err := c.LastEntry(ctx, topic+"-missing"); !errors.As(err, &be) || be.Code != wire.TopicNotFound {
		t.Fatalf("last entry of a missing topic: %v, want TopicNotFound", err)
	}
}
