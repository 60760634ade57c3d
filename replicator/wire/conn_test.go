package wire

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedPeer is a broker for the handshake tests: each connection
// dialled through dial is served by script, which reads and writes the
// broker's end of an in-memory pipe.
type scriptedPeer struct {
	script func(nc net.Conn)
	wg     sync.WaitGroup
}

func (p *scriptedPeer) dial(_ context.Context, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	p.wg.Go(func() {
		defer server.Close()
		p.script(server)
	})
	return client, nil
}

// readCommand reads one frame from nc and decodes its command.
func readCommand(nc net.Conn) (Command, error) {
	f, _, err := ReadFrame(nc, nil, 1<<20)
	if err != nil {
		return Command{}, err
	}
	return DecodeCommand(f.Command)
}

func writeCommand(nc net.Conn, body Body) {
	nc.Write(AppendFrame(nil, AppendCommand(nil, body)))
}

// TestHandshake: CONNECT announces the client version (a default when
// none is given); CONNECTED's max_message_size sets the limit (the
// broker default when left out); AUTH_CHALLENGE rounds are answered, but
// not for ever; a broker's refusal is its error, and no connect failure
// of the link.
func TestHandshake(t *testing.T) {
	challenge := &AuthChallenge{ServerVersion: "s", Challenge: AuthData{MethodName: "none"}, ProtocolVersion: ProtocolVersion}
	for _, tt := range []struct {
		name       string
		version    string
		challenges int // AUTH_CHALLENGEs before CONNECTED
		connected  *Connected
		refused    bool
		answer     []byte // raw bytes instead (nil: none; the peer closes)
		logical    string // the broker a proxy is asked to forward to
		// What the client does.
		wantVersion   string
		wantMax       int
		wantResponses int
		wantErr       string
		wantFailed    int32 // connect failures counted
		wantProxyTo   string
	}{
		{name: "default client version", connected: &Connected{ServerVersion: "b", MaxMessageSize: 1 << 20},
			wantVersion: "geo-sidecar-wire", wantMax: 1 << 20},
		{name: "client version given", version: "v9", connected: &Connected{ServerVersion: "b", MaxMessageSize: 1 << 20},
			wantVersion: "v9", wantMax: 1 << 20},
		{name: "max message size left out", connected: &Connected{ServerVersion: "b"},
			wantVersion: "geo-sidecar-wire", wantMax: DefaultMaxMessageSize},
		{name: "auth challenges answered", challenges: 3, connected: &Connected{ServerVersion: "b"},
			wantVersion: "geo-sidecar-wire", wantMax: DefaultMaxMessageSize, wantResponses: 3},
		{name: "auth challenges without end", challenges: 50, connected: &Connected{ServerVersion: "b"},
			wantVersion: "geo-sidecar-wire", wantResponses: 11, wantErr: "too many auth challenges", wantFailed: 1},
		{name: "refused by the broker", refused: true,
			wantVersion: "geo-sidecar-wire", wantErr: "bad token"},
		{name: "through a proxy", logical: "broker-2:6650", connected: &Connected{ServerVersion: "b"},
			wantVersion: "geo-sidecar-wire", wantMax: DefaultMaxMessageSize, wantProxyTo: "broker-2:6650"},
		{name: "closed in the handshake",
			wantVersion: "geo-sidecar-wire", wantErr: "handshake: EOF", wantFailed: 1},
		{name: "garbage in the handshake", answer: AppendFrame(nil, []byte{0x80}),
			wantVersion: "geo-sidecar-wire", wantErr: "malformed", wantFailed: 1},
		{name: "another command than CONNECTED", answer: AppendFrame(nil, AppendCommand(nil, &Pong{})),
			wantVersion: "geo-sidecar-wire", wantErr: "unexpected PONG", wantFailed: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var connect *Connect
			responses := 0
			peer := &scriptedPeer{script: func(nc net.Conn) {
				cmd, err := readCommand(nc)
				if err != nil {
					return
				}
				mu.Lock()
				connect, _ = cmd.Body.(*Connect)
				mu.Unlock()
				if tt.refused {
					writeCommand(nc, &Error{Error: AuthenticationError, Message: "bad token"})
					return
				}
				if tt.connected == nil {
					nc.Write(tt.answer)
					return
				}
				for range tt.challenges {
					writeCommand(nc, challenge)
					cmd, err := readCommand(nc)
					if err != nil {
						return
					}
					if _, ok := cmd.Body.(*AuthResponse); !ok {
						t.Errorf("answer to AUTH_CHALLENGE: %v", cmd.Type)
						return
					}
					mu.Lock()
					responses++
					mu.Unlock()
				}
				writeCommand(nc, tt.connected)
				readCommand(nc) // until the client closes
			}}
			var failed atomic.Int32
			logical := tt.logical
			if logical == "" {
				logical = "b:6650"
			}
			c, err := Dial(context.Background(), logical, "b:6650", false, ConnOptions{
				ClientVersion: tt.version, dial: peer.dial, Events: Events{ConnectFailed: func() { failed.Add(1) }}})
			if err == nil {
				if got := c.MaxMessageSize(); got != tt.wantMax {
					t.Errorf("MaxMessageSize %d, want %d", got, tt.wantMax)
				}
				c.Close()
			}
			peer.wg.Wait()
			if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Dial: %v, want error %q", err, tt.wantErr)
			}
			mu.Lock()
			defer mu.Unlock()
			if connect == nil || connect.ClientVersion != tt.wantVersion {
				t.Errorf("CONNECT %+v, want client version %q", connect, tt.wantVersion)
			}
			if responses != tt.wantResponses {
				t.Errorf("%d AUTH_RESPONSEs, want %d", responses, tt.wantResponses)
			}
			if n := failed.Load(); n != tt.wantFailed {
				t.Errorf("%d connect failures counted, want %d", n, tt.wantFailed)
			}
			if connect != nil && connect.ProxyToBrokerURL != tt.wantProxyTo {
				t.Errorf("CONNECT asks the proxy for %q, want %q", connect.ProxyToBrokerURL, tt.wantProxyTo)
			}
			var ce *ConnError
			if tt.wantFailed > 0 && !errors.As(err, &ce) {
				t.Errorf("Dial: %v, want a ConnError (retryable)", err)
			}
		})
	}
}

// TestCheckSize: a SEND frame of exactly the connection's limit goes out;
// one byte more is ErrTooLarge.
func TestCheckSize(t *testing.T) {
	md := testMetadata(1)
	limit := PayloadFrameSize(0, len(md), 1000)
	if err := checkSize(md, make([]byte, 1000), limit); err != nil {
		t.Errorf("an entry of exactly the limit: %v", err)
	}
	if err := checkSize(md, make([]byte, 1001), limit); !errors.Is(err, ErrTooLarge) {
		t.Errorf("an entry a byte beyond the limit: %v, want ErrTooLarge", err)
	}
	// The error names the broker's limit, its max_message_size.
	err := checkSize(md, make([]byte, 1<<16+framePadding), 1<<16+framePadding)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "limit 65536") {
		t.Errorf("an entry beyond a 64 KiB limit: %v, want ErrTooLarge naming the limit", err)
	}
}

// TestWriteQueueReset: a write queue keeps its buffer for the next batch,
// unless it grew beyond 1 MiB (a burst must not pin memory).
func TestWriteQueueReset(t *testing.T) {
	for _, tt := range []struct {
		capacity int
		kept     bool
	}{
		{64 << 10, true},
		{1 << 20, true},
		{1<<20 + 1, false},
	} {
		q := writeQueue{buf: make([]byte, 10, tt.capacity)}
		q.seal()
		q.ref([]byte("payload"))
		q.reset()
		if len(q.segs) != 0 || len(q.buf) != 0 || q.cut != 0 {
			t.Errorf("capacity %d: not empty after reset: %d segments, %d bytes, cut %d", tt.capacity, len(q.segs), len(q.buf), q.cut)
		}
		if kept := cap(q.buf) == tt.capacity; kept != tt.kept {
			t.Errorf("capacity %d: buffer kept %v, want %v", tt.capacity, kept, tt.kept)
		}
	}
}

// TestWriteQueueLater: a frame queued by writeLater goes out where it
// was queued, encoded when the queue goes out, between what was queued
// before and after it; one that encodes nothing leaves no gap.
func TestWriteQueueLater(t *testing.T) {
	var q writeQueue
	q.buf = append(q.buf, "before "...)
	q.keep(func(b []byte) []byte { return append(b, "later "...) })
	q.buf = append(q.buf, "after "...)
	q.ref([]byte("payload "))
	q.keep(func(b []byte) []byte { return b })
	q.buf = append(q.buf, "end"...)
	q.seal()
	q.fillLater()
	var got []byte
	for _, s := range q.segs {
		got = append(got, s...)
	}
	if want := "before later after payload end"; string(got) != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	q.reset()
	if len(q.later) != 0 {
		t.Fatalf("%d frames of writeLater left after reset", len(q.later))
	}
}

// TestLargeSendAloneGoesOut: a SEND whose payload is written from where it
// lies (a segment of its own), with nothing queued after it, goes out at
// once: not with the next frame, which on an idle producer is the next
// ping.
func TestLargeSendAloneGoesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: time.Hour})
		p, _, _ := memProducer(t, b, c, ProducerOptions{Topic: "t", Name: "n"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		payload := bytes.Repeat([]byte{7}, refAbove+1)
		if err := p.Send(ctx, Outgoing{Metadata: testMetadata(1), Payload: payload, SequenceID: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatalf("a large SEND alone not confirmed within a second: %v", err)
		}
	})
}

// TestKeepAliveSchedule, on the bubble's clock, with checks every
// KeepAlive/8: pings go every KeepAlive/2; a connection that heard
// nothing for 3/4 KeepAlive is silent (its consumers and producers are
// told the link is down, and up again when it speaks); one that heard
// nothing for KeepAlive is closed, at the check when it is due.
func TestKeepAliveSchedule(t *testing.T) {
	const k = 800 * time.Millisecond // checks every 100 ms
	t.Run("pings", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newFakeMemBroker(t)
			c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: k})
			if _, err := c.Conn(context.Background(), c.serviceBroker()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2*k + k/4) // pings at k/2, k, 3k/2, 2k
			if n := len(b.commands(TypePing)); n != 4 {
				t.Fatalf("%d PINGs in 2.25 keep-alive times, want 4 (one every half)", n)
			}
		})
	})
	t.Run("closed when due", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newFakeMemBroker(t)
			b.set(func() { b.silent = true })
			c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: k})
			conn, err := c.Conn(context.Background(), c.serviceBroker())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now() // CONNECTED, the last byte heard
			<-conn.Done()
			if after := time.Since(start); after != k {
				t.Fatalf("closed %s after the last byte, want at the check %s after it", after, k)
			}
		})
	})
	for _, kind := range []string{"consumer", "producer"} {
		t.Run("silence told to a "+kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newFakeMemBroker(t)
				b.set(func() { b.silent = true })
				c := newTestClient(t, b.url(), ConnOptions{dial: b.dial, KeepAlive: k})
				var mu sync.Mutex
				var told []bool
				var at []time.Duration
				start := time.Now()
				onLink := func(up bool) {
					mu.Lock()
					told, at = append(told, up), append(at, time.Since(start))
					mu.Unlock()
				}
				var fc *fakeConn
				if kind == "consumer" {
					_, fc, _ = memSubscribe(t, b, c, ConsumerOptions{Topic: "t", Subscription: "s", OnLinkChange: onLink})
				} else {
					_, fc, _ = memProducer(t, b, c, ProducerOptions{Topic: "t", Name: "n", OnLinkChange: onLink})
				}
				time.Sleep(k*3/4 + k/20) // silent since 3k/4
				fc.send(&Pong{})         // the broker speaks again
				time.Sleep(k / 4)
				mu.Lock()
				defer mu.Unlock()
				if want := []bool{true, false, true}; !slices.Equal(told, want) {
					t.Fatalf("OnLinkChange told %v, want %v", told, want)
				}
				if want := []time.Duration{0, k * 3 / 4, k*3/4 + k/8}; !slices.Equal(at, want) {
					t.Errorf("OnLinkChange told at %v, want %v (silent at the check 3/4 keep-alive after the last byte, up at the next)", at, want)
				}
			})
		})
	}
}
