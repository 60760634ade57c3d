package verify

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire/wiretest"
)

// TestContinuousOverWire: the continuous verifier through its real
// readers (WireReader over the sidecar's wire client: end probes,
// readers started at an entry, the stream's end rules), against fake
// brokers that keep entries, finds an entry missing from the copy; and
// on neither cluster does it ever subscribe but as a non-durable reader
// named under the cursor prefix: no replication cursor is touched or
// acknowledged, whatever it reads.
func TestContinuousOverWire(t *testing.T) {
	east, west := wiretest.New(t), wiretest.New(t)
	var mu sync.Mutex
	var subs []string
	for _, b := range []*wiretest.Broker{east, west} {
		b.KeepEntries()
		b.Handle(func(_ *wiretest.Conn, cmd wire.Command, _ wire.Frame) bool {
			if s, ok := cmd.Body.(*wire.SubscribeCommand); ok {
				mu.Lock()
				subs = append(subs, fmt.Sprintf("%s durable=%v", s.Subscription, !s.NonDurable))
				mu.Unlock()
			}
			return false
		})
	}
	client := func(b *wiretest.Broker) *wire.Client {
		c, err := wire.NewClient(wire.ClientOptions{ServiceURL: b.URL(), OperationTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// East's partition, and west's copy of it but entry 12.
	for i := range 30 {
		md := wire.MetadataBuilder{ProducerName: "app", SequenceID: uint64(i), PublishTime: uint64(time.Now().UnixMilli())}.Append(nil)
		payload := []byte(fmt.Sprint("payload ", i))
		id := east.Append(part, md, payload, 1)
		if i != 12 {
			c := forward(t, wire.Entry{ID: id, Metadata: md, Payload: payload, NumMessages: 1}, testKeys, part, nil)
			west.Append(part, c.Metadata, c.Payload, 1)
		}
	}
	m := metrics.New(nil)
	v := NewContinuous(ContinuousConfig{Source: "east", Target: "west",
		From: WireReader(client(east), "geo-sidecar.repl"), To: WireReader(client(west), "geo-sidecar.repl"),
		Keys: testKeys, Interval: 100 * time.Millisecond, Metrics: m,
		Partitions: func() []Assigned { return []Assigned{{Partition: part}} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = v.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	found := func(k Kind) float64 { return metricstest.Counter(m.Verify.Found, "east", "west", string(k)) }
	deadline := time.Now().Add(20 * time.Second)
	for found(Missing) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing found missing in 20 s (read %v)", metricstest.Counter(m.Verify.Read, "east", "west"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // five more rounds
	for _, k := range foundKinds {
		want := 0.0
		if k == Missing {
			want = 1
		}
		if got := found(k); got != want {
			t.Errorf("%s: %v, want %v", k, got, want)
		}
	}
	// The walk started at west's first copy (AnchorBack reaches it): 29
	// entries of west, 29 of east after the one it copies, once each.
	if n := metricstest.Counter(m.Verify.Read, "east", "west"); n != 58 {
		t.Errorf("read %v messages, want 58", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range subs {
		if !strings.HasPrefix(s, "geo-sidecar.repl.verify-") || !strings.HasSuffix(s, "durable=false") {
			t.Errorf("subscribed as %s: only non-durable readers under the cursor prefix", s)
		}
	}
	if len(subs) == 0 {
		t.Error("no subscription seen")
	}
}
