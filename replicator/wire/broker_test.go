package wire

// Tests of the connection, lookup, producer and consumer against the fake
// broker (fakebroker_test.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apache/pulsar-client-go/pulsar/auth"
)

func TestHandshakeAuthAndAuthChallenge(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{Auth: auth.NewAuthenticationToken("tok-1")})
	conn, err := c.Conn(context.Background(), c.serviceBroker())
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	fc := b.conns[0]
	b.mu.Unlock()
	if fc.connect().AuthMethodName != "token" || string(fc.connect().AuthData) != "tok-1" ||
		!fc.connect().SupportsAuthRefresh || fc.connect().ProxyToBrokerURL != "" || fc.connect().ProtocolVersion != ProtocolVersion {
		t.Fatalf("CONNECT %+v", fc.connect())
	}
	if conn.MaxMessageSize() != 1<<16 || conn.ServerVersion() != "fake" {
		t.Fatalf("max message size %d, server %q", conn.MaxMessageSize(), conn.ServerVersion())
	}
	fc.send(&AuthChallenge{Challenge: AuthData{MethodName: "token", Data: []byte("refresh")}})
	waitFor(t, "AUTH_RESPONSE", func() bool { return len(b.commands(TypeAuthResponse)) == 1 })
	r := b.commands(TypeAuthResponse)[0].(*AuthResponse)
	if r.Response.MethodName != "token" || string(r.Response.Data) != "tok-1" {
		t.Fatalf("AUTH_RESPONSE %+v", r)
	}
	// The broker's PING is answered.
	fc.send(&Ping{})
	waitFor(t, "PONG", func() bool { return len(b.commands(TypePong)) == 1 })
}

func TestHandshakeRejected(t *testing.T) {
	b := newFakeBroker(t)
	b.set(func() {
		b.handle = nil
	})
	// Answer CONNECT with ERROR: replace the default by a raw listener.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		ReadFrame(nc, nil, 1<<20)
		nc.Write(AppendFrame(nil, AppendCommand(nil, &Error{Error: AuthenticationError, Message: "bad token"})))
		time.Sleep(100 * time.Millisecond)
	}()
	_, err := Dial(context.Background(), ln.Addr().String(), ln.Addr().String(), false, ConnOptions{})
	var be *BrokerError
	if !errors.As(err, &be) || be.Code != AuthenticationError || be.Retryable() {
		t.Fatalf("err %v, want a terminal AuthenticationError", err)
	}
}

func TestKeepAliveClosesSilentConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		b.set(func() { b.silent = true })
		c := newTestClient(t, b.url(), ConnOptions{KeepAlive: 30 * time.Millisecond, dial: b.dial})
		conn, err := c.Conn(context.Background(), c.serviceBroker())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-conn.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("a broker that stopped answering was not detected")
		}
		if len(b.commands(TypePing)) == 0 {
			t.Fatal("no PING sent")
		}
		// The pool dials again.
		b.set(func() { b.silent = false })
		conn2, err := c.Conn(context.Background(), c.serviceBroker())
		if err != nil || conn2 == conn {
			t.Fatalf("redial: %v (same conn %v)", err, conn2 == conn)
		}
	})
}

func TestLookupRedirectAndProxy(t *testing.T) {
	proxy := newFakeBroker(t) // the service URL
	owner := newFakeBroker(t) // the broker that owns the topic
	proxy.set(func() {
		proxy.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			l, ok := cmd.Body.(*Lookup)
			if !ok {
				return false
			}
			if fc.connect().ProxyToBrokerURL == "" {
				// Asked at the service URL: redirect to the owner.
				fc.send(&LookupResponse{RequestID: l.RequestID, Kind: LookupRedirect, BrokerServiceURL: owner.url(), Authoritative: true})
			} else {
				fc.send(&LookupResponse{RequestID: l.RequestID, Kind: LookupConnect, BrokerServiceURL: owner.url(), ProxyThroughServiceURL: true})
			}
			return true
		}
	})
	owner.set(func() {
		owner.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			l, ok := cmd.Body.(*Lookup)
			if !ok {
				return false
			}
			if !l.Authoritative {
				t.Errorf("redirected lookup not authoritative")
			}
			fc.send(&LookupResponse{RequestID: l.RequestID, Kind: LookupConnect, BrokerServiceURL: owner.url(), ProxyThroughServiceURL: true})
			return true
		}
	})
	c := newTestClient(t, proxy.url(), ConnOptions{})
	ctx := context.Background()
	got, err := c.Lookup(ctx, "persistent://a/b/t")
	if err != nil {
		t.Fatal(err)
	}
	want := Broker{Logical: owner.addr, Physical: proxy.addr}
	if got != want {
		t.Fatalf("lookup %+v, want %+v", got, want)
	}
	// Cached: no second LOOKUP.
	n := len(proxy.commands(TypeLookup)) + len(owner.commands(TypeLookup))
	if _, err := c.Lookup(ctx, "persistent://a/b/t"); err != nil || len(proxy.commands(TypeLookup))+len(owner.commands(TypeLookup)) != n {
		t.Fatalf("lookup not cached: %v", err)
	}
	// Connecting goes to the proxy and names the broker.
	if _, err := c.Conn(ctx, got); err != nil {
		t.Fatal(err)
	}
	var named bool
	proxy.mu.Lock()
	for _, fc := range proxy.conns {
		if fc.connect() != nil && fc.connect().ProxyToBrokerURL == owner.addr {
			named = true
		}
	}
	proxy.mu.Unlock()
	if !named {
		t.Fatal("no CONNECT with proxy_to_broker_url through the proxy")
	}
	if n, err := c.PartitionedMetadata(ctx, "persistent://a/b/t"); err != nil || n != 3 {
		t.Fatalf("partitioned metadata %d, %v", n, err)
	}
}

func TestLookupFailed(t *testing.T) {
	b := newFakeBroker(t)
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if l, ok := cmd.Body.(*Lookup); ok {
				fc.send(&LookupResponse{RequestID: l.RequestID, Kind: LookupFailed, Error: AuthorizationError, Message: "no"})
				return true
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	_, err := c.Lookup(context.Background(), "t")
	var be *BrokerError
	if !errors.As(err, &be) || be.Code != AuthorizationError || IsRetryable(err) {
		t.Fatalf("err %v", err)
	}
}

func TestProducerResendsInOrderAfterBrokerClose(t *testing.T) {
	b := newFakeBroker(t)
	var (
		mu       sync.Mutex
		sessions int
	)
	b.set(func() {
		b.lastSeq = 41
		b.handle = func(fc *fakeConn, cmd Command, f Frame) bool {
			switch c := cmd.Body.(type) {
			case *ProducerCommand:
				mu.Lock()
				sessions++
				mu.Unlock()
				return false
			case *Send:
				mu.Lock()
				first := sessions == 1
				mu.Unlock()
				if first {
					// First session: confirm 1, then close the producer
					// when 3 arrives, leaving 2 and 3 unconfirmed.
					switch c.SequenceID {
					case 1:
						return false
					case 3:
						fc.send(&CloseProducer{ProducerID: c.ProducerID})
					}
					return true
				}
				if string(f.Payload) != "payload" || c.NumMessages != 5 {
					t.Errorf("resent SEND %+v payload %q", c, f.Payload)
				}
				return false
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "geo-sidecar.x"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.LastSequenceID() != 41 {
		t.Fatalf("last sequence id %d", p.LastSequenceID())
	}
	b.set(func() { b.lastSeq = 1 })
	var (
		rmu  sync.Mutex
		seqs []uint64
	)
	for seq := uint64(1); seq <= 5; seq++ {
		err := p.Send(ctx, Outgoing{Metadata: testMetadata(5), Payload: []byte("payload"), NumMessages: 5, SequenceID: seq},
			func(r Receipt, err error) {
				if err != nil {
					t.Errorf("seq %d: %v", seq, err)
				}
				rmu.Lock()
				seqs = append(seqs, r.SequenceID)
				rmu.Unlock()
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	rmu.Lock()
	defer rmu.Unlock()
	if want := []uint64{1, 2, 3, 4, 5}; !equalU64(seqs, want) {
		t.Fatalf("receipts %v, want %v", seqs, want)
	}
	if p.LastSequenceID() != 1 {
		t.Fatalf("last sequence id after reconnect %d", p.LastSequenceID())
	}
	if n := len(b.commands(TypeProducer)); n != 2 {
		t.Fatalf("%d PRODUCER commands, want 2", n)
	}
	for _, pc := range b.commands(TypeProducer) {
		if pc.(*ProducerCommand).ProducerName != "geo-sidecar.x" {
			t.Fatalf("producer name %q", pc.(*ProducerCommand).ProducerName)
		}
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestProducerSendErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     ServerError
		wantErrs int // entries failed
	}{
		{"checksum fails that entry only", ChecksumError, 1},
		{"terminated topic fails everything", TopicTerminatedError, 3},
		{"metadata refused (encryption required) fails everything", MetadataError, 3},
		{"retryable error resends", PersistenceError, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			var once sync.Once
			b.set(func() {
				b.handle = func(fc *fakeConn, cmd Command, f Frame) bool {
					s, ok := cmd.Body.(*Send)
					if !ok || s.SequenceID != 1 {
						return false
					}
					hit := false
					once.Do(func() { hit = true })
					if hit {
						fc.send(&SendError{ProducerID: s.ProducerID, SequenceID: 1, Error: tc.code, Message: "x"})
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
			var mu sync.Mutex
			var failed, ok int
			for seq := uint64(1); seq <= 3; seq++ {
				err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: seq}, func(_ Receipt, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						var be *BrokerError
						if !errors.As(err, &be) || be.Code != tc.code {
							t.Errorf("err %v", err)
						}
						failed++
					} else {
						ok++
					}
				})
				if err != nil { // the producer already failed for good
					var be *BrokerError
					if !errors.As(err, &be) || be.Code != tc.code {
						t.Errorf("send: %v", err)
					}
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			p.Flush(fctx)
			mu.Lock()
			defer mu.Unlock()
			if failed != tc.wantErrs || failed+ok != 3 {
				t.Fatalf("failed %d ok %d, want %d failed", failed, ok, tc.wantErrs)
			}
		})
	}
}

func TestProducerRejectsOversizedEntry(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	p, err := CreateProducer(context.Background(), c, ProducerOptions{Topic: "t", Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Send(context.Background(), Outgoing{Metadata: testMetadata(1), Payload: make([]byte, 1<<17), SequenceID: 1}, nil)
	if err == nil {
		t.Fatal("an entry beyond the broker's max message size was accepted")
	}
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestConsumerPermitsAckActiveAndResubscribe(t *testing.T) {
	b := newFakeBroker(t)
	var subFC *fakeConn
	var subID uint64
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if s, ok := cmd.Body.(*SubscribeCommand); ok {
				if s.SubType != Failover || s.Subscription != "cursor" || s.InitialPosition != Earliest || s.ConsumerName != "me" {
					t.Errorf("SUBSCRIBE %+v", s)
				}
				fc.send(&Success{RequestID: s.RequestID})
				fc.send(&ActiveConsumerChange{ConsumerID: s.ConsumerID, IsActive: true})
				b.mu.Lock()
				subFC, subID = fc, s.ConsumerID
				b.mu.Unlock()
				return true
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	var amu sync.Mutex
	var active []bool
	cons, err := Subscribe(ctx, c, ConsumerOptions{
		Topic: "t", Subscription: "cursor", Name: "me", InitialPosition: Earliest, Permits: 10,
		OnActiveChange: func(a bool) { amu.Lock(); active = append(active, a); amu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	waitFor(t, "FLOW", func() bool { return len(b.commands(TypeFlow)) == 1 })
	if f := b.commands(TypeFlow)[0].(*Flow); f.Permits != 10 {
		t.Fatalf("first FLOW %+v", f)
	}
	b.mu.Lock()
	fc, id := subFC, subID
	b.mu.Unlock()
	md := testMetadata(3)
	for e := uint64(1); e <= 2; e++ {
		fc.sendPayload(&Message{ConsumerID: id, MessageID: MessageID{Ledger: 7, Entry: e, Partition: -1, BatchIndex: -1}}, md, []byte{byte(e)})
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var got []Entry
	for range 2 {
		e, err := cons.Receive(rctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if got[0].ID.Entry != 1 || got[1].ID.Entry != 2 || got[0].NumMessages != 3 ||
		!bytes.Equal(got[0].Metadata, md) || !bytes.Equal(got[1].Payload, []byte{2}) {
		t.Fatalf("entries %+v", got)
	}
	// 3 messages released: below half the window, no FLOW yet; 6: FLOW 6.
	cons.Release(got[0])
	if err := cons.Ack(got[0].ID); err != nil {
		t.Fatal(err)
	}
	cons.Release(got[1])
	waitFor(t, "second FLOW", func() bool { return len(b.commands(TypeFlow)) == 2 })
	if f := b.commands(TypeFlow)[1].(*Flow); f.Permits != 6 {
		t.Fatalf("second FLOW %+v", f)
	}
	waitFor(t, "ACK", func() bool { return len(b.commands(TypeAck)) == 1 })
	if a := b.commands(TypeAck)[0].(*Ack); a.AckType != AckIndividual || len(a.MessageIDs) != 1 || a.MessageIDs[0] != EntryID(7, 1) {
		t.Fatalf("ACK %+v", a)
	}

	// The broker closes the consumer (topic unloaded): inactive, then a
	// new subscription with a full window; older entries are not released.
	fc.send(&CloseConsumer{ConsumerID: id})
	waitFor(t, "resubscribe", func() bool { return len(b.commands(TypeSubscribe)) == 2 })
	waitFor(t, "FLOW after resubscribe", func() bool { return len(b.commands(TypeFlow)) == 3 })
	if f := b.commands(TypeFlow)[2].(*Flow); f.Permits != 10 {
		t.Fatalf("FLOW after resubscribe %+v", f)
	}
	cons.Release(got[0])
	cons.Release(got[1])
	time.Sleep(20 * time.Millisecond)
	if n := len(b.commands(TypeFlow)); n != 3 {
		t.Fatalf("stale release granted permits (%d FLOWs)", n)
	}
	waitFor(t, "active events", func() bool { amu.Lock(); defer amu.Unlock(); return len(active) == 3 })
	amu.Lock()
	if active[0] != true || active[1] != false || active[2] != true {
		t.Fatalf("active events %v", active)
	}
	amu.Unlock()
}

func TestConsumerMalformedFrameReconnects(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	b.mu.Lock()
	fc := b.conns[0]
	b.mu.Unlock()
	frame := AppendPayloadFrame(nil, AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(1, 1)}), testMetadata(1), []byte("x"))
	frame[len(frame)-1] ^= 0xff // checksum no longer matches
	fc.sendRaw(frame)
	waitFor(t, "resubscribe on a new connection", func() bool { return len(b.commands(TypeSubscribe)) == 2 })
	b.mu.Lock()
	n := len(b.conns)
	b.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestOneConnectionPerBroker(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s"})
				if err != nil {
					t.Error(err)
					return
				}
				defer cons.Close()
			} else {
				p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "p"})
				if err != nil {
					t.Error(err)
					return
				}
				defer p.Close()
			}
		}()
	}
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.conns) != 1 {
		t.Fatalf("%d connections for one broker", len(b.conns))
	}
}

// TestIdleCostsNoGoroutines: consumers and producers add no goroutine and
// no timer; a connection has three goroutines (reader, writer, keep-alive).
func TestIdleCostsNoGoroutines(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	if _, err := c.Conn(ctx, c.serviceBroker()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	before := runtime.NumGoroutine()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	const n = 500
	var closers []func() error
	for i := range n {
		cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: fmt.Sprint("t", i), Subscription: "s"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := CreateProducer(ctx, c, ProducerOptions{Topic: fmt.Sprint("t", i), Name: "p"})
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, cons.Close, p.Close)
	}
	time.Sleep(10 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("heap per idle consumer+producer pair: %d bytes", (int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n)
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Fatalf("%d goroutines for %d idle consumers and producers (had %d)", after, 2*n, before)
	}
	b.mu.Lock()
	conns := len(b.conns)
	b.mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d connections", conns)
	}
	for _, cl := range closers {
		if err := cl(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsumerDropsEntriesFromBeforeRedeliver: after
// RedeliverUnacknowledged, a MESSAGE tagged with an older consumer epoch
// is dropped (its permits granted back), a current one delivered.
func TestConsumerDropsEntriesFromBeforeRedeliver(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.RedeliverUnacknowledged(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "REDELIVER", func() bool { return len(b.commands(TypeRedeliverUnacknowledged)) == 1 })
	r := b.commands(TypeRedeliverUnacknowledged)[0].(*RedeliverUnacknowledged)
	if r.ConsumerEpoch != 1 {
		t.Fatalf("REDELIVER %+v", r)
	}
	b.mu.Lock()
	fc := b.conns[0]
	b.mu.Unlock()
	sub := b.commands(TypeSubscribe)[0].(*SubscribeCommand)
	fc.sendPayload(&Message{ConsumerID: sub.ConsumerID, MessageID: EntryID(1, 1), HasConsumerEpoch: true, ConsumerEpoch: 0}, testMetadata(4), []byte("stale"))
	fc.sendPayload(&Message{ConsumerID: sub.ConsumerID, MessageID: EntryID(1, 1), HasConsumerEpoch: true, ConsumerEpoch: 1}, testMetadata(4), []byte("fresh"))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := cons.Receive(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Payload) != "fresh" {
		t.Fatalf("received %q", e.Payload)
	}
	waitFor(t, "permits of the stale entry", func() bool {
		fl := b.commands(TypeFlow)
		return len(fl) == 2 && fl[1].(*Flow).Permits == 4
	})
}

func TestParseServiceURL(t *testing.T) {
	for _, tc := range []struct {
		in    string
		hosts []string
		tls   bool
		bad   bool
	}{
		{in: "pulsar://a:6650", hosts: []string{"a:6650"}},
		{in: "pulsar://a", hosts: []string{"a:6650"}},
		{in: "pulsar+ssl://a,b:7000", hosts: []string{"a:6651", "b:7000"}, tls: true},
		{in: "pulsar://[::1]:6650/", hosts: []string{"[::1]:6650"}},
		{in: "pulsar://[::1]", hosts: []string{"[::1]:6650"}},
		{in: "http://a:80", bad: true},
		{in: "a:6650", bad: true},
		{in: "pulsar://a,,b", bad: true},
	} {
		hosts, tls, err := parseServiceURL(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (fmt.Sprint(hosts) != fmt.Sprint(tc.hosts) || tls != tc.tls)) {
			t.Errorf("%q: %v %v %v", tc.in, hosts, tls, err)
		}
	}
}

func TestServiceURLFailsOverToNextHost(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	b := newFakeBroker(t)
	c := newTestClient(t, "pulsar://"+deadAddr+","+b.addr, ConnOptions{})
	n, err := c.PartitionedMetadata(context.Background(), "t")
	if err != nil || n != 3 {
		t.Fatalf("partitioned metadata through the second host: %d, %v", n, err)
	}
	if _, err := c.Lookup(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
}

// TestProducerSendTimeout: a broker that takes SENDs and never confirms
// them gets them again on a new producer after SendTimeout, checked at the
// connection's keep-alive ticks.
func TestProducerSendTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		b.set(func() {
			b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
				s, ok := cmd.Body.(*Send)
				return ok && s.ProducerID == 1 // the first producer is never confirmed
			}
		})
		var mu sync.Mutex
		var causes []string
		c := newTestClient(t, b.url(), ConnOptions{KeepAlive: 200 * time.Millisecond, dial: b.dial, Events: Events{
			Reconnect: func(kind, cause string) { mu.Lock(); causes = append(causes, kind+"/"+cause); mu.Unlock() },
		}})
		ctx := context.Background()
		p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "n", SendTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		done := make(chan error, 1)
		if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: []byte("x"), SequenceID: 1}, func(_ Receipt, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no receipt after the send timeout")
		}
		if n := len(b.commands(TypeProducer)); n < 2 {
			t.Fatalf("%d PRODUCER commands, want a re-created producer", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"producer/" + CauseSendTimeout}; !slices.Equal(causes, want) {
			t.Errorf("Reconnect events %v, want %v (the alert on a slow link counts this cause)", causes, want)
		}
	})
}

// Large payloads go out by reference (a segment of a vectored write, or of
// writes in turn over TLS) and small ones copied, interleaved with
// commands: the broker sees every frame whole, checksummed and in order.
func TestProducerLargeAndSmallPayloadsInOrder(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		b := newFakeBroker(t)
		testLargeAndSmallPayloads(t, b, newTestClient(t, b.url(), ConnOptions{}))
	})
	t.Run("tls", func(t *testing.T) {
		b, cfg := newFakeTLSBroker(t)
		testLargeAndSmallPayloads(t, b, newTestClient(t, b.url(), ConnOptions{TLS: cfg}))
	})
}

func testLargeAndSmallPayloads(t *testing.T, b *fakeBroker, c *Client) {
	var mu sync.Mutex
	var payloads [][]byte
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, f Frame) bool {
			s, ok := cmd.Body.(*Send)
			if !ok {
				return false
			}
			if !f.Checksummed {
				t.Errorf("SEND %d not checksummed", s.SequenceID)
			}
			mu.Lock()
			payloads = append(payloads, bytes.Clone(f.Payload))
			mu.Unlock()
			fc.send(&SendReceipt{ProducerID: s.ProducerID, SequenceID: s.SequenceID, MessageID: EntryID(1, s.SequenceID)})
			return true
		}
	})
	ctx := context.Background()
	p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var want [][]byte
	for i := range 40 {
		size := 100
		if i%3 != 0 {
			size = refAbove + 1 + i*1000
		}
		payload := bytes.Repeat([]byte{byte(i)}, size)
		want = append(want, payload)
		if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: payload, NumMessages: 1, SequenceID: uint64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(payloads) != len(want) {
		t.Fatalf("broker got %d SENDs, want %d", len(payloads), len(want))
	}
	for i := range want {
		if !bytes.Equal(payloads[i], want[i]) {
			t.Fatalf("SEND %d: %d bytes, want %d bytes of %d", i, len(payloads[i]), len(want[i]), i)
		}
	}
}

// A large entry is read into a buffer of its own and kept by the entry
// without a copy; frames read after it (small ones into the connection's
// reused buffer) never change it.
func TestConsumerLargeEntriesKeepTheirBytes(t *testing.T) {
	b := newFakeBroker(t)
	subscribed := make(chan struct{})
	var subFC *fakeConn
	var subID uint64
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if s, ok := cmd.Body.(*SubscribeCommand); ok {
				fc.send(&Success{RequestID: s.RequestID})
				subFC, subID = fc, s.ConsumerID
				close(subscribed)
				return true
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	<-subscribed
	b.mu.Lock()
	fc, id := subFC, subID
	b.mu.Unlock()
	sizes := []int{ownAbove + 1, 10, 40 << 10, 1, ownAbove * 2, 100}
	for i, size := range sizes {
		fc.sendPayload(&Message{ConsumerID: id, MessageID: EntryID(1, uint64(i))}, testMetadata(1), bytes.Repeat([]byte{byte(i + 1)}, size))
	}
	var got []Entry
	for range sizes {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	for i, e := range got {
		if !bytes.Equal(e.Payload, bytes.Repeat([]byte{byte(i + 1)}, sizes[i])) || !bytes.Equal(e.Metadata, testMetadata(1)) {
			t.Fatalf("entry %d changed: %d bytes", i, len(e.Payload))
		}
		if cap(e.Metadata) != len(e.Metadata) {
			t.Fatalf("entry %d: metadata can be appended into its payload", i)
		}
	}
}

// With RecycleOnRelease, a released entry's buffer serves a later entry,
// once however often the entry is released, and never an entry still held.
func TestConsumerRecyclesReleasedEntries(t *testing.T) {
	b := newFakeBroker(t)
	subscribed := make(chan struct{})
	var subFC *fakeConn
	var subID uint64
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if s, ok := cmd.Body.(*SubscribeCommand); ok {
				fc.send(&Success{RequestID: s.RequestID})
				subFC, subID = fc, s.ConsumerID
				close(subscribed)
				return true
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 100, RecycleOnRelease: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	<-subscribed
	b.mu.Lock()
	fc, id := subFC, subID
	b.mu.Unlock()
	const size = 3 * ownAbove
	next := uint64(0)
	receive := func() Entry {
		t.Helper()
		next++
		fc.sendPayload(&Message{ConsumerID: id, MessageID: EntryID(1, next)}, testMetadata(1), bytes.Repeat([]byte{byte(next)}, size))
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.fb == nil {
			t.Fatal("a large entry was not read into a buffer of its own")
		}
		return e
	}
	intact := func(e Entry) {
		t.Helper()
		if !bytes.Equal(e.Payload, bytes.Repeat([]byte{byte(e.ID.Entry)}, size)) {
			t.Fatalf("entry %d was overwritten", e.ID.Entry)
		}
	}
	held := receive()
	for range 20 {
		e := receive()
		intact(e)
		intact(held)
		// Twice: the second release must not hand the buffer out again
		// while the next entry uses it.
		_ = cons.Release(e)
		_ = cons.Release(e)
	}
	a, b2 := receive(), receive()
	if a.fb == b2.fb {
		t.Fatal("two entries held at once share a buffer")
	}
	intact(a)
	intact(b2)
	intact(held)
}

// TestConsumerWindowByBytes: with MaxBytes, the window opens only as far
// as the entries' size allows: small at first, a few large entries at a
// time, wide for small messages; and it follows MaxBytes as that changes
// (a budget shared by more consumers).
func TestConsumerWindowByBytes(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx := context.Background()
	var maxBytes atomic.Int64
	maxBytes.Store(64 << 10)
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 1000, MaxBytes: maxBytes.Load})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	waitFor(t, "FLOW", func() bool { return len(b.commands(TypeFlow)) == 1 })
	if g := b.commands(TypeFlow)[0].(*Flow).Permits; g != minPermits {
		t.Fatalf("first FLOW %d permits, want %d while no size is known", g, minPermits)
	}
	b.mu.Lock()
	fc := b.conns[0]
	b.mu.Unlock()
	sub := b.commands(TypeSubscribe)[0].(*SubscribeCommand)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, sent := uint64(0), int64(0)
	deliver := func(n int, msgs int32, size int) {
		for range n {
			next++
			sent += int64(msgs)
			fc.sendPayload(&Message{ConsumerID: sub.ConsumerID, MessageID: EntryID(1, next)}, testMetadata(msgs), make([]byte, size))
		}
		for range n {
			e, err := cons.Receive(rctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := cons.Release(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	largest := func(from int) (n uint32) {
		for _, f := range b.commands(TypeFlow)[from:] {
			n = max(n, f.(*Flow).Permits)
		}
		return n
	}
	// Large single messages (the fake broker sends whatever the window):
	// no FLOW grants more than the floor.
	deliver(8, 1, 32<<10)
	time.Sleep(20 * time.Millisecond)
	if n := largest(0); n > minPermits {
		t.Errorf("a FLOW of %d permits for 32 KiB messages and a 64 KiB budget, want at most %d", n, minPermits)
	}
	// Small batched messages (about 100 bytes each): the window opens,
	// slowly after large entries (a few hundred entries).
	flows := len(b.commands(TypeFlow))
	deliver(400, 100, 10<<10)
	waitFor(t, "a wide window", func() bool { return largest(flows) > 100 })
	// The budget shrinks to a sixteenth: the window follows, and later
	// grants stay within it. (FLOWs granted before the shrink may still be
	// on their way to the fake broker: count from once they stop.)
	maxBytes.Store(4 << 10)
	cons.mu.Lock()
	w := cons.credit.window()
	cons.mu.Unlock()
	if w > 64 {
		t.Errorf("window %d permits after MaxBytes shrank to 4 KiB for ~100-byte messages, want at most 64", w)
	}
	for flows = -1; flows != len(b.commands(TypeFlow)); time.Sleep(200 * time.Millisecond) {
		flows = len(b.commands(TypeFlow))
	}
	deliver(40, 100, 10<<10)
	time.Sleep(20 * time.Millisecond)
	// A FLOW may exceed the window by what the broker overdrew (batches of
	// 100 messages sent on fewer permits): what bounds the bytes in flight
	// is what the broker may still send, granted less sent.
	var granted int64
	for _, f := range b.commands(TypeFlow) {
		granted += int64(f.(*Flow).Permits)
	}
	if left := granted - sent; left > 64 {
		t.Errorf("the broker may send %d more messages after MaxBytes shrank to 4 KiB for ~100-byte messages, want at most 64", left)
	}
}

// A durable cursor subscribes as Failover (HA instances share it); a
// reader as Exclusive, so the broker's failover delay before the first
// dispatch (1 s by default) does not hold up every short-lived reader.
func TestSubscriptionType(t *testing.T) {
	for _, tt := range []struct {
		name       string
		nonDurable bool
		want       SubType
	}{
		{"cursor", false, Failover},
		{"reader", true, Exclusive},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBroker(t)
			got := make(chan SubType, 1)
			b.set(func() {
				b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
					if s, ok := cmd.Body.(*SubscribeCommand); ok {
						got <- s.SubType
						fc.send(&Success{RequestID: s.RequestID})
						return true
					}
					return false
				}
			})
			c := newTestClient(t, b.url(), ConnOptions{})
			cons, err := Subscribe(context.Background(), c, ConsumerOptions{Topic: "t", Subscription: "s", Name: "me", NonDurable: tt.nonDurable})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			if st := <-got; st != tt.want {
				t.Errorf("subscribed as %v, want %v", st, tt.want)
			}
		})
	}
}

// The broker dispatches a whole batch while it has any permit left and
// counts the messages past its permits against the next FLOW. Released,
// such a batch must bring the broker's permits back to the whole window,
// or a window smaller than a batch leaves the broker at zero permits with
// nothing held: the cursor stalls for good.
func TestConsumerGrantsTheBatchOverdraft(t *testing.T) {
	b := newFakeBroker(t)
	subscribed := make(chan struct{})
	var subFC *fakeConn
	var subID uint64
	b.set(func() {
		b.handle = func(fc *fakeConn, cmd Command, _ Frame) bool {
			if s, ok := cmd.Body.(*SubscribeCommand); ok {
				fc.send(&Success{RequestID: s.RequestID})
				subFC, subID = fc, s.ConsumerID
				close(subscribed)
				return true
			}
			return false
		}
	})
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const window = 10
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: window})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	<-subscribed
	b.mu.Lock()
	fc, id := subFC, subID
	b.mu.Unlock()
	// What the broker holds: the permits granted less the messages sent.
	brokerPermits := func() int64 {
		var n int64
		for _, f := range b.commands(TypeFlow) {
			n += int64(f.(*Flow).Permits)
		}
		return n
	}
	waitFor(t, "first FLOW", func() bool { return brokerPermits() == window })
	sent := int64(0)
	for i, batch := range []int32{25, 3, 40} {
		fc.sendPayload(&Message{ConsumerID: id, MessageID: EntryID(1, uint64(i))}, testMetadata(batch), []byte{1})
		sent += int64(batch)
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Release(e); err != nil {
			t.Fatal(err)
		}
		// Grants come in halves of the window: at least half is back.
		waitFor(t, fmt.Sprintf("half the window back after a batch of %d", batch), func() bool {
			return brokerPermits()-sent >= window/2
		})
	}
}

// After small batched entries open the window wide, one large entry closes
// it to what MaxBytes holds of entries that large at once, and it opens
// again only slowly: the backlog behind a large entry is often more of
// them (a chunked message), and every permit granted can bring one.
func TestConsumerWindowFollowsLargestEntries(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 100000,
		MaxBytes: func() int64 { return 128 << 10 }})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	waitFor(t, "FLOW", func() bool { return len(b.commands(TypeFlow)) == 1 })
	b.mu.Lock()
	fc := b.conns[0]
	b.mu.Unlock()
	sub := b.commands(TypeSubscribe)[0].(*SubscribeCommand)
	next := uint64(0)
	deliver := func(msgs int32, size int) {
		next++
		fc.sendPayload(&Message{ConsumerID: sub.ConsumerID, MessageID: EntryID(1, next)}, testMetadata(msgs), make([]byte, size))
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("entry %d: %v", next, err)
		}
		if err := cons.Release(e); err != nil {
			t.Fatal(err)
		}
	}
	window := func() int64 {
		cons.mu.Lock()
		defer cons.mu.Unlock()
		return cons.credit.window()
	}
	for range 20 {
		deliver(100, 10<<10) // about 100 bytes a message
	}
	if w := window(); w < 1000 {
		t.Fatalf("window %d permits for ~100-byte messages and 128 KiB, want it wide", w)
	}
	deliver(1, 32<<10) // the fake broker's frames stop at 64 KiB
	if w := window(); w > 4 {
		t.Errorf("window %d permits after a 32 KiB entry with 128 KiB, want at most 4", w)
	}
	for range 10 {
		deliver(100, 10<<10)
	}
	if w := window(); w > 8 {
		t.Errorf("window %d permits 10 small entries after a 32 KiB one, want it to open slowly (at most 8)", w)
	}
}
