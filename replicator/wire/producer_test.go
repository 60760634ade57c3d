package wire

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// sendLog records the done callbacks of a producer's sends, in order.
type sendLog struct {
	mu   sync.Mutex
	seqs []uint64
	errs []error
}

func (l *sendLog) done(seq uint64) func(Receipt, error) {
	return func(r Receipt, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.seqs = append(l.seqs, seq)
		l.errs = append(l.errs, err)
	}
}

func (l *sendLog) snapshot() ([]uint64, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint64(nil), l.seqs...), append([]error(nil), l.errs...)
}

// memProducer creates a producer through the in-memory broker b and
// returns it with the broker's side of its session.
func memProducer(t *testing.T, b *fakeBroker, c *Client, o ProducerOptions) (*Producer, *fakeConn, uint64) {
	t.Helper()
	p, err := CreateProducer(context.Background(), c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cmds := b.commands(TypeProducer)
	b.mu.Lock()
	fc := b.conns[len(b.conns)-1]
	b.mu.Unlock()
	return p, fc, cmds[len(cmds)-1].(*ProducerCommand).ProducerID
}

// refuseProducers makes b answer PRODUCER with ServiceNotReady while
// refusing returns true.
func refuseProducers(b *fakeBroker, refusing func() bool) {
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if x, ok := cmd.Body.(*ProducerCommand); ok && refusing() {
				fc.send(&Error{RequestID: x.RequestID, Error: ServiceNotReady, Message: "later"})
				return true
			}
			return false
		}
	})
}

// TestProducerTooLargeWhileReconnecting: an entry larger than the
// broker's limit is refused at Send (ErrTooLarge) also while the producer
// reconnects, against the limit of its last connection. Queued instead,
// it stopped the resend after the reconnect at itself: nothing behind it
// was sent again, and a send timeout re-created the producer to stop at
// it again, for ever.
func TestProducerTooLargeWhileReconnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		c := newTestClient(t, b.url(), ConnOptions{dial: b.dial})
		p, fc, id := memProducer(t, b, c, ProducerOptions{Topic: "t", Name: "n"})
		var refusing atomic.Bool
		refusing.Store(true)
		refuseProducers(b, refusing.Load)
		fc.send(&CloseProducer{ProducerID: id})
		synctest.Wait()
		var log sendLog
		ctx := context.Background()
		err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: make([]byte, 1<<17), SequenceID: 1}, log.done(1))
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("Send of an entry beyond the limit while reconnecting: %v, want ErrTooLarge", err)
		}
		if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: 2}, log.done(2)); err != nil {
			t.Fatal(err)
		}
		refusing.Store(false)
		fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := p.Flush(fctx); err != nil {
			t.Fatal(err)
		}
		if seqs, errs := log.snapshot(); len(seqs) != 1 || seqs[0] != 2 || errs[0] != nil {
			t.Fatalf("callbacks for %v with %v, want only sequence id 2's, confirmed", seqs, errs)
		}
	})
}

// TestProducerLimitLoweredAcrossReconnect: entries sent under one
// connection's limit and too large for the next one's (a broker with a
// lower max_message_size) fail with ErrTooLarge in their turn, and the
// ones behind them are sent again and confirmed: the resend does not
// stop at them.
func TestProducerLimitLoweredAcrossReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		var confirm atomic.Bool // only the second connection confirms
		b.set(func() {
			b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
				x, ok := cmd.Body.(*Send)
				if !ok {
					return false
				}
				if confirm.Load() {
					fc.send(&SendReceipt{ProducerID: x.ProducerID, SequenceID: x.SequenceID, MessageID: EntryID(1, x.SequenceID)})
				}
				return true
			}
		})
		c := newTestClient(t, b.url(), ConnOptions{dial: b.dial})
		p, fc, _ := memProducer(t, b, c, ProducerOptions{Topic: "t", Name: "n"})
		var log sendLog
		ctx := context.Background()
		sizes := []int{1, 20000, 1, 20000, 20000, 1}
		for i, size := range sizes {
			seq := uint64(i + 1)
			if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: make([]byte, size), SequenceID: seq}, log.done(seq)); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		b.set(func() { b.maxMessageSize = 4096 })
		confirm.Store(true)
		fc.nc.Close() // the connection lost: the next one has the lower limit
		fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := p.Flush(fctx); err != nil {
			t.Fatal(err)
		}
		seqs, errs := log.snapshot()
		if len(seqs) != len(sizes) {
			t.Fatalf("callbacks for %v, want all of 1 to %d", seqs, len(sizes))
		}
		for i, seq := range seqs {
			tooLarge := sizes[i] > 4096
			if seq != uint64(i+1) || tooLarge != errors.Is(errs[i], ErrTooLarge) || !tooLarge && errs[i] != nil {
				t.Errorf("callback %d: sequence id %d, %v; want %d, too large %v", i, seq, errs[i], i+1, tooLarge)
			}
		}
	})
}
