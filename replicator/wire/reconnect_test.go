package wire

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// reconnectee is a consumer or a producer on the in-memory broker, seen
// the same way by the reconnect tests.
type reconnectee struct {
	kind string
	// create makes the consumer or producer with logger log (nil: the
	// client's).
	create func(t *testing.T, c *Client, log *zap.Logger)
	// createType is the command that creates it on the broker.
	createType CommandType
	// closeCmd is the broker's command closing the session with id.
	closeCmd func(id uint64) Body
	// idOf is the consumer or producer id in its create command.
	idOf func(Body) uint64
	// churn and connected read its state.
	churn     func() int
	connected func() bool
	// proven makes the current session prove itself (an entry received,
	// a receipt); fc and id are the broker's side of it.
	proven func(t *testing.T, fc *fakeConn, id uint64)
}

func reconnectees() []*reconnectee {
	cons := &reconnectee{
		kind:       "consumer",
		createType: TypeSubscribe,
		closeCmd:   func(id uint64) Body { return &CloseConsumer{ConsumerID: id} },
		idOf:       func(b Body) uint64 { return b.(*SubscribeCommand).ConsumerID },
	}
	var consumer *Consumer
	cons.create = func(t *testing.T, c *Client, log *zap.Logger) {
		x, err := Subscribe(context.Background(), c, ConsumerOptions{Topic: "t", Subscription: "s", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		consumer = x
	}
	cons.churn = func() int { consumer.mu.Lock(); defer consumer.mu.Unlock(); return consumer.rc.churn }
	cons.connected = func() bool {
		consumer.mu.Lock()
		defer consumer.mu.Unlock()
		return consumer.session != nil && consumer.session.ready
	}
	cons.proven = func(t *testing.T, fc *fakeConn, id uint64) {
		fc.sendPayload(&Message{ConsumerID: id, MessageID: EntryID(1, 1)}, testMetadata(1), []byte("x"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := consumer.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}

	prod := &reconnectee{
		kind:       "producer",
		createType: TypeProducer,
		closeCmd:   func(id uint64) Body { return &CloseProducer{ProducerID: id} },
		idOf:       func(b Body) uint64 { return b.(*ProducerCommand).ProducerID },
	}
	var producer *Producer
	prod.create = func(t *testing.T, c *Client, log *zap.Logger) {
		x, err := CreateProducer(context.Background(), c, ProducerOptions{Topic: "t", Name: "n", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		producer = x
	}
	prod.churn = func() int { producer.mu.Lock(); defer producer.mu.Unlock(); return producer.rc.churn }
	prod.connected = func() bool {
		producer.mu.Lock()
		defer producer.mu.Unlock()
		return producer.session != nil
	}
	prod.proven = func(t *testing.T, _ *fakeConn, _ uint64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := producer.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if err := producer.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return []*reconnectee{cons, prod}
}

// latest returns the broker's side of the latest session of r: its
// connection and id.
func (r *reconnectee) latest(b *fakeBroker) (*fakeConn, uint64) {
	cmds := b.commands(r.createType)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns[len(b.conns)-1], r.idOf(cmds[len(cmds)-1])
}

// TestReconnectChurn: a session that ends having proven itself (an entry
// received, a receipt) or having lasted stableAfter counts as an isolated
// loss (churn 0: the next reconnect waits least); one that ends younger,
// unproven, counts one more of a broker that keeps closing it.
func TestReconnectChurn(t *testing.T) {
	for _, r := range reconnectees() {
		for _, tt := range []struct {
			name   string
			proven bool
			lived  time.Duration
			want   int
		}{
			{"young", false, 0, 1},
			{"young but proven", true, 0, 0},
			{"just short of stable", false, stableAfter - time.Millisecond, 1},
			{"stable", false, stableAfter, 0},
		} {
			t.Run(r.kind+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newFakeMemBroker(t)
					c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: time.Hour})
					r.create(t, c, nil)
					fc, id := r.latest(b)
					if tt.proven {
						r.proven(t, fc, id)
					}
					time.Sleep(tt.lived)
					fc.send(r.closeCmd(id))
					// No time passes until every goroutine waits: the close
					// is handled at exactly tt.lived.
					synctest.Wait()
					if got := r.churn(); got != tt.want {
						t.Errorf("churn %d after a session of %s (proven %v), want %d", got, tt.lived, tt.proven, tt.want)
					}
					waitFor(t, "the reconnect", r.connected)
				})
			})
		}
	}
}

// TestReconnectAttemptsBackOff: attempts the broker refuses (for now)
// come at a growing interval, not at the first one's.
func TestReconnectAttemptsBackOff(t *testing.T) {
	const refusals = 4
	for _, r := range reconnectees() {
		t.Run(r.kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeMemBroker(t)
				c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: time.Hour})
				r.create(t, c, nil)
				fc, id := r.latest(b)
				var mu sync.Mutex
				var at []time.Time
				b.set(func() {
					b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
						var reqID uint64
						switch x := cmd.Body.(type) {
						case *SubscribeCommand:
							reqID = x.RequestID
						case *ProducerCommand:
							reqID = x.RequestID
						default:
							return false
						}
						mu.Lock()
						defer mu.Unlock()
						at = append(at, time.Now())
						if len(at) > refusals {
							return false // the default answer: success
						}
						fc.send(&Error{RequestID: reqID, Error: ServiceNotReady, Message: "later"})
						return true
					}
				})
				fc.send(r.closeCmd(id))
				time.Sleep(time.Minute) // more than the backoffs' sum
				if !r.connected() {
					t.Fatal("not reconnected")
				}
				mu.Lock()
				defer mu.Unlock()
				if len(at) != refusals+1 {
					t.Fatalf("%d attempts, want %d", len(at), refusals+1)
				}
				// The waits after the first attempt are at least
				// 200+400+800+1600 ms (backoff of attempts 2 to 5, each at
				// least half its cap); at the first one's they would be
				// at most 4 x 200 ms.
				if spread, min := at[refusals].Sub(at[0]), 3*time.Second; spread < min {
					t.Errorf("%d refused attempts within %s, want them to back off (at least %s)", refusals, spread, min)
				}
			})
		})
	}
}

// TestReconnectGoesOnForASessionLostBehindItsSuccess: a session that the
// broker closes after the reconnect loop's connect succeeded but before
// the loop ended (so handleClose started no loop of its own: one runs)
// is reconnected by that loop. The loop's log of its success is the one
// moment between the two, so a logger hook stages the close there.
func TestReconnectGoesOnForASessionLostBehindItsSuccess(t *testing.T) {
	for _, r := range reconnectees() {
		t.Run(r.kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeMemBroker(t)
				var once sync.Once
				hook := func(e zapcore.Entry) error {
					if e.Message == r.kind+" reconnected" {
						once.Do(func() {
							fc, id := r.latest(b)
							fc.send(r.closeCmd(id))
							synctest.Wait() // the close handled, the loop still running
						})
					}
					return nil
				}
				log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel), zap.Hooks(hook))
				c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: time.Hour})
				r.create(t, c, log)
				fc, id := r.latest(b)
				fc.send(r.closeCmd(id))
				waitFor(t, "the session lost behind its success", func() bool { return len(b.commands(r.createType)) >= 2 })
				time.Sleep(time.Minute)
				if n := len(b.commands(r.createType)); n != 3 || !r.connected() {
					t.Fatalf("%d %ss created, connected %v; want 3, connected", n, r.kind, r.connected())
				}
			})
		})
	}
}

// TestClientClosedWhileReconnecting: a client closed while a consumer or
// producer of it waits for a lookup on its way back ends that consumer or
// producer with ErrClosed (Receive, Flush and the pending sends say so),
// rather than leaving it to wait for ever.
func TestClientClosedWhileReconnecting(t *testing.T) {
	for _, kind := range []string{"consumer", "producer"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeMemBroker(t)
				c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: time.Hour})
				var cons *Consumer
				var prod *Producer
				var failed error
				var fc *fakeConn
				var id uint64
				if kind == "consumer" {
					cons, fc, id = memSubscribe(t, b, c, ConsumerOptions{Topic: "t", Subscription: "s"})
				} else {
					prod, fc, id = memProducer(t, b, c, ProducerOptions{Topic: "t", Name: "n"})
				}
				b.set(func() {
					b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
						switch cmd.Body.(type) {
						case *Lookup, *Send:
							return true // never answered
						}
						return false
					}
				})
				if prod != nil {
					if err := prod.Send(context.Background(), Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: 1},
						func(_ Receipt, err error) { failed = err }); err != nil {
						t.Fatal(err)
					}
					fc.send(&CloseProducer{ProducerID: id})
				} else {
					fc.send(&CloseConsumer{ConsumerID: id})
				}
				waitFor(t, "the lookup on the way back", func() bool { return len(b.commands(TypeLookup)) == 2 })
				synctest.Wait()
				c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var err error
				if cons != nil {
					_, err = cons.Receive(ctx)
				} else {
					err = prod.Flush(ctx)
				}
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("after the client closed: %v, want ErrClosed", err)
				}
				if prod != nil && !errors.Is(failed, ErrClosed) {
					t.Fatalf("the pending send failed with %v, want ErrClosed", failed)
				}
			})
		})
	}
}
