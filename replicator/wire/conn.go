package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar/auth"
	"go.uber.org/zap"
)

// ConnOptions configure a connection. The zero value dials plain TCP
// without authentication.
type ConnOptions struct {
	// Auth supplies CONNECT's credentials and, for the TLS provider, the
	// client certificate. Any pulsar-client-go pulsar/auth provider works;
	// it must be initialised (Init) by the caller. Nil means none.
	Auth auth.Provider
	// TLS, when set, is the base TLS configuration (trusted CAs, minimum
	// version); it is required for pulsar+ssl:// addresses. ServerName
	// defaults to the host dialled, so certificates are verified against
	// the broker's (or proxy's) host name.
	TLS *tls.Config
	// KeepAlive bounds how long a connection may stay silent: one that
	// received nothing for KeepAlive is closed (ErrSilent), and its
	// consumers and producers reconnect elsewhere or later. Pings go every
	// KeepAlive/2, so a healthy broker always answers in time even on an
	// idle connection, and silence is checked every KeepAlive/8: a
	// half-open connection (a NAT or firewall that lost its state, where
	// no close ever arrives) is closed within 1.125 KeepAlive of the last
	// byte received, where checking only at each ping left it open up to
	// three ping intervals. Default 30s.
	KeepAlive time.Duration
	// ConnectTimeout bounds dialling and the handshake. Default 10s.
	ConnectTimeout time.Duration
	// ClientVersion is announced in CONNECT. Default "geo-sidecar-wire".
	ClientVersion string
	// Logger; default zap.NewNop().
	Logger *zap.Logger
	// Events, optional, are told what an operator watches on a cluster's
	// links.
	Events Events

	// dial, when set, replaces the TCP dial to addr: the tests that wait
	// on backoff and keep-alive run their links in memory under
	// testing/synctest, whose fake clock stands still while a goroutine
	// waits on a real socket.
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Events are told about what makes a link to a cluster unhealthy, for
// metrics. Each may be nil. They are called from the client's goroutines
// and must not block.
type Events struct {
	// ConnLost: a connection closed other than by Close; silent says the
	// keep-alive closed it (nothing received within KeepAlive).
	ConnLost func(silent bool)
	// Reconnect: a producer or consumer (kind "producer", "consumer")
	// lost its session on the broker and starts reconnecting, for cause
	// CauseConnLost, CauseBrokerClosed, CauseSendTimeout or CauseRestart.
	Reconnect func(kind, cause string)
	// ConnectFailed: a new connection could not be set up (dial, TLS or
	// the handshake failed on the network, or timed out): a cut link
	// shows as these, since it has no connection left to lose. A broker's
	// refusal (authentication) and a caller giving up do not count.
	ConnectFailed func()
}

// Causes of a reconnect, for [Events].Reconnect.
const (
	// CauseConnLost: the connection was lost (reset, refused, silent).
	CauseConnLost = "connection-lost"
	// CauseBrokerClosed: the broker closed the producer or consumer
	// (topic unloaded, moved or fenced).
	CauseBrokerClosed = "broker-closed"
	// CauseSendTimeout: the producer re-created itself because its
	// oldest send had no receipt within SendTimeout: on a connection that
	// still answers keep-alives, the mark of a slow or stalled link (or a
	// target that does not persist).
	CauseSendTimeout = "send-timeout"
	// CauseRestart: the producer re-created itself for another reason
	// (receipts out of order, a retryable send error).
	CauseRestart = "restart"
)

// ReconnectKinds and ReconnectCauses are every kind and cause
// Events.Reconnect reports, so that a metric can create its series at 0:
// a counter series that first appears at 1 shows no increase in
// Prometheus, and an alert on its first event would not fire.
var (
	ReconnectKinds  = []string{"producer", "consumer"}
	ReconnectCauses = []string{CauseConnLost, CauseBrokerClosed, CauseSendTimeout, CauseRestart}
)

// errSendTimeout is why a producer whose oldest send waited past
// SendTimeout re-creates itself (CauseSendTimeout).
var errSendTimeout = errors.New("send timeout")

// reconnectCause classifies why a session ended, for Events.Reconnect.
func reconnectCause(err error) string {
	var ce *ConnError
	switch {
	case errors.Is(err, errBrokerClosed):
		return CauseBrokerClosed
	case errors.As(err, &ce):
		return CauseConnLost
	case errors.Is(err, errSendTimeout):
		return CauseSendTimeout
	}
	return CauseRestart
}

func (o ConnOptions) withDefaults() ConnOptions {
	if o.KeepAlive <= 0 {
		o.KeepAlive = 30 * time.Second
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.ClientVersion == "" {
		o.ClientVersion = "geo-sidecar-wire"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// consumerSink receives what the broker sends to one consumer. Methods are
// called from the connection's reader goroutine and must not block.
type consumerSink interface {
	// handleMessage gets an entry; md and payload alias the read buffer and
	// are valid only during the call, unless they lie in fb (a frame buffer
	// of their own): then the sink may keep them, and says so (kept), and
	// recycles fb or lets it go. A buffer not kept is recycled at once.
	handleMessage(m *Message, md, payload []byte, pc PayloadCRC, fb *frameBuf) (kept bool)
	handleActive(active bool)
	// handleClose is called once when the consumer is gone from this
	// connection: closed by the broker (err wraps errBrokerClosed) or the
	// connection was lost.
	handleClose(err error)
}

// producerSink receives what the broker sends to one producer; like
// consumerSink, called from the reader goroutine, must not block.
type producerSink interface {
	handleReceipt(r *SendReceipt)
	handleSendError(e *SendError)
	// handleClose is told that the producer is gone from this connection:
	// the connection was lost (the sink is no longer registered), or the
	// broker closed it (err wraps errBrokerClosed): the sink then stays
	// registered, for the receipts that follow the close, until it
	// removes itself (removeProducer).
	handleClose(err error)
	// checkStalled is called at every keep-alive tick (from the keep-alive
	// goroutine), so that producers need no timer of their own.
	checkStalled(now time.Time)
	// handleSilent is told when the connection goes silent (nothing
	// received for silentAfter of the keep-alive) and when it speaks
	// again; from the keep-alive goroutine.
	handleSilent(silent bool)
}

// consumers are told of silence too (optional for a consumerSink).
type silenceSink interface{ handleSilent(silent bool) }

// silentAfter is the share of KeepAlive without data after which a
// connection counts as silent (Conn.Silent): a healthy one hears a pong
// at most about 5/8 KeepAlive after the last data (pings every half,
// sent at the next check), so 3/4 leaves a margin and still tells an
// operator, before the connection is closed, that the link is in doubt.
const silentAfter = 0.75

// errBrokerClosed marks a consumer or producer closed by the broker
// (CLOSE_CONSUMER, CLOSE_PRODUCER, TOPIC_MIGRATED): topic unloaded or moved;
// look it up again.
var errBrokerClosed = errors.New("closed by the broker")

// Conn is one connection to a broker (or to a proxy on a broker's behalf).
// It multiplexes every consumer and producer of this process on that
// broker, told apart by ids, and correlates requests by request id. Its
// goroutines are a reader, a writer and one keep-alive ticker; consumers and
// producers cost no goroutine or timer while idle. Safe for concurrent use.
type Conn struct {
	// Logical is the broker (host:port) this connection talks to; Physical
	// is the address dialled (the same, or a proxy's).
	Logical, Physical string

	opts     ConnOptions
	log      *zap.Logger
	nc       net.Conn
	maxFrame int
	server   string

	nextRequest atomic.Uint64
	nextHandle  atomic.Uint64
	lastRead    atomic.Int64 // unix nanos

	mu        sync.Mutex
	pending   map[uint64]chan Command
	consumers map[uint64]consumerSink
	producers map[uint64]producerSink
	err       error // why the connection closed
	// silentTold is the silence last told to the sinks (handleSilent).
	silentTold bool

	wmu    sync.Mutex
	wq     writeQueue // filled by writers under wmu
	wspare writeQueue // the writer goroutine's: written last time, reused next
	wake   chan struct{}

	done chan struct{} // closed when the connection is closed
	wg   sync.WaitGroup
}

// Dial connects to physical ("host:port"), performs the handshake and starts
// the connection's goroutines. When logical differs from physical, physical
// is a proxy and CONNECT asks it to forward to logical. useTLS selects TLS
// (pulsar+ssl).
func Dial(ctx context.Context, logical, physical string, useTLS bool, opts ConnOptions) (c *Conn, err error) {
	opts = opts.withDefaults()
	if f := opts.Events.ConnectFailed; f != nil {
		parent := ctx
		defer func() {
			var ce *ConnError
			if err != nil && errors.As(err, &ce) && parent.Err() == nil {
				f()
			}
		}()
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	var nc net.Conn
	if opts.dial != nil {
		nc, err = opts.dial(ctx, physical)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", physical)
	}
	if err != nil {
		return nil, &ConnError{Addr: physical, Err: err}
	}
	if useTLS {
		cfg, err := tlsConfig(opts, physical)
		if err != nil {
			nc.Close()
			return nil, err
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, &ConnError{Addr: physical, Err: fmt.Errorf("TLS handshake: %w", err)}
		}
		nc = tc
	}
	c = &Conn{
		Logical:   logical,
		Physical:  physical,
		opts:      opts,
		log:       opts.Logger.With(zap.String("broker", logical), zap.String("addr", physical)),
		nc:        nc,
		maxFrame:  DefaultMaxMessageSize + framePadding,
		pending:   make(map[uint64]chan Command),
		consumers: make(map[uint64]consumerSink),
		producers: make(map[uint64]producerSink),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if err := c.handshake(); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	c.lastRead.Store(time.Now().UnixNano())
	c.wg.Add(3)
	go c.readLoop()
	go c.writeLoop()
	go c.keepAlive()
	return c, nil
}

func tlsConfig(opts ConnOptions, physical string) (*tls.Config, error) {
	var cfg *tls.Config
	if opts.TLS != nil {
		cfg = opts.TLS.Clone()
	} else {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(physical)
		if err != nil {
			return nil, fmt.Errorf("wire: TLS server name from %q: %w", physical, err)
		}
		cfg.ServerName = host
	}
	if opts.Auth != nil {
		cert, err := opts.Auth.GetTLSCertificate()
		if err != nil {
			return nil, fmt.Errorf("wire: client certificate from %s auth: %w", opts.Auth.Name(), err)
		}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
	}
	return cfg, nil
}

func (c *Conn) authData() (method string, data []byte, err error) {
	if c.opts.Auth == nil {
		return "", nil, nil
	}
	data, err = c.opts.Auth.GetData()
	if err != nil {
		return "", nil, fmt.Errorf("wire: credentials from %s auth: %w", c.opts.Auth.Name(), err)
	}
	if data == nil {
		data = []byte{}
	}
	return c.opts.Auth.Name(), data, nil
}

// handshake sends CONNECT and waits for CONNECTED, answering AUTH_CHALLENGE
// rounds on the way.
func (c *Conn) handshake() error {
	method, data, err := c.authData()
	if err != nil {
		return err
	}
	connect := &Connect{
		ClientVersion:       c.opts.ClientVersion,
		AuthMethodName:      method,
		AuthData:            data,
		ProtocolVersion:     ProtocolVersion,
		SupportsAuthRefresh: true,
	}
	if c.Logical != c.Physical {
		connect.ProxyToBrokerURL = c.Logical
	}
	if _, err := c.nc.Write(AppendFrame(nil, AppendCommand(nil, connect))); err != nil {
		return &ConnError{Addr: c.Physical, Err: fmt.Errorf("send CONNECT: %w", err)}
	}
	var buf []byte
	for round := 0; ; round++ {
		var f Frame
		f, buf, err = ReadFrame(c.nc, buf, c.maxFrame)
		if err != nil {
			return &ConnError{Addr: c.Physical, Err: fmt.Errorf("handshake: %w", err)}
		}
		cmd, err := DecodeCommand(f.Command)
		if err != nil {
			return &ConnError{Addr: c.Physical, Err: fmt.Errorf("handshake: %w", err)}
		}
		switch b := cmd.Body.(type) {
		case *Connected:
			c.server = b.ServerVersion
			if b.MaxMessageSize > 0 {
				c.maxFrame = int(b.MaxMessageSize) + framePadding
			}
			return nil
		case *AuthChallenge:
			if round > 10 {
				return &ConnError{Addr: c.Physical, Err: errors.New("handshake: too many auth challenges")}
			}
			if err := c.answerChallenge(func(frame []byte) error {
				_, err := c.nc.Write(frame)
				return err
			}); err != nil {
				return err
			}
		case *Error:
			return &BrokerError{Op: "connect", Code: b.Error, Message: b.Message}
		default:
			return &ConnError{Addr: c.Physical, Err: malformed("handshake: unexpected %v", cmd.Type)}
		}
	}
}

func (c *Conn) answerChallenge(write func([]byte) error) error {
	method, data, err := c.authData()
	if err != nil {
		return err
	}
	resp := &AuthResponse{
		ClientVersion:   c.opts.ClientVersion,
		Response:        AuthData{MethodName: method, Data: data},
		ProtocolVersion: ProtocolVersion,
	}
	if err := write(AppendFrame(nil, AppendCommand(nil, resp))); err != nil {
		return &ConnError{Addr: c.Physical, Err: fmt.Errorf("send AUTH_RESPONSE: %w", err)}
	}
	return nil
}

// ServerVersion is the broker's version string from CONNECTED.
func (c *Conn) ServerVersion() string { return c.server }

// MaxMessageSize is the largest message the broker accepts.
func (c *Conn) MaxMessageSize() int { return c.maxFrame - framePadding }

// Done is closed when the connection is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection closed (nil while open).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection and waits for its goroutines. Consumers and
// producers on it see their connection lost.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

// fail closes the connection once, with err as the reason, and tells every
// consumer and producer and waiting request.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	consumers, producers := c.consumers, c.producers
	c.consumers, c.producers = map[uint64]consumerSink{}, map[uint64]producerSink{}
	c.pending = map[uint64]chan Command{}
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	if !errors.Is(err, ErrClosed) {
		silent := errors.Is(err, ErrSilent)
		if silent {
			// What tells an operator that the link, not the broker,
			// is the problem: a half-open link only ever shows this.
			c.log.Warn("connection closed", zap.Bool("keep_alive_timeout", true), zap.Duration("keep_alive", c.opts.KeepAlive), zap.Error(err))
		} else {
			c.log.Info("connection closed", zap.Error(err))
		}
		if c.opts.Events.ConnLost != nil {
			c.opts.Events.ConnLost(silent)
		}
	}
	lost := &ConnError{Addr: c.Physical, Err: err}
	for _, s := range consumers {
		s.handleClose(lost)
	}
	for _, s := range producers {
		s.handleClose(lost)
	}
}

func (c *Conn) closedErr() error {
	return &ConnError{Addr: c.Physical, Err: c.err}
}

// newHandle returns a fresh consumer or producer id for this connection.
func (c *Conn) newHandle() uint64 { return c.nextHandle.Add(1) }

// newRequestID returns a fresh request id for this connection.
func (c *Conn) newRequestID() uint64 { return c.nextRequest.Add(1) }

// refAbove is the payload size from which a SEND's payload is written
// from where it lies (one more segment of a vectored write) instead of
// being copied into the write buffer.
const refAbove = 8 << 10

// readBuffer is the size of the connection's read buffer: small frames
// (receipts, acks, small entries) arrive many per read system call.
const readBuffer = 32 << 10

// ownAbove is the frame size from which a frame is read into a buffer of
// its own, which a MESSAGE's entry then keeps: a large entry is copied once,
// from the socket, and never again.
const ownAbove = 16 << 10

// writeQueue is what the writer goroutine sends next, in order: frames
// copied into buf, and large payloads referenced where they lie (their
// owners keep them unchanged until confirmed). It goes out as one vectored
// write.
type writeQueue struct {
	segs net.Buffers
	buf  []byte // owned bytes; segs alias it
	cut  int    // buf[cut:] is not in segs yet
	// later are frames encoded only when the queue goes out, each into
	// the segment kept for it when it was queued (writeLater).
	later []laterFrame
}

// laterFrame is a frame of writeLater: fill encodes it into segs[at].
type laterFrame struct {
	at   int
	fill func([]byte) []byte
}

func (q *writeQueue) empty() bool { return len(q.segs) == 0 && len(q.buf) == q.cut }

// seal moves the owned bytes not yet in segs into segs.
func (q *writeQueue) seal() {
	if q.cut < len(q.buf) {
		// A full slice expression: an append to buf never writes into
		// a segment (and a reallocation leaves the segment's bytes be).
		q.segs = append(q.segs, q.buf[q.cut:len(q.buf):len(q.buf)])
		q.cut = len(q.buf)
	}
}

// keep keeps the next segment for frames fill encodes when the queue
// goes out (fillLater).
func (q *writeQueue) keep(fill func([]byte) []byte) {
	q.seal()
	q.later = append(q.later, laterFrame{at: len(q.segs), fill: fill})
	q.segs = append(q.segs, nil)
}

// fillLater encodes the frames of keep into the segments kept for them.
// q must be sealed.
func (q *writeQueue) fillLater() {
	for _, l := range q.later {
		start := len(q.buf)
		q.buf = l.fill(q.buf)
		q.segs[l.at] = q.buf[start:len(q.buf):len(q.buf)]
		q.cut = len(q.buf)
	}
	clear(q.later)
	q.later = q.later[:0]
}

// ref appends b as a segment of its own.
func (q *writeQueue) ref(b []byte) {
	q.seal()
	q.segs = append(q.segs, b)
}

// reset empties q for reuse, dropping its references to payloads. Large
// buffers are let go: a burst must not pin memory.
func (q *writeQueue) reset() {
	clear(q.segs)
	q.segs = q.segs[:0]
	clear(q.later)
	q.later = q.later[:0]
	if cap(q.buf) > 1<<20 {
		q.buf = nil
	}
	q.buf, q.cut = q.buf[:0], 0
}

// write queues an encoded frame built by enc for the writer goroutine.
// Frames queued by concurrent callers go out in one write.
func (c *Conn) write(enc func([]byte) []byte) error {
	select {
	case <-c.done:
		return c.closedErr()
	default:
	}
	c.wmu.Lock()
	c.wq.buf = enc(c.wq.buf)
	c.wmu.Unlock()
	c.wakeWriter()
	return nil
}

// writeLater queues frames that fill encodes, on the writer goroutine
// and without the write lock, when the queue goes out: in the place they
// have now, so commands queued meanwhile go after them. fill may append
// nothing. What is gathered between now and then goes out as one frame
// (Consumer.Ack's acknowledgements, one ACK for many entries).
func (c *Conn) writeLater(fill func([]byte) []byte) error {
	select {
	case <-c.done:
		return c.closedErr()
	default:
	}
	c.wmu.Lock()
	c.wq.keep(fill)
	c.wmu.Unlock()
	c.wakeWriter()
	return nil
}

func (c *Conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// WriteCommand queues a command without payload.
func (c *Conn) writeCommand(body Body) error {
	select {
	case <-c.done:
		return c.closedErr()
	default:
	}
	var scratch [128]byte
	cmd := AppendCommand(scratch[:0], body)
	c.wmu.Lock()
	c.wq.buf = AppendFrame(c.wq.buf, cmd)
	c.wmu.Unlock()
	c.wakeWriter()
	return nil
}

// writePayload queues a payload command (SEND). A large payload is not
// copied: it is written from where it lies, so it must stay unchanged
// until confirmed (Outgoing says so).
func (c *Conn) writePayload(body Body, md, payload []byte, pc PayloadCRC) error {
	if err := checkSize(md, payload, c.maxFrame); err != nil {
		return err
	}
	select {
	case <-c.done:
		return c.closedErr()
	default:
	}
	var scratch [128]byte
	cmd := AppendCommand(scratch[:0], body)
	crc := payloadChecksumFrom(md, payload, pc) // outside the lock: without pc it reads every byte
	c.wmu.Lock()
	c.wq.buf = appendPayloadHead(c.wq.buf, cmd, md, len(payload), crc)
	if len(payload) > refAbove {
		c.wq.ref(payload)
	} else {
		c.wq.buf = append(c.wq.buf, payload...)
	}
	c.wmu.Unlock()
	c.wakeWriter()
	return nil
}

// checkSize refuses (ErrTooLarge) an entry whose SEND frame would be
// larger than maxFrame, a connection's limit: the broker would close the
// connection on it.
func checkSize(md, payload []byte, maxFrame int) error {
	if n := PayloadFrameSize(0, len(md), len(payload)); n > maxFrame {
		return fmt.Errorf("%w: entry of %d bytes, limit %d", ErrTooLarge, n, maxFrame-framePadding)
	}
	return nil
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		c.wmu.Lock()
		if c.wq.empty() {
			c.wmu.Unlock()
			continue
		}
		// Double buffering: writers fill one queue while the other is on
		// the wire.
		out := c.wq
		c.wq = c.wspare
		c.wspare = writeQueue{}
		c.wmu.Unlock()
		out.seal()
		out.fillLater()
		if err := writeBuffers(c.nc, out.segs, writeChunk, 2*c.opts.KeepAlive, time.Now); err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
		out.reset()
		c.wspare = out
	}
}

// writeChunk is how many bytes of a queued batch go out under one write
// deadline (see writeBuffers).
const writeChunk = 1 << 20

// writeBuffers writes segs in pieces of at most chunk bytes, each under a
// deadline of timeout from when it starts. One deadline over a whole batch
// would fail any batch the link cannot carry within timeout: after a
// reconnect on a slow link the queue holds every pending send at once
// (max_pending_messages entries of up to 5 MB), and a 2 x keep_alive
// deadline over it dropped the connection again and again, each drop a
// read-back for every partition on it. Per piece, the deadline asks of the
// link what the keep-alive asks of it anyway: that something moves
// (chunk bytes per timeout, about 17 KiB/s with the defaults). segs' elements
// may be resliced.
func writeBuffers(nc net.Conn, segs net.Buffers, chunk int, timeout time.Duration, now func() time.Time) error {
	var part net.Buffers
	for len(segs) > 0 {
		part = part[:0]
		for n := 0; len(segs) > 0 && n < chunk; {
			s := segs[0]
			if room := chunk - n; len(s) > room {
				part = append(part, s[:room])
				segs[0] = s[room:]
				break
			}
			part = append(part, s)
			n += len(s)
			segs = segs[1:]
		}
		if err := nc.SetWriteDeadline(now().Add(timeout)); err != nil {
			return err
		}
		p := part // WriteTo consumes its receiver
		if _, err := p.WriteTo(nc); err != nil {
			return err
		}
	}
	return nil
}

// keepAlive pings every KeepAlive/2 and closes the connection when it
// received nothing for KeepAlive, checked every KeepAlive/8 (see
// ConnOptions.KeepAlive). It also has the producers check their oldest
// send at each tick, so that they need no timer of their own.
func (c *Conn) keepAlive() {
	defer c.wg.Done()
	t := time.NewTicker(max(c.opts.KeepAlive/8, time.Millisecond))
	defer t.Stop()
	pinged := time.Now()
	wasSilent := false
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		now := time.Now()
		idle := now.Sub(time.Unix(0, c.lastRead.Load()))
		if idle >= c.opts.KeepAlive {
			c.fail(fmt.Errorf("%w: nothing for %s", ErrSilent, idle.Round(time.Millisecond)))
			return
		}
		if now.Sub(pinged) >= c.opts.KeepAlive/2 {
			pinged = now
			_ = c.writeCommand(&Ping{})
		}
		silent := c.Silent()
		if silent != wasSilent {
			wasSilent = silent
			if silent {
				c.log.Warn("connection silent", zap.Duration("idle", idle.Round(time.Millisecond)), zap.Duration("keep_alive", c.opts.KeepAlive))
			} else {
				c.log.Info("connection speaks again")
			}
		}
		c.mu.Lock()
		producers := make([]producerSink, 0, len(c.producers))
		for _, p := range c.producers {
			producers = append(producers, p)
		}
		var consumers []silenceSink
		if silent != c.silentTold {
			for _, s := range c.consumers {
				if ss, ok := s.(silenceSink); ok {
					consumers = append(consumers, ss)
				}
			}
		}
		tell := silent != c.silentTold
		c.silentTold = silent
		c.mu.Unlock()
		for _, p := range producers {
			if tell {
				p.handleSilent(silent)
			}
			p.checkStalled(now)
		}
		for _, s := range consumers {
			s.handleSilent(silent)
		}
	}
}

// Silent reports whether nothing arrived on the connection for the last
// three quarters of its keep-alive: a healthy connection, pinged every
// half, always has. A silent connection is not closed yet (the broker may
// be stalled, not the link) but is no sign of a working link.
func (c *Conn) Silent() bool {
	idle := time.Since(time.Unix(0, c.lastRead.Load()))
	return idle >= time.Duration(float64(c.opts.KeepAlive)*silentAfter)
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	fr := newFrameReader(c.nc, vectoredRead(c.nc), readBuffer, c.maxFrame, ownAbove)
	for {
		f, fb, err := fr.next()
		if err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		var gen uint64
		if fb != nil {
			gen = fb.gen.Load()
		}
		c.lastRead.Store(time.Now().UnixNano())
		cmd, err := DecodeCommand(f.Command)
		if err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		kept, err := c.dispatch(cmd, f, fb)
		if fb != nil && !kept {
			frames.put(fb, gen)
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
}

// dispatch hands a frame to whom it concerns; fb is the frame's own buffer
// (readFrame) or nil. kept says that an entry kept fb.
func (c *Conn) dispatch(cmd Command, f Frame, fb *frameBuf) (kept bool, _ error) {
	switch b := cmd.Body.(type) {
	case *Message:
		if !f.HasPayload {
			return false, malformed("MESSAGE without payload")
		}
		if s := c.consumer(b.ConsumerID); s != nil {
			return s.handleMessage(b, f.Metadata, f.Payload, f.PayloadCRC, fb), nil
		}
	case *SendReceipt:
		if s := c.producer(b.ProducerID); s != nil {
			s.handleReceipt(b)
		}
	case *SendError:
		if s := c.producer(b.ProducerID); s != nil {
			s.handleSendError(b)
		}
	case *ActiveConsumerChange:
		if s := c.consumer(b.ConsumerID); s != nil {
			s.handleActive(b.IsActive)
		}
	case *CloseConsumer:
		if s := c.removeConsumer(b.ConsumerID); s != nil {
			s.handleClose(fmt.Errorf("consumer %d: %w", b.ConsumerID, errBrokerClosed))
		}
	case *CloseProducer:
		// The sink stays registered: the broker answers the sends it
		// persisted before the close with receipts under this id after
		// the CLOSE_PRODUCER, and the producer takes them (see
		// Producer.lingering); it removes the sink itself.
		if s := c.producer(b.ProducerID); s != nil {
			s.handleClose(fmt.Errorf("producer %d: %w", b.ProducerID, errBrokerClosed))
		}
	case *TopicMigrated:
		var err = fmt.Errorf("topic migrated to %s: %w", b.BrokerServiceURL, errBrokerClosed)
		if b.ResourceType == 0 {
			if s := c.removeProducer(b.ResourceID); s != nil {
				s.handleClose(err)
			}
		} else if s := c.removeConsumer(b.ResourceID); s != nil {
			s.handleClose(err)
		}
	case *ReachedEndOfTopic:
		c.log.Info("topic terminated and fully read", zap.Uint64("consumer_id", b.ConsumerID))
	case *Ping:
		return false, c.writeCommand(&Pong{})
	case *Pong:
	case *AuthChallenge:
		return false, c.answerChallenge(func(frame []byte) error {
			return c.write(func(b []byte) []byte { return append(b, frame...) })
		})
	case *Success:
		c.respond(b.RequestID, cmd)
	case *Error:
		c.respond(b.RequestID, cmd)
	case *ProducerSuccess:
		if !b.NotReady {
			c.respond(b.RequestID, cmd)
		}
	case *LookupResponse:
		c.respond(b.RequestID, cmd)
	case *PartitionedMetadataResponse:
		c.respond(b.RequestID, cmd)
	case *GetSchemaResponse:
		c.respond(b.RequestID, cmd)
	case *GetLastMessageIDResponse:
		c.respond(b.RequestID, cmd)
	case *GetOrCreateSchemaResponse:
		c.respond(b.RequestID, cmd)
	default:
		c.log.Debug("ignoring command", zap.Stringer("type", cmd.Type))
	}
	return false, nil
}

func (c *Conn) respond(id uint64, cmd Command) {
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- cmd // buffered, one response per request
	}
}

func (c *Conn) consumer(id uint64) consumerSink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[id]
}

func (c *Conn) producer(id uint64) producerSink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.producers[id]
}

func (c *Conn) removeConsumer(id uint64) consumerSink {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.consumers[id]
	delete(c.consumers, id)
	return s
}

func (c *Conn) removeProducer(id uint64) producerSink {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.producers[id]
	delete(c.producers, id)
	return s
}

func (c *Conn) addConsumer(id uint64, s consumerSink) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.closedErr()
	}
	c.consumers[id] = s
	return nil
}

func (c *Conn) addProducer(id uint64, s producerSink) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.closedErr()
	}
	c.producers[id] = s
	return nil
}

// request sends body, which carries request id id, and waits for the
// response. An ERROR response becomes a *BrokerError for op.
func (c *Conn) request(ctx context.Context, op string, id uint64, body Body) (Command, error) {
	ch := make(chan Command, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return Command{}, c.closedErr()
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if err := c.writeCommand(body); err != nil {
		forget()
		return Command{}, err
	}
	select {
	case cmd := <-ch:
		if e, ok := cmd.Body.(*Error); ok {
			return Command{}, &BrokerError{Op: op, Code: e.Error, Message: e.Message}
		}
		return cmd, nil
	case <-ctx.Done():
		forget()
		return Command{}, fmt.Errorf("wire: %s: %w", op, ctx.Err())
	case <-c.done:
		return Command{}, fmt.Errorf("wire: %s: %w", op, c.closedErr())
	}
}
