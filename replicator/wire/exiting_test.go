package wire

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// TestExitingClosesWithoutReplies: a broker that never answers a close.
// A consumer's Close waits for the reply (up to OperationTimeout) until
// the client is told it exits; then it returns at once, as does every
// close after, each having written its command; the producer's entry in
// flight fails (never confirmed), and nothing is acknowledged.
func TestExitingClosesWithoutReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		b.set(func() {
			b.handle = func(_ *fakeConn, cmd Command, _ Frame) bool {
				switch cmd.Body.(type) {
				case *CloseConsumer, *CloseProducer, *Send:
					return true // never answered
				}
				return false
			}
		})
		c, err := NewClient(ClientOptions{ServiceURL: b.url(), Conn: ConnOptions{dial: b.dial, KeepAlive: time.Hour}, OperationTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "p"})
		if err != nil {
			t.Fatal(err)
		}
		sent := make(chan error, 1)
		if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), NumMessages: 1, SequenceID: 1},
			func(_ Receipt, err error) { sent <- err }); err != nil {
			t.Fatal(err)
		}

		closed := make(chan error, 1)
		go func() { closed <- cons.Close() }()
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("the consumer's close returned (%v) without the broker's reply before Exiting", err)
		default:
		}
		start := time.Now()
		c.Exiting()
		if err := <-closed; err != nil {
			t.Errorf("consumer close after Exiting: %v, want nil (the connection's close ends it)", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("producer close after Exiting: %v", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the closes waited %s after Exiting, want none", waited)
		}
		if err := <-sent; !errors.Is(err, ErrClosed) {
			t.Errorf("entry in flight: %v, want ErrClosed (not confirmed)", err)
		}
		synctest.Wait()
		if n, m := len(b.commands(TypeCloseConsumer)), len(b.commands(TypeCloseProducer)); n != 1 || m != 1 {
			t.Errorf("closes written: %d of the consumer, %d of the producer; want 1 each", n, m)
		}
		if n := len(b.commands(TypeAck)); n != 0 {
			t.Errorf("%d acknowledgements, want none", n)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCloseDoesNotWaitForADial: a client closed while a connection is
// being dialled returns at once; the dial's connection, when it comes, is
// closed and its caller told the client is closed.
func TestCloseDoesNotWaitForADial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		release := make(chan struct{})
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			<-release
			return b.dial(ctx, addr)
		}
		c, err := NewClient(ClientOptions{ServiceURL: b.url(), Conn: ConnOptions{dial: dial, KeepAlive: time.Hour}, OperationTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		opened := make(chan error, 1)
		go func() {
			_, err := Subscribe(context.Background(), c, ConsumerOptions{Topic: "t", Subscription: "s"})
			opened <- err
		}()
		synctest.Wait() // dialling
		done := make(chan struct{})
		go func() {
			_ = c.Close()
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Close waits for a dial in progress")
		}
		close(release)
		if err := <-opened; err == nil {
			t.Fatal("subscribed on a closed client")
		}
	})
}
