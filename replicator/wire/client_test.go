package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
)

// TestNewClientDefaults: an operation timeout that is not positive is
// the default 30 s; connections log to the client's logger unless given
// their own.
func TestNewClientDefaults(t *testing.T) {
	own, connLog := zap.NewExample(), zap.NewExample()
	for _, tt := range []struct {
		name        string
		opts        ClientOptions
		wantTimeout time.Duration
		wantConnLog *zap.Logger
	}{
		{"zero timeout", ClientOptions{Logger: own}, 30 * time.Second, own},
		{"negative timeout", ClientOptions{OperationTimeout: -time.Second, Logger: own}, 30 * time.Second, own},
		{"timeout given", ClientOptions{OperationTimeout: 5 * time.Second, Logger: own}, 5 * time.Second, own},
		{"connection logger given", ClientOptions{Logger: own, Conn: ConnOptions{Logger: connLog}}, 30 * time.Second, connLog},
	} {
		tt.opts.ServiceURL = "pulsar://a:6650"
		c, err := NewClient(tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if c.opts.OperationTimeout != tt.wantTimeout {
			t.Errorf("%s: operation timeout %s, want %s", tt.name, c.opts.OperationTimeout, tt.wantTimeout)
		}
		if c.opts.Conn.Logger != tt.wantConnLog {
			t.Errorf("%s: connections log elsewhere", tt.name)
		}
	}
}

// TestClientCloseClosesConnections: Close closes the pooled connections.
func TestClientCloseClosesConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFakeMemBroker(t)
		c := newTestClient(t, b.url(), ConnOptions{dial: b.dial})
		conn, err := c.Conn(context.Background(), c.serviceBroker())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		select {
		case <-conn.Done():
		default:
			t.Fatal("a pooled connection is open after Close")
		}
		if _, err := c.Conn(context.Background(), c.serviceBroker()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Conn after Close: %v, want ErrClosed", err)
		}
	})
}

// TestBrokerFor: a lookup answer's broker URL (the TLS one on a TLS
// client) names the broker; through a proxy the service URL's host is
// dialled; an answer without a usable URL is an error.
func TestBrokerFor(t *testing.T) {
	for _, tt := range []struct {
		name    string
		tls     bool
		r       LookupResponse
		want    Broker
		wantErr bool
	}{
		{name: "plain", r: LookupResponse{BrokerServiceURL: "pulsar://b1:6650", BrokerServiceURLTLS: "pulsar+ssl://b1:6651"}, want: Broker{"b1:6650", "b1:6650"}},
		{name: "tls", tls: true, r: LookupResponse{BrokerServiceURL: "pulsar://b1:6650", BrokerServiceURLTLS: "pulsar+ssl://b1:6651"}, want: Broker{"b1:6651", "b1:6651"}},
		{name: "through the proxy", r: LookupResponse{BrokerServiceURL: "pulsar://b1:6650", ProxyThroughServiceURL: true}, want: Broker{"b1:6650", "svc:6650"}},
		{name: "no URL", tls: true, r: LookupResponse{BrokerServiceURL: "pulsar://b1:6650"}, wantErr: true},
		{name: "no host", r: LookupResponse{BrokerServiceURL: "pulsar://"}, wantErr: true},
		{name: "unparsable", r: LookupResponse{BrokerServiceURL: "pulsar://b1:66\x7f50"}, wantErr: true},
	} {
		c := &Client{services: []string{"svc:6650"}, tls: tt.tls}
		got, err := c.brokerFor(&tt.r)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v, error %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestServiceHostsTriedInTurn: the next service URL host is tried only
// when one cannot be reached: not when it answers with an error, nor
// when the caller gave up, nor when its certificate is refused (which
// the next would not change).
func TestServiceHostsTriedInTurn(t *testing.T) {
	refused := &scriptedPeer{script: func(nc net.Conn) {
		if _, err := readCommand(nc); err == nil {
			writeCommand(nc, &Error{Error: ServiceNotReady, Message: "not ready"})
		}
	}}
	certErr := &ConnError{Addr: "a:6650", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
	for _, tt := range []struct {
		name      string
		first     func(ctx context.Context) (net.Conn, error)
		cancelled bool
		wantDials int // of the second host
	}{
		{"unreachable", func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") }, false, 1},
		{"answers with an error", func(ctx context.Context) (net.Conn, error) { return refused.dial(ctx, "") }, false, 0},
		{"caller gave up", func(ctx context.Context) (net.Conn, error) { return nil, ctx.Err() }, true, 0},
		{"certificate refused", func(context.Context) (net.Conn, error) { return nil, certErr }, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeMemBroker(t)
			var first, second atomic.Int32
			dial := func(ctx context.Context, addr string) (net.Conn, error) {
				if addr == "a:6650" {
					first.Add(1)
					return tt.first(ctx)
				}
				second.Add(1)
				return b.dial(ctx, addr)
			}
			c := newTestClient(t, "pulsar://a:6650,"+b.addr, ConnOptions{dial: dial})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			_, err := c.PartitionedMetadata(ctx, "t")
			if n := first.Load(); n != 1 {
				t.Fatalf("first host dialled %d times, want once", n)
			}
			if n := int(second.Load()); n != tt.wantDials {
				t.Fatalf("second host dialled %d times, want %d (first: %v)", n, tt.wantDials, err)
			}
			if (err == nil) != (tt.wantDials > 0) {
				t.Fatalf("partitioned metadata: %v", err)
			}
		})
	}
	refused.wg.Wait()
}

// TestBackoff: attempt n waits between half and all of 100 ms x 2^n,
// capped at maxBackoff.
func TestBackoff(t *testing.T) {
	for attempt, limit := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, maxBackoff, maxBackoff, maxBackoff} {
		t.Run(fmt.Sprint(attempt), func(t *testing.T) {
			lo, hi := limit, time.Duration(0)
			for range 2000 {
				d := backoff(attempt)
				lo, hi = min(lo, d), max(hi, d)
			}
			if lo < limit/2 || hi > limit {
				t.Fatalf("backoff(%d) between %s and %s, want within [%s, %s]", attempt, lo, hi, limit/2, limit)
			}
			// Jitter: the waits spread over the range.
			if hi-lo < limit/4 {
				t.Fatalf("backoff(%d) between %s and %s: no jitter", attempt, lo, hi)
			}
		})
	}
	if d := backoff(100); d > maxBackoff {
		t.Fatalf("backoff(100) %s, want at most %s", d, maxBackoff)
	}
}

// TestIsRetryable: lost connections and broker errors that may pass are
// worth retrying; terminal broker errors and refused certificates (the
// configuration must change) are not.
func TestIsRetryable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&ConnError{Addr: "a", Err: errors.New("reset")}, true},
		{fmt.Errorf("lookup: %w", &BrokerError{Code: ServiceNotReady}), true},
		{&BrokerError{Code: AuthorizationError}, false},
		{&ConnError{Addr: "a", Err: &tls.CertificateVerificationError{Err: errors.New("expired")}}, false},
		{&ConnError{Addr: "a", Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "b"}}, false},
		{&ConnError{Addr: "a", Err: x509.UnknownAuthorityError{}}, false},
	} {
		if got := IsRetryable(tt.err); got != tt.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
