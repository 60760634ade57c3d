// Package wan is the test bed's wide-area network: a userspace TCP proxy
// that puts latency, a bandwidth limit and network faults between a client
// and a cluster. The kernel of the test machines has no netem, and loopback
// costs microseconds, so every figure taken without it describes a network
// no deployment has.
//
// A [Link] listens on one address and forwards each connection it accepts
// to one upstream address. Shaping (latency with jitter, bandwidth) applies
// to every byte in each direction; faults apply to the whole link at once:
//
//   - [Link.Reset] resets every connection now (both ends get a RST);
//   - [Link.Blackhole] makes the link half-open: every byte of the
//     connections open now, and of those accepted while it lasts, is
//     dropped silently in both directions and no close is passed on, for
//     ever (a NAT or firewall that lost its state). Only an endpoint's own
//     keep-alive tells it the connection is dead; connections accepted after
//     the blackhole ends work;
//   - [Link.Slow] delivers at a fraction of the link's normal rate;
//   - [Link.Cut] resets every connection and resets each new one at once
//     for a while (the other side refuses).
//
// Faults with a duration end by themselves; [Link.Heal] ends them all now.
// [Links] applies the same to several links (a cluster's binary and admin
// ports). Everything is safe for concurrent use.
package wan

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// chunkSize is the most read from a socket at once.
	chunkSize = 32 << 10
	// queueChunks bounds what a direction holds in flight (at most
	// queueChunks*chunkSize bytes): like a TCP window, it lets latency
	// cost throughput only when the window is too small for it.
	queueChunks = 256
	// slowBase is the "normal" rate Slow scales when the link has no
	// bandwidth limit and has carried nothing yet.
	slowBase = 1 << 20
)

// Stats are a link's counters since it started.
type Stats struct {
	// Up is bytes delivered to the upstream (client to cluster), Down
	// bytes delivered to clients.
	Up, Down int64
	// Dropped is bytes a blackhole swallowed, both directions.
	Dropped int64
	// Accepted is connections accepted; Active those still open; Resets
	// connections reset by Reset, Cut or an endpoint's error.
	Accepted, Active, Resets int64
}

// Link is one proxied address. See the package comment.
type Link struct {
	name     string
	upstream string
	ln       net.Listener

	mu        sync.Mutex
	conns     map[*conn]struct{}
	delay     time.Duration
	jitter    time.Duration
	bandwidth int64 // bytes per second and direction; 0: unlimited
	blackhole time.Time
	cut       time.Time
	slowUntil time.Time
	slowRate  int64
	closed    bool
	dir       [2]*direction // 0: up, 1: down

	accepted, resets atomic.Int64
	dropped          atomic.Int64

	wg sync.WaitGroup
}

// Listen starts a link that accepts on listen (host:port; port 0 picks
// one) and forwards to upstream. name is for error messages.
func Listen(name, listen, upstream string) (*Link, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("wan link %s: listen on %s: %w", name, listen, err)
	}
	l := &Link{name: name, upstream: upstream, ln: ln, conns: map[*conn]struct{}{}}
	l.dir[0], l.dir[1] = &direction{}, &direction{}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Name is the link's name.
func (l *Link) Name() string { return l.name }

// Addr is the address the link accepts on.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Upstream is the address the link forwards to.
func (l *Link) Upstream() string { return l.upstream }

// SetLatency delays every byte by delay plus a uniform jitter in
// [-jitter, +jitter], in each direction (a round trip costs twice delay).
// Bytes never overtake each other: jitter only spreads their spacing.
// It applies to bytes read from now on.
func (l *Link) SetLatency(delay, jitter time.Duration) {
	l.mu.Lock()
	l.delay, l.jitter = max(delay, 0), max(jitter, 0)
	l.mu.Unlock()
}

// SetBandwidth limits each direction to bytesPerSecond, shared by every
// connection of the link; 0 removes the limit.
func (l *Link) SetBandwidth(bytesPerSecond int64) {
	l.mu.Lock()
	l.bandwidth = max(bytesPerSecond, 0)
	l.mu.Unlock()
}

// Reset resets every open connection (both ends get a RST) and returns how
// many there were. New connections work as before.
func (l *Link) Reset() int {
	l.mu.Lock()
	cs := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		l.resets.Add(1)
		c.abort()
	}
	return len(cs)
}

// Blackhole makes every open connection half-open for ever, and every
// connection accepted during the next d (until Heal when d is 0) too: their
// bytes are dropped in both directions and their closes are not passed on.
func (l *Link) Blackhole(d time.Duration) {
	l.mu.Lock()
	l.blackhole = until(d)
	for c := range l.conns {
		c.dead.Store(true)
	}
	l.mu.Unlock()
}

// Slow delivers at fraction of the normal rate for d (until Heal when d is
// 0), in each direction. The normal rate is the bandwidth limit, else the
// direction's highest one-second throughput in the last minute (1 MiB/s if
// it carried nothing).
func (l *Link) Slow(fraction float64, d time.Duration) {
	l.mu.Lock()
	base := l.bandwidth
	if base == 0 {
		now := time.Now()
		base = max(l.dir[0].peak(now), l.dir[1].peak(now))
		if base == 0 {
			base = slowBase
		}
	}
	l.slowRate = max(int64(float64(base)*fraction), 1)
	l.slowUntil = until(d)
	l.mu.Unlock()
}

// Cut resets every open connection and, for d (until Heal when d is 0),
// resets each new one as soon as it is accepted.
func (l *Link) Cut(d time.Duration) {
	l.mu.Lock()
	l.cut = until(d)
	l.mu.Unlock()
	l.Reset()
}

// Heal ends every fault now: blackhole, slow and cut. Connections a
// blackhole made half-open stay so.
func (l *Link) Heal() {
	l.mu.Lock()
	l.blackhole, l.cut, l.slowUntil = time.Time{}, time.Time{}, time.Time{}
	l.mu.Unlock()
}

// Faulty reports whether a blackhole, slow or cut is in force.
func (l *Link) Faulty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	return active(l.blackhole, now) || active(l.cut, now) || active(l.slowUntil, now)
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	n := int64(len(l.conns))
	l.mu.Unlock()
	return Stats{
		Up: l.dir[0].bytes.Load(), Down: l.dir[1].bytes.Load(), Dropped: l.dropped.Load(),
		Accepted: l.accepted.Load(), Active: n, Resets: l.resets.Load(),
	}
}

// Close stops accepting, resets every connection and waits for the link's
// goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	err := l.ln.Close()
	l.Reset()
	l.wg.Wait()
	return err
}

func until(d time.Duration) time.Time {
	if d <= 0 {
		return time.Unix(1<<62, 0) // until Heal
	}
	return time.Now().Add(d)
}

func active(t, now time.Time) bool { return !t.IsZero() && now.Before(t) }

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: keep serving.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.accepted.Add(1)
		l.mu.Lock()
		now := time.Now()
		closed, cut, dead := l.closed, active(l.cut, now), active(l.blackhole, now)
		l.mu.Unlock()
		if closed || cut {
			l.resets.Add(1)
			resetConn(nc)
			continue
		}
		c := &conn{link: l, client: nc, done: make(chan struct{})}
		c.dead.Store(dead)
		l.mu.Lock()
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go c.run()
	}
}

// shape is what a direction's writer needs to know about the link now.
func (l *Link) shape(now time.Time) (delay, jitter time.Duration, rate int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rate = l.bandwidth
	if active(l.slowUntil, now) && (rate == 0 || l.slowRate < rate) {
		rate = l.slowRate
	}
	return l.delay, l.jitter, rate
}

// direction is what one direction of a link shares across connections:
// its byte count, its pacing (the bandwidth limit is per link) and its
// throughput history (for Slow).
type direction struct {
	bytes atomic.Int64
	mu    sync.Mutex
	next  time.Time // pacing: when the link is free again
	meter meter
}

// reserve books n bytes at rate and returns when they may be sent.
func (d *direction) reserve(n int, rate int64, now time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := now
	if d.next.After(at) {
		at = d.next
	}
	d.next = at.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	return at
}

func (d *direction) count(n int, now time.Time) {
	d.bytes.Add(int64(n))
	d.mu.Lock()
	d.meter.add(n, now)
	d.mu.Unlock()
}

// meter keeps bytes per second for the last minute. Guarded by its
// direction's mu.
type meter struct {
	sec   [60]int64 // unix second of each slot
	bytes [60]int64
}

func (m *meter) add(n int, now time.Time) {
	s := now.Unix()
	i := s % 60
	if m.sec[i] != s {
		m.sec[i], m.bytes[i] = s, 0
	}
	m.bytes[i] += int64(n)
}

// peak is the highest one-second count in the last minute.
func (m *meter) peak(now time.Time) int64 {
	var p int64
	for i := range m.sec {
		if now.Unix()-m.sec[i] < 60 {
			p = max(p, m.bytes[i])
		}
	}
	return p
}

func (d *direction) peak(now time.Time) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.meter.peak(now)
}

// conn is one proxied connection: two pumps (client to upstream, upstream
// to client), each a reader and a writer joined by a bounded queue.
type conn struct {
	link             *Link
	client, upstream net.Conn
	dead             atomic.Bool // half-open: drop everything, pass on no close
	done             chan struct{}
	once             sync.Once
	mu               sync.Mutex // guards upstream, set while pumps may be reset
}

type chunk struct {
	b   []byte
	at  time.Time // due
	eof bool
}

func (c *conn) run() {
	l := c.link
	defer l.wg.Done()
	defer func() {
		c.abort()
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
	}()
	if !c.dead.Load() {
		up, err := net.DialTimeout("tcp", l.upstream, 10*time.Second)
		if err != nil {
			// The other side refuses: so does the link.
			l.resets.Add(1)
			return
		}
		c.mu.Lock()
		c.upstream = up
		c.mu.Unlock()
		select {
		case <-c.done: // reset while dialling
			resetConn(up)
			return
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.pump(c.client, c.upstream, l.dir[0]) }()
	go func() { defer wg.Done(); c.pump(c.upstream, c.client, l.dir[1]) }()
	wg.Wait()
}

// abort resets both sockets and stops the pumps; idempotent.
func (c *conn) abort() {
	c.once.Do(func() {
		close(c.done)
		resetConn(c.client)
		c.mu.Lock()
		up := c.upstream
		c.mu.Unlock()
		if up != nil {
			resetConn(up)
		}
	})
}

// resetConn closes nc with SO_LINGER 0, so the peer gets a RST.
func resetConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// pump copies src to dst through the link's shaping. A nil upstream is a
// connection that was dead when accepted: its client's bytes only drain.
func (c *conn) pump(src, dst net.Conn, dir *direction) {
	if src == nil {
		return
	}
	q := make(chan chunk, queueChunks)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.write(q, dst, dir) }()
	c.read(src, q)
	wg.Wait()
}

// read fills q from src, stamping each chunk with its due time.
func (c *conn) read(src net.Conn, q chan<- chunk) {
	defer close(q)
	var last time.Time
	for {
		b := make([]byte, chunkSize)
		n, err := src.Read(b)
		if n > 0 {
			if c.dead.Load() {
				c.link.dropped.Add(int64(n))
			} else {
				now := time.Now()
				delay, jitter, _ := c.link.shape(now)
				at := now.Add(delay)
				if jitter > 0 {
					at = at.Add(time.Duration(rand.Int64N(int64(2*jitter+1))) - jitter)
				}
				if at.Before(last) {
					at = last // a stream does not reorder
				}
				last = at
				select {
				case q <- chunk{b: b[:n], at: at}:
				case <-c.done:
					return
				}
			}
		}
		if err != nil {
			if c.dead.Load() {
				// A half-open connection passes on no close; wait until
				// the link resets it or the other end closes too.
				return
			}
			if errors.Is(err, io.EOF) {
				select {
				case q <- chunk{eof: true, at: last}:
				case <-c.done:
				}
				return
			}
			select {
			case <-c.done: // aborted here
			default:
				c.link.resets.Add(1)
				c.abort() // a reset or error passes on as a reset
			}
			return
		}
	}
}

// write delivers q's chunks to dst when due and as the bandwidth allows.
func (c *conn) write(q <-chan chunk, dst net.Conn, dir *direction) {
	for ch := range q {
		if !c.wait(ch.at) {
			return
		}
		if c.dead.Load() {
			if !ch.eof {
				c.link.dropped.Add(int64(len(ch.b)))
			}
			continue
		}
		if ch.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			} else {
				_ = dst.Close()
			}
			continue
		}
		b := ch.b
		for len(b) > 0 {
			now := time.Now()
			_, _, rate := c.link.shape(now)
			n := len(b)
			if rate > 0 {
				// Pieces of at most 20 ms at the rate keep the pace smooth.
				n = min(n, max(int(rate/50), 1))
				if !c.wait(dir.reserve(n, rate, now)) {
					return
				}
			}
			if c.dead.Load() {
				c.link.dropped.Add(int64(len(b)))
				break
			}
			// Counted before the write, so a reader that got the bytes
			// sees them counted.
			dir.count(n, time.Now())
			if _, err := dst.Write(b[:n]); err != nil {
				select {
				case <-c.done:
				default:
					c.link.resets.Add(1)
					c.abort()
				}
				return
			}
			b = b[n:]
		}
	}
}

// wait sleeps until t; false if the connection was aborted meanwhile.
func (c *conn) wait(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-c.done:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-c.done:
		return false
	}
}

// Links are several links faulted together, such as a cluster's binary
// protocol and admin ports.
type Links []*Link

// SetLatency sets every link's latency (see Link.SetLatency).
func (ls Links) SetLatency(delay, jitter time.Duration) {
	for _, l := range ls {
		l.SetLatency(delay, jitter)
	}
}

// SetBandwidth sets every link's bandwidth (see Link.SetBandwidth).
func (ls Links) SetBandwidth(bytesPerSecond int64) {
	for _, l := range ls {
		l.SetBandwidth(bytesPerSecond)
	}
}

// Reset resets every link's connections and returns how many there were.
func (ls Links) Reset() int {
	n := 0
	for _, l := range ls {
		n += l.Reset()
	}
	return n
}

// Blackhole blackholes every link (see Link.Blackhole).
func (ls Links) Blackhole(d time.Duration) {
	for _, l := range ls {
		l.Blackhole(d)
	}
}

// Slow slows every link (see Link.Slow).
func (ls Links) Slow(fraction float64, d time.Duration) {
	for _, l := range ls {
		l.Slow(fraction, d)
	}
}

// Cut cuts every link (see Link.Cut).
func (ls Links) Cut(d time.Duration) {
	for _, l := range ls {
		l.Cut(d)
	}
}

// Heal heals every link.
func (ls Links) Heal() {
	for _, l := range ls {
		l.Heal()
	}
}

// Stats sums the links' counters.
func (ls Links) Stats() Stats {
	var s Stats
	for _, l := range ls {
		x := l.Stats()
		s.Up += x.Up
		s.Down += x.Down
		s.Dropped += x.Dropped
		s.Accepted += x.Accepted
		s.Active += x.Active
		s.Resets += x.Resets
	}
	return s
}

// Close closes every link; errors joined.
func (ls Links) Close() error {
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}
