package wire

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"
)

// The fake broker of these tests is wiretest's (replicator/wire/wiretest).
// wiretest imports wire, so this package's own tests cannot import it:
// they reach it through FakeBrokers, which wiretest_link_test.go (package
// wire_test, compiled into the same test binary) fills in at init, and see
// it through the two interfaces below. fakeBroker and fakeConn are the
// thin shim the tests were written against.

// FakeBroker is the part of a *wiretest.Broker these tests use.
type FakeBroker interface {
	URL() string
	Addr() string
	Dial(ctx context.Context, addr string) (net.Conn, error)
	Handle(h func(c FakeConn, cmd Command, f Frame) bool)
	OnConn(f func(FakeConn))
	SetLastSequenceID(seq int64)
	SetSilent(silent bool)
	SetMaxMessageSize(n int32)
	Commands(typ CommandType) []Body
	Received() []Command
}

// FakeConn is the broker's end of a connection (a *wiretest.Conn).
type FakeConn interface {
	Send(body Body)
	SendPayload(body Body, metadata, payload []byte)
	SendRaw(p []byte)
	Connect() *Connect
	Close() error
}

// FakeBrokers start wiretest's brokers: on a loopback port, behind TLS,
// in memory (for testing/synctest; clients reach it through Dial).
var FakeBrokers struct {
	New    func(t *testing.T) FakeBroker
	NewTLS func(t *testing.T) (FakeBroker, *tls.Config)
	NewMem func(t *testing.T) FakeBroker
}

// fakeBroker is a wiretest broker with the settings the tests change
// under b.set: the broker takes them when set returns. mu is also the
// tests' own lock for what their handlers record.
type fakeBroker struct {
	w    FakeBroker
	addr string

	mu    sync.Mutex
	conns []*fakeConn
	// handle, when set, sees each command first; returning true means it
	// was dealt with.
	handle func(fc *fakeConn, cmd Command, f Frame) bool
	// lastSeq is PRODUCER_SUCCESS's last_sequence_id.
	lastSeq int64
	// silent: do not answer PING (to test keep-alive).
	silent bool
	// maxMessageSize is CONNECTED's max_message_size; 0: 64 KiB.
	maxMessageSize int32
	// byConn finds a connection's fakeConn.
	byConn map[FakeConn]*fakeConn
}

type fakeConn struct{ FakeConn }

func newFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	return shimBroker(FakeBrokers.New(t))
}

// newFakeTLSBroker is a fake broker behind TLS with a self-signed
// certificate for 127.0.0.1; the client configuration trusts it.
func newFakeTLSBroker(t *testing.T) (*fakeBroker, *tls.Config) {
	t.Helper()
	w, cfg := FakeBrokers.NewTLS(t)
	return shimBroker(w), cfg
}

// newFakeMemBroker is a fake broker listening in memory, for tests run
// under testing/synctest. Clients reach it through b.dial only
// (ConnOptions.dial); its URL names no real host.
func newFakeMemBroker(t *testing.T) *fakeBroker {
	t.Helper()
	return shimBroker(FakeBrokers.NewMem(t))
}

func shimBroker(w FakeBroker) *fakeBroker {
	b := &fakeBroker{w: w, addr: w.Addr(), lastSeq: -1, byConn: map[FakeConn]*fakeConn{}}
	w.OnConn(func(c FakeConn) { b.wrap(c) })
	w.Handle(func(c FakeConn, cmd Command, f Frame) bool {
		b.mu.Lock()
		h := b.handle
		b.mu.Unlock()
		return h != nil && h(b.wrap(c), cmd, f)
	})
	return b
}

// wrap is c's fakeConn, the same each time.
func (b *fakeBroker) wrap(c FakeConn) *fakeConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	fc := b.byConn[c]
	if fc == nil {
		fc = &fakeConn{c}
		b.byConn[c] = fc
		b.conns = append(b.conns, fc)
	}
	return fc
}

// dial connects to the in-memory broker (newFakeMemBroker), for
// ConnOptions.dial.
func (b *fakeBroker) dial(ctx context.Context, addr string) (net.Conn, error) {
	return b.w.Dial(ctx, addr)
}

func (b *fakeBroker) url() string { return b.w.URL() }

// set runs f under b.mu; the broker then takes the settings.
func (b *fakeBroker) set(f func()) {
	b.mu.Lock()
	f()
	lastSeq, silent, maxSize := b.lastSeq, b.silent, b.maxMessageSize
	b.mu.Unlock()
	b.w.SetLastSequenceID(lastSeq)
	b.w.SetSilent(silent)
	b.w.SetMaxMessageSize(maxSize)
}

// commands returns the commands of type typ received so far.
func (b *fakeBroker) commands(typ CommandType) []Body { return b.w.Commands(typ) }

// received returns every command received so far, in order.
func (b *fakeBroker) received() []Command { return b.w.Received() }

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (fc *fakeConn) send(body Body)                            { fc.Send(body) }
func (fc *fakeConn) sendPayload(body Body, md, payload []byte) { fc.SendPayload(body, md, payload) }
func (fc *fakeConn) sendRaw(b []byte)                          { fc.SendRaw(b) }
func (fc *fakeConn) connect() *Connect                         { return fc.Connect() }

func newTestClient(t *testing.T, url string, opts ConnOptions) *Client {
	t.Helper()
	c, err := NewClient(ClientOptions{ServiceURL: url, Conn: opts, OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testMetadata(n int32) []byte {
	return MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, NumMessagesInBatch: n}.Append(nil)
}
