// Package wiretest is a fake Pulsar broker for tests of code that speaks
// the binary protocol through replicator/wire, shipped beside the client
// as franz-go ships kfake and hashicorp/raft its in-memory transport, so
// that wire's own tests and those of its users (the entry path) drive the
// real client against one fake rather than each building its own.
//
// A Broker answers the handshake, looks every topic up to itself and gives
// default replies (success) to the rest; a Handler sees each command first
// and may answer it itself, which is how tests stage refusals, stalls and
// closes. With KeepEntries it also keeps what producers send per topic
// (one ledger each, deduplicated by producer name and sequence id) and
// serves it to consumers within their permits from durable cursors or
// readers, so that a copy from one fake cluster to another can be run end
// to end; Unload closes a topic's producers and consumers as a broker
// unloading it does.
//
// The Broker is safe for concurrent use; each connection is served by a
// goroutine of its own, stopped by the test's cleanup.
package wiretest

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Handler sees each command after the handshake before the broker does;
// it returns true when it dealt with the command (answered it or chose
// not to), false for the broker's own answer. It runs on the connection's
// goroutine: the next command is read when it returns.
type Handler func(c *Conn, cmd wire.Command, f wire.Frame) bool

// Broker is a fake Pulsar broker on a loopback port (New, NewTLS) or in
// memory (NewMem).
type Broker struct {
	t    testing.TB
	ln   net.Listener
	addr string
	tls  bool
	mem  *memListener

	mu       sync.Mutex
	conns    []*Conn
	received []wire.Command
	handle   Handler
	onConn   func(*Conn)
	lastSeq  int64 // PRODUCER_SUCCESS's last_sequence_id without KeepEntries
	silent   bool
	maxSize  int32
	store    *store // nil until KeepEntries
}

// Conn is the broker's end of one client connection.
type Conn struct {
	b       *Broker
	nc      net.Conn
	wmu     sync.Mutex
	connect *wire.Connect // b.mu
}

// New starts a fake broker on a loopback port; it stops when the test
// ends.
func New(t testing.TB) *Broker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln)
}

// NewMem starts a fake broker listening in memory, for tests run under
// testing/synctest: the bubble's clock only moves while every goroutine
// in it waits on something of the bubble's, which a loopback socket is
// not, and a pipe is. Clients reach it only through Dial; its URL names
// no real host.
func NewMem(t testing.TB) *Broker {
	t.Helper()
	ln := &memListener{addr: "fake-broker:6650", conns: make(chan net.Conn), done: make(chan struct{})}
	b := serve(t, ln)
	b.mem = ln
	return b
}

// Dial connects to a broker of NewMem, for a client's dial function.
func (b *Broker) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return b.mem.dial(ctx, addr)
}

func serve(t testing.TB, ln net.Listener) *Broker {
	b := &Broker{t: t, ln: ln, addr: ln.Addr().String(), lastSeq: -1}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := &Conn{b: b, nc: nc}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			onConn := b.onConn
			b.mu.Unlock()
			if onConn != nil {
				onConn(c)
			}
			go c.serve()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		b.mu.Lock()
		for _, c := range b.conns {
			c.nc.Close()
		}
		b.mu.Unlock()
	})
	return b
}

// URL is the broker's service URL.
func (b *Broker) URL() string {
	if b.tls {
		return "pulsar+ssl://" + b.addr
	}
	return "pulsar://" + b.addr
}

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return b.addr }

// Handle makes h see every command from now on (nil: none).
func (b *Broker) Handle(h Handler) { b.locked(func() { b.handle = h }) }

// OnConn makes f see every connection accepted from now on, before its
// first command is read.
func (b *Broker) OnConn(f func(*Conn)) { b.locked(func() { b.onConn = f }) }

// SetLastSequenceID sets PRODUCER_SUCCESS's last_sequence_id (default -1;
// with KeepEntries the producer name's record answers instead).
func (b *Broker) SetLastSequenceID(seq int64) { b.locked(func() { b.lastSeq = seq }) }

// SetSilent makes the broker leave PING unanswered (to test keep-alive).
func (b *Broker) SetSilent(silent bool) { b.locked(func() { b.silent = silent }) }

// SetMaxMessageSize sets CONNECTED's max_message_size for connections
// from now on (0: 64 KiB).
func (b *Broker) SetMaxMessageSize(n int32) { b.locked(func() { b.maxSize = n }) }

// locked runs f with b.mu held.
func (b *Broker) locked(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

// Commands returns the commands of type typ received so far, in order.
func (b *Broker) Commands(typ wire.CommandType) []wire.Body {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []wire.Body
	for _, c := range b.received {
		if c.Type == typ {
			out = append(out, c.Body)
		}
	}
	return out
}

// Received returns every command received so far, in order.
func (b *Broker) Received() []wire.Command {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]wire.Command(nil), b.received...)
}

// Conns returns the connections accepted so far, oldest first.
func (b *Broker) Conns() []*Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*Conn(nil), b.conns...)
}

// Connect is the connection's CONNECT; nil before it arrived.
func (c *Conn) Connect() *wire.Connect {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.connect
}

// Send writes one command to the client.
func (c *Conn) Send(body wire.Body) {
	c.SendRaw(wire.AppendFrame(nil, wire.AppendCommand(nil, body)))
}

// SendPayload writes one command with a payload section (a MESSAGE).
func (c *Conn) SendPayload(body wire.Body, metadata, payload []byte) {
	c.SendRaw(wire.AppendPayloadFrame(nil, wire.AppendCommand(nil, body), metadata, payload))
}

// SendRaw writes bytes as they are (a malformed frame, say).
func (c *Conn) SendRaw(p []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.Write(p)
}

// Close closes the connection, as a broker that went away.
func (c *Conn) Close() error { return c.nc.Close() }

func (c *Conn) serve() {
	b := c.b
	defer b.dropConn(c)
	var buf []byte
	for {
		var f wire.Frame
		var err error
		f, buf, err = wire.ReadFrame(c.nc, buf, 1<<20)
		if err != nil {
			return
		}
		cmd, err := wire.DecodeCommand(f.Command)
		if err != nil {
			b.t.Errorf("fake broker: %v", err)
			return
		}
		b.mu.Lock()
		b.received = append(b.received, cmd)
		handle, lastSeq, silent, maxSize, st := b.handle, b.lastSeq, b.silent, b.maxSize, b.store
		if cc, ok := cmd.Body.(*wire.Connect); ok {
			c.connect = cc
		}
		b.mu.Unlock()
		if maxSize == 0 {
			maxSize = 1 << 16
		}
		if cmd.Type != wire.TypeConnect && handle != nil && handle(c, cmd, f) {
			continue
		}
		if st != nil && st.serve(c, cmd, f) {
			continue
		}
		switch x := cmd.Body.(type) {
		case *wire.Connect:
			c.Send(&wire.Connected{ServerVersion: "fake", ProtocolVersion: wire.ProtocolVersion, MaxMessageSize: maxSize})
		case *wire.Lookup:
			c.Send(&wire.LookupResponse{RequestID: x.RequestID, Kind: wire.LookupConnect, BrokerServiceURL: b.URL(), BrokerServiceURLTLS: b.URL()})
		case *wire.PartitionedMetadata:
			c.Send(&wire.PartitionedMetadataResponse{RequestID: x.RequestID, Partitions: 3})
		case *wire.ProducerCommand:
			c.Send(&wire.ProducerSuccess{RequestID: x.RequestID, ProducerName: x.ProducerName, LastSequenceID: lastSeq})
		case *wire.SubscribeCommand:
			c.Send(&wire.Success{RequestID: x.RequestID})
		case *wire.CloseProducer:
			c.Send(&wire.Success{RequestID: x.RequestID})
		case *wire.CloseConsumer:
			c.Send(&wire.Success{RequestID: x.RequestID})
		case *wire.Send:
			if !f.HasPayload || !f.Checksummed {
				b.t.Errorf("fake broker: SEND without checksummed payload")
			}
			c.Send(&wire.SendReceipt{ProducerID: x.ProducerID, SequenceID: x.SequenceID, HighestSequenceID: receiptHighest(x, f.Metadata),
				MessageID: wire.EntryID(1, x.SequenceID)})
		case *wire.Ping:
			if !silent {
				c.Send(&wire.Pong{})
			}
		}
	}
}

// dropConn forgets the producers and consumers of a connection that
// ended.
func (b *Broker) dropConn(c *Conn) {
	b.mu.Lock()
	st := b.store
	b.mu.Unlock()
	if st != nil {
		st.dropConn(c)
	}
}
