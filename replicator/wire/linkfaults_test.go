package wire

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// eventLog records Events for a test.
type eventLog struct {
	mu         sync.Mutex
	lost       []bool // silent per lost connection
	reconnects []string
}

func (l *eventLog) events() Events {
	return Events{
		ConnLost: func(silent bool) { l.mu.Lock(); l.lost = append(l.lost, silent); l.mu.Unlock() },
		Reconnect: func(kind, cause string) {
			l.mu.Lock()
			l.reconnects = append(l.reconnects, kind+"/"+cause)
			l.mu.Unlock()
		},
	}
}

func (l *eventLog) snapshot() (lost []bool, reconnects []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bool(nil), l.lost...), append([]string(nil), l.reconnects...)
}

// TestKeepAlive: a broker that stops answering (a half-open link: nothing
// arrives, nothing closes) is closed with ErrSilent and reported as such;
// an idle broker that answers pings keeps its connection for several
// keep-alive times.
func TestKeepAlive(t *testing.T) {
	tests := []struct {
		name      string
		silent    bool
		keepAlive time.Duration
	}{
		{"half-open closed", true, 40 * time.Millisecond},
		{"half-open closed, longer keep-alive", true, 200 * time.Millisecond},
		// Pings every half keep-alive: one lost to scheduling on a busy
		// machine still leaves the other in time.
		{"idle but answering kept", false, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeMemBroker(t)
				b.set(func() { b.silent = tt.silent })
				var ev eventLog
				c := newTestClient(t, b.url(), ConnOptions{KeepAlive: tt.keepAlive, Events: ev.events(), dial: b.dial})
				conn, err := c.Conn(context.Background(), c.serviceBroker())
				if err != nil {
					t.Fatal(err)
				}
				if tt.silent {
					select {
					case <-conn.Done():
					case <-time.After(5 * time.Second):
						t.Fatal("a broker that stopped answering was not detected")
					}
					if err := conn.Err(); !errors.Is(err, ErrSilent) {
						t.Fatalf("closed with %v, want ErrSilent", err)
					}
					waitFor(t, "the ConnLost event", func() bool { lost, _ := ev.snapshot(); return len(lost) > 0 })
					if lost, _ := ev.snapshot(); len(lost) != 1 || !lost[0] {
						t.Fatalf("ConnLost events %v, want one silent", lost)
					}
					return
				}
				select {
				case <-conn.Done():
					t.Fatalf("an answering broker's connection closed: %v", conn.Err())
				case <-time.After(5 * tt.keepAlive / 2):
				}
				if n := len(b.commands(TypePing)); n < 3 {
					t.Fatalf("%d PINGs in 2.5 keep-alive times, want one every half", n)
				}
				if lost, _ := ev.snapshot(); len(lost) != 0 {
					t.Fatalf("ConnLost events %v", lost)
				}
			})
		})
	}
}

// TestReconnectBackoffWhenBrokerKeepsClosing: a broker that closes every
// fresh producer (or consumer) at once gets re-creations at a growing
// interval, not ten a second; each is reported with its cause; once the
// broker lets it be, the producer works (no reconnect lost on the way);
// and a session that proved itself (a receipt, an entry) resets the
// backoff.
func TestReconnectBackoffWhenBrokerKeepsClosing(t *testing.T) {
	const closes = 4
	for _, kind := range []string{"producer", "consumer"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeMemBroker(t)
				var mu sync.Mutex
				created := 0
				var closeFirst func()
				var firstAt, lastAt time.Time
				b.set(func() {
					b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
						mu.Lock()
						defer mu.Unlock()
						// The first session is closed by the test once
						// created (its creator sees it succeed); the next
						// ones right behind their success.
						switch c := cmd.Body.(type) {
						case *ProducerCommand:
							created++
							fc.send(&ProducerSuccess{RequestID: c.RequestID, ProducerName: c.ProducerName, LastSequenceID: -1})
							if created == 1 {
								closeFirst = func() { fc.send(&CloseProducer{ProducerID: c.ProducerID}) }
							} else if created <= closes {
								fc.send(&CloseProducer{ProducerID: c.ProducerID})
							}
						case *SubscribeCommand:
							created++
							fc.send(&Success{RequestID: c.RequestID})
							if created == 1 {
								closeFirst = func() { fc.send(&CloseConsumer{ConsumerID: c.ConsumerID}) }
							} else if created <= closes {
								fc.send(&CloseConsumer{ConsumerID: c.ConsumerID})
							}
						default:
							return false
						}
						if created == 1 {
							firstAt = time.Now()
						}
						lastAt = time.Now()
						return true
					}
				})
				var ev eventLog
				c := newTestClient(t, b.url(), ConnOptions{Events: ev.events(), dial: b.dial})
				ctx := context.Background()
				var churn func() int
				var ready func(t *testing.T)
				if kind == "producer" {
					p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "n"})
					if err != nil {
						t.Fatal(err)
					}
					defer p.Close()
					churn = func() int { p.mu.Lock(); defer p.mu.Unlock(); return p.rc.churn }
					ready = func(t *testing.T) {
						done := make(chan error, 1)
						if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: 1},
							func(_ Receipt, err error) { done <- err }); err != nil {
							t.Fatal(err)
						}
						select {
						case err := <-done:
							if err != nil {
								t.Fatal(err)
							}
						case <-time.After(10 * time.Second):
							t.Fatal("no receipt after the broker stopped closing the producer")
						}
					}
				} else {
					cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Name: "me"})
					if err != nil {
						t.Fatal(err)
					}
					defer cons.Close()
					churn = func() int { cons.mu.Lock(); defer cons.mu.Unlock(); return cons.rc.churn }
					ready = func(t *testing.T) {
						waitFor(t, "a consumer session that stays", func() bool {
							cons.mu.Lock()
							defer cons.mu.Unlock()
							return cons.session != nil && !cons.rc.retrying
						})
					}
				}
				mu.Lock()
				closeFirst()
				mu.Unlock()
				deadline := time.Now().Add(15 * time.Second)
				for {
					mu.Lock()
					n := created
					mu.Unlock()
					if n > closes {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d %ss created, want %d", n, kind, closes+1)
					}
					time.Sleep(10 * time.Millisecond)
				}
				ready(t)
				mu.Lock()
				spread := lastAt.Sub(firstAt)
				mu.Unlock()
				// Without backoff the re-creations come 50-100 ms apart; with
				// it the waits are at least 50+100+200+400 ms. Only a slow
				// machine lengthens them, so the bound cannot flake.
				if min := 750 * time.Millisecond; spread < min {
					t.Errorf("%d re-creations within %s, want backoff (at least %s)", closes, spread, min)
				}
				if got := churn(); got != closes {
					t.Errorf("churn %d after %d fresh sessions closed, want %d", got, closes, closes)
				}
				_, rec := ev.snapshot()
				if len(rec) != closes {
					t.Fatalf("Reconnect events %v, want %d", rec, closes)
				}
				for _, r := range rec {
					if r != kind+"/"+CauseBrokerClosed {
						t.Fatalf("Reconnect event %q, want %s/%s", r, kind, CauseBrokerClosed)
					}
				}
			})
		})
	}
}

// TestChurnResetBySessionThatWorked: a producer session that got a
// receipt, closed by the broker afterwards, reconnects at once.
func TestChurnResetBySessionThatWorked(t *testing.T) {
	b := newFakeBroker(t)
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if s, ok := cmd.Body.(*Send); ok {
				fc.send(&SendReceipt{ProducerID: s.ProducerID, SequenceID: s.SequenceID, MessageID: EntryID(1, s.SequenceID)})
				fc.send(&CloseProducer{ProducerID: s.ProducerID})
				return true
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for seq := uint64(1); seq <= 3; seq++ {
		if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: seq}, nil); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.Flush(fctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the producer's reconnect", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.session != nil
		})
		p.mu.Lock()
		churn := p.rc.churn
		p.mu.Unlock()
		if churn != 0 {
			t.Fatalf("churn %d after sessions that confirmed sends", churn)
		}
	}
}

// TestConnectFailed: a connection that cannot be set up (nothing listens,
// or the peer resets it in the handshake) counts as a connect failure; a
// caller that gave up does not, nor does a connection that worked.
func TestConnectFailed(t *testing.T) {
	closed := func(t *testing.T) string { // a port nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	resetting := func(t *testing.T) string { // accepts, then resets
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		return l.Addr().String()
	}
	for _, tt := range []struct {
		name   string
		addr   func(t *testing.T) string
		cancel bool
		want   int
	}{
		{"refused", closed, false, 1},
		{"reset in the handshake", resetting, false, 1},
		{"caller gave up", closed, true, 0},
		{"connected", func(t *testing.T) string { return strings.TrimPrefix(newFakeBroker(t).url(), "pulsar://") }, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			ctx, cancel := context.WithCancel(context.Background())
			if tt.cancel {
				cancel()
			}
			defer cancel()
			addr := tt.addr(t)
			c, err := Dial(ctx, addr, addr, false, ConnOptions{Events: Events{ConnectFailed: func() { n.Add(1) }}})
			if err == nil {
				c.Close()
			}
			if got := int(n.Load()); got != tt.want {
				t.Errorf("ConnectFailed called %d times, want %d (Dial: %v)", got, tt.want, err)
			}
		})
	}
}
