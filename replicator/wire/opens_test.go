package wire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestOpensBounded: with MaxOpens 4, twenty subscribes and producer
// creations at once reach the broker four at a time, each within its own
// OperationTimeout counted from its turn (not from its call), and all
// succeed; a caller that gives up while waiting takes no turn.
func TestOpensBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		type held struct {
			fc    *fakeConn
			reply Body
		}
		var mu sync.Mutex
		var waiting []held
		b.set(func() {
			b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
				mu.Lock()
				defer mu.Unlock()
				switch x := cmd.Body.(type) {
				case *ProducerCommand:
					waiting = append(waiting, held{fc, &ProducerSuccess{RequestID: x.RequestID, ProducerName: x.ProducerName, LastSequenceID: -1}})
					return true
				case *SubscribeCommand:
					waiting = append(waiting, held{fc, &Success{RequestID: x.RequestID}})
					return true
				}
				return false
			}
		})
		const opTimeout = 5 * time.Second
		c, err := NewClient(ClientOptions{ServiceURL: b.url(), Conn: ConnOptions{dial: b.dial, KeepAlive: time.Hour}, OperationTimeout: opTimeout, MaxOpens: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })

		const n = 20
		errs := make(chan error, n)
		for i := range n {
			go func() {
				topic := fmt.Sprintf("t%d", i)
				if i%2 == 0 {
					p, err := CreateProducer(context.Background(), c, ProducerOptions{Topic: topic, Name: "p"})
					if err == nil {
						defer p.Close()
					}
					errs <- err
					return
				}
				cons, err := Subscribe(context.Background(), c, ConsumerOptions{Topic: topic, Subscription: "s"})
				if err == nil {
					defer cons.Close()
				}
				errs <- err
			}()
		}
		// Four in flight, sixteen in line; then one more caller, who
		// gives up while it waits for its turn.
		synctest.Wait()
		gaveUp := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := CreateProducer(ctx, c, ProducerOptions{Topic: "impatient", Name: "p"})
			gaveUp <- err
		}()

		answered := 0
		for answered < n {
			synctest.Wait()
			mu.Lock()
			batch := waiting
			waiting = nil
			mu.Unlock()
			if len(batch) == 0 {
				t.Fatalf("nothing reached the broker after %d answers", answered)
			}
			if len(batch) > 4 {
				t.Fatalf("%d opens in flight at once, want at most 4", len(batch))
			}
			// Each turn has its full timeout: answering after most of it
			// (the twentieth caller has waited far longer than 5 s by
			// then) still succeeds.
			time.Sleep(opTimeout - time.Second)
			for _, h := range batch {
				h.fc.send(h.reply)
				answered++
			}
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("open failed: %v", err)
			}
		}
		if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the impatient caller got %v, want its deadline", err)
		}
		for _, cmd := range b.commands(TypeProducer) {
			if cmd.(*ProducerCommand).Topic == "impatient" {
				t.Error("a caller that gave up while waiting still asked the broker")
			}
		}
	})
}
