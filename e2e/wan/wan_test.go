package wan

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// echo is a local echo server; it returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func link(t *testing.T) *Link {
	t.Helper()
	l, err := Listen("test", "127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, l *Link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back, returning how long it took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs")
	}
	return time.Since(start)
}

// silent reports whether nothing (no byte, no close) arrives on c within d.
func silent(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n == 0 && errors.As(err, &ne) && ne.Timeout()
}

// broken reports whether c ends (reset or closed) within d.
func broken(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, _ = c.Write([]byte("x"))
	for {
		_, err := c.Read(make([]byte, 64))
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

func TestForwardsAndCounts(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	msg := bytes.Repeat([]byte("geo"), 100_000)
	roundTrip(t, c, msg)
	s := l.Stats()
	if s.Up != int64(len(msg)) || s.Down != int64(len(msg)) || s.Accepted != 1 || s.Active != 1 {
		t.Fatalf("stats %+v, want %d bytes each way on one connection", s, len(msg))
	}
	// A half-close passes through: the echo server sees EOF and closes.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after half-close read %d, %v; want EOF", n, err)
	}
}

func TestLatencyAndJitter(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	base := roundTrip(t, c, []byte("ping"))
	l.SetLatency(40*time.Millisecond, 10*time.Millisecond)
	for range 5 {
		rtt := roundTrip(t, c, []byte("ping"))
		// Two directions of 40 ms each, minus at most 10 ms jitter each.
		if rtt < 60*time.Millisecond || rtt > 500*time.Millisecond {
			t.Fatalf("round trip %s with 40±10 ms each way (before: %s)", rtt, base)
		}
	}
	// Many small writes arrive whole and in order despite the jitter.
	var want bytes.Buffer
	for i := range 200 {
		want.WriteString(time.Duration(i).String())
	}
	go func() {
		b := want.Bytes()
		for len(b) > 0 {
			n := min(len(b), 7)
			_, _ = c.Write(b[:n])
			b = b[n:]
		}
	}()
	got := make([]byte, want.Len())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("stream changed by jitter: %v", err)
	}
	l.SetLatency(0, 0)
	if rtt := roundTrip(t, c, []byte("ping")); rtt > 40*time.Millisecond {
		t.Fatalf("round trip %s after the latency was removed", rtt)
	}
}

func TestBandwidth(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	l.SetBandwidth(200_000)
	// 100 kB each way at 200 kB/s per direction: about 0.5 s (the two
	// directions overlap).
	took := roundTrip(t, c, make([]byte, 100_000))
	if took < 400*time.Millisecond || took > 3*time.Second {
		t.Fatalf("100 kB at 200 kB/s took %s", took)
	}
	l.SetBandwidth(0)
	if took := roundTrip(t, c, make([]byte, 1_000_000)); took > time.Second {
		t.Fatalf("1 MB unlimited took %s", took)
	}
}

func TestSlow(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	l.SetBandwidth(1_000_000)
	l.Slow(0.01, 0) // 10 kB/s
	start := time.Now()
	roundTrip(t, c, make([]byte, 5_000))
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("5 kB at 1%% of 1 MB/s took %s", took)
	}
	if !l.Faulty() {
		t.Fatal("not faulty while slow")
	}
	l.Heal()
	if took := roundTrip(t, c, make([]byte, 100_000)); took > time.Second {
		t.Fatalf("100 kB after heal took %s", took)
	}
	// Without a limit, Slow scales the throughput seen.
	l.SetBandwidth(0)
	roundTrip(t, c, make([]byte, 2_000_000))
	l.Slow(0.01, 300*time.Millisecond)
	l.mu.Lock()
	rate := l.slowRate
	l.mu.Unlock()
	if rate < 10_000 {
		t.Fatalf("1%% of a link that carried 2 MB in a second is %d B/s", rate)
	}
	time.Sleep(350 * time.Millisecond)
	if l.Faulty() {
		t.Fatal("slow did not end after its duration")
	}
}

func TestReset(t *testing.T) {
	l := link(t)
	a, b := dial(t, l), dial(t, l)
	roundTrip(t, a, []byte("a"))
	roundTrip(t, b, []byte("b"))
	if n := l.Reset(); n != 2 {
		t.Fatalf("reset %d connections, want 2", n)
	}
	for _, c := range []net.Conn{a, b} {
		if !broken(c, 2*time.Second) {
			t.Fatal("connection survived a reset")
		}
	}
	roundTrip(t, dial(t, l), []byte("after"))
}

func TestBlackhole(t *testing.T) {
	l := link(t)
	old := dial(t, l)
	roundTrip(t, old, []byte("before"))
	l.Blackhole(400 * time.Millisecond)
	if _, err := old.Write([]byte("lost")); err != nil {
		t.Fatalf("write into a blackhole failed: %v (it must look fine)", err)
	}
	if !silent(old, 200*time.Millisecond) {
		t.Fatal("a blackholed connection answered or closed")
	}
	during := dial(t, l) // accepted, then nothing
	_, _ = during.Write([]byte("hello?"))
	if !silent(during, 200*time.Millisecond) {
		t.Fatal("a connection made during the blackhole answered or closed")
	}
	time.Sleep(100 * time.Millisecond)
	if l.Faulty() {
		t.Fatal("blackhole did not end")
	}
	// The old connections stay half-open for ever; new ones work.
	_, _ = old.Write([]byte("still lost"))
	if !silent(old, 200*time.Millisecond) {
		t.Fatal("a half-open connection came back")
	}
	roundTrip(t, dial(t, l), []byte("after"))
	if s := l.Stats(); s.Dropped < int64(len("loststill losthello?")) {
		t.Fatalf("dropped %d bytes", s.Dropped)
	}
	// Closing one end of a half-open connection tells the other nothing.
	old.Close()
	time.Sleep(50 * time.Millisecond)
	if s := l.Stats(); s.Active < 2 {
		t.Fatalf("%d active connections: the half-open ones were closed", s.Active)
	}
}

func TestCut(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	roundTrip(t, c, []byte("before"))
	l.Cut(300 * time.Millisecond)
	if !broken(c, 2*time.Second) {
		t.Fatal("connection survived the cut")
	}
	if c2, err := net.Dial("tcp", l.Addr()); err == nil {
		if !broken(c2, 2*time.Second) {
			t.Fatal("a connection made during the cut worked")
		}
		c2.Close()
	}
	time.Sleep(350 * time.Millisecond)
	roundTrip(t, dial(t, l), []byte("after"))
	// Heal ends a cut at once.
	l.Cut(0)
	l.Heal()
	roundTrip(t, dial(t, l), []byte("healed"))
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	l, err := Listen("down", "127.0.0.1:0", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		return // reset before the dial returned
	}
	defer c.Close()
	if !broken(c, 2*time.Second) {
		t.Fatal("a connection to a refusing upstream stayed open")
	}
}

func TestCloseEndsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	up := echo(t)
	ls := Links{}
	for range 2 {
		l, err := Listen("x", "127.0.0.1:0", up)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		t.Cleanup(func() { l.Close() }) // before the echo server's cleanup
	}
	ls.SetLatency(5*time.Millisecond, time.Millisecond)
	var conns []net.Conn
	for _, l := range ls {
		c, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		roundTrip(t, c, []byte("x"))
	}
	ls.Blackhole(0)
	if s := ls.Stats(); s.Accepted != 2 || s.Up != 2 || s.Down != 2 {
		t.Fatalf("stats %+v", s)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+4 && time.Now().Before(deadline) { // the echo server's
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+4 {
		t.Fatalf("%d goroutines after Close, %d before", n, before)
	}
}

// TestFaultsUnderTraffic races every fault against clients that keep
// connecting and echoing (for -race); afterwards the link still works.
func TestFaultsUnderTraffic(t *testing.T) {
	l := link(t)
	l.SetLatency(time.Millisecond, time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", l.Addr())
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
				for range 10 {
					if _, err := c.Write(make([]byte, 4096)); err != nil {
						break
					}
					if _, err := io.ReadFull(c, make([]byte, 4096)); err != nil {
						break
					}
				}
				c.Close()
			}
		}()
	}
	for range 5 {
		time.Sleep(20 * time.Millisecond)
		l.Reset()
		l.Blackhole(20 * time.Millisecond)
		l.Slow(0.5, 20*time.Millisecond)
		l.SetBandwidth(10 << 20)
		l.Cut(20 * time.Millisecond)
		time.Sleep(30 * time.Millisecond)
		l.SetBandwidth(0)
		l.Heal()
	}
	close(stop)
	wg.Wait()
	roundTrip(t, dial(t, l), []byte("still works"))
}
