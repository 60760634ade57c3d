package replicator

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// flushCounter is a pulsar.Producer that counts sends and flushes; the
// embedded nil interface panics on anything else the test did not expect.
type flushCounter struct {
	pulsar.Producer
	sends, flushes atomic.Int32
}

func (p *flushCounter) SendAsync(context.Context, *pulsar.ProducerMessage, func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	p.sends.Add(1)
}

func (p *flushCounter) FlushWithCtx(context.Context) error {
	p.flushes.Add(1)
	return nil
}

// chanConsumer is a pulsar.Consumer whose messages come from a channel.
type chanConsumer struct {
	pulsar.Consumer
	ch chan pulsar.ConsumerMessage
}

func (c *chanConsumer) Chan() <-chan pulsar.ConsumerMessage { return c.ch }

func (c *chanConsumer) Receive(ctx context.Context) (pulsar.Message, error) {
	select {
	case cm := <-c.ch:
		return cm.Message, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestFlushWhenDry: the open batch is flushed one batch delay after the
// cursor ran dry, once, and never when nothing was sent since the last
// flush (an idle partition costs no timer at all).
func TestFlushWhenDry(t *testing.T) {
	tests := []struct {
		name        string
		sends       int // before the cursor runs dry
		dryReceives int // Receive calls that find nothing ready
		wantFlushes int32
	}{
		{"idle partition: no flush", 0, 3, 0},
		{"one send, dry once", 1, 1, 1},
		{"many sends, dry many times: one flush", 5, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				fc := &flushCounter{}
				rp := &remoteProducer{Producer: fc, delay: batchDelay}
				var dst atomic.Pointer[remoteProducer]
				dst.Store(rp)
				src := &flushWhenDry{Consumer: &chanConsumer{ch: make(chan pulsar.ConsumerMessage)}, dst: &dst}
				for range tt.sends {
					rp.SendAsync(ctx, &pulsar.ProducerMessage{}, nil)
				}
				for range tt.dryReceives {
					rctx, rcancel := context.WithTimeout(ctx, time.Millisecond)
					_, _ = src.Receive(rctx)
					rcancel()
				}
				time.Sleep(2 * batchDelay)
				synctest.Wait()
				if got := fc.flushes.Load(); got != tt.wantFlushes {
					t.Errorf("flushes = %d, want %d", got, tt.wantFlushes)
				}
				if got := fc.sends.Load(); got != int32(tt.sends) {
					t.Errorf("sends = %d, want %d", got, tt.sends)
				}
			})
		})
	}
}

// TestFlushWhenDryReady: a message already waiting is returned without
// arming a flush, so batches fill while the cursor has messages ready.
func TestFlushWhenDryReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fc := &flushCounter{}
		rp := &remoteProducer{Producer: fc, delay: batchDelay}
		var dst atomic.Pointer[remoteProducer]
		dst.Store(rp)
		ch := make(chan pulsar.ConsumerMessage, 1)
		src := &flushWhenDry{Consumer: &chanConsumer{ch: ch}, dst: &dst}
		rp.SendAsync(ctx, &pulsar.ProducerMessage{}, nil)
		ch <- pulsar.ConsumerMessage{}
		if _, err := src.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * batchDelay)
		synctest.Wait()
		if got := fc.flushes.Load(); got != 0 {
			t.Errorf("flushes = %d, want 0 while messages are ready", got)
		}
	})
}
