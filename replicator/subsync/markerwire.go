package subsync

// Markers written over the sidecar's own binary-protocol client
// (replicator/wire), as the entry pipe sends its copies: a
// pulsar-client-go producer per partition and direction cost two
// goroutines, their stacks and its buffers each, a third of the process's
// goroutines at 1,000 topics kept in step both ways (e2e/bench, subs
// row); a wire producer costs none (its connection's goroutines are the
// client's, shared by every producer on the broker).

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// NewWireMarkerWriter is MarkerSink over a wire client of the local
// cluster (client is asked for it at the first write): one producer named
// name on topic, opened at the first write and again after one failed.
// Each marker is one entry: a single message whose only property is
// marker.Property, the kind's number, so that the entry pipe and the
// broker's entry filter see it in the entry's metadata.
func NewWireMarkerWriter(client func() (*wire.Client, error), topic, name string, keys marker.Keys) MarkerSink {
	return &wireMarkerWriter{client: client, topic: topic, name: name, keys: keys}
}

type wireMarkerWriter struct {
	client func() (*wire.Client, error)
	topic  string
	name   string
	keys   marker.Keys

	mu  sync.Mutex
	p   *wire.Producer
	seq uint64 // the next sequence id
	// failed is set by a receipt's error (on the connection's goroutine,
	// which must not wait for mu): the next write opens a new producer.
	failed *atomic.Bool
}

// markerPending bounds a marker producer's unconfirmed markers: a
// partition writes a few a second at most.
const markerPending = 64

func (w *wireMarkerWriter) Write(ctx context.Context, mk marker.Marker) error {
	payload, err := w.keys.Encode(mk)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.p != nil && w.failed.Load() {
		w.p.Close() // unconfirmed markers fail with it: their snapshots time out
		w.p = nil
	}
	if w.p == nil {
		c, err := w.client()
		if err != nil {
			w.mu.Unlock()
			return fmt.Errorf("open marker producer: %w", err)
		}
		p, err := wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: w.topic, Name: w.name, MaxPending: markerPending})
		if err != nil {
			w.mu.Unlock()
			return fmt.Errorf("open marker producer: %w", err)
		}
		w.p, w.seq, w.failed = p, uint64(p.LastSequenceID()+1), &atomic.Bool{}
	}
	defer w.mu.Unlock()
	// Under mu, so that sequence ids are sent in order whoever writes
	// (the sync's loop, and the entry pipe completing a snapshot). Send
	// waits while markerPending are unconfirmed; the receipts that free
	// them take no lock here.
	seq, failed := w.seq, w.failed
	md := wire.MetadataBuilder{ProducerName: w.name, SequenceID: seq, PublishTime: uint64(time.Now().UnixMilli()),
		UncompressedSize: uint32(len(payload)),
		Properties:       []wire.KeyValue{{Key: marker.Property, Value: strconv.Itoa(int(mk.Kind))}}}.Append(nil)
	err = w.p.Send(ctx, wire.Outgoing{Metadata: md, Payload: payload, NumMessages: 1, SequenceID: seq},
		func(_ wire.Receipt, err error) {
			if err != nil {
				failed.Store(true)
			}
		})
	switch {
	case err == nil:
		w.seq++
	case ctx.Err() == nil: // closed, or failed for good: the next write opens another
		w.p.Close()
		w.p = nil
	}
	return err
}

func (w *wireMarkerWriter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.p.Flush(ctx)
		cancel()
		w.p.Close()
		w.p = nil
	}
}
