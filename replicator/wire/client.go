package wire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ClientOptions configure a Client for one cluster.
type ClientOptions struct {
	// ServiceURL is the cluster's pulsar:// or pulsar+ssl:// URL, with one
	// host:port or several separated by commas (tried in turn when one
	// does not answer); a proxy or load balancer in front is fine.
	ServiceURL string
	// Conn configures every connection (auth, TLS, keep-alive).
	Conn ConnOptions
	// OperationTimeout bounds each lookup and each subscribe or producer
	// creation request. Default 30s.
	OperationTimeout time.Duration
	// MaxOpens bounds the subscribes and producer creations (first opens
	// and reconnects) in flight at once; the others wait their turn,
	// first come first served, before their OperationTimeout starts.
	// Default 64 (DefaultMaxOpens).
	MaxOpens int
	// Logger; default zap.NewNop().
	Logger *zap.Logger
}

// DefaultMaxOpens is ClientOptions.MaxOpens's default. A sidecar that
// starts (or reconnects) thousands of partitions at once would otherwise
// ask a broker for thousands of topic loads together, most of which it
// answers only after the timeout, so that each is asked again
// (docs/benchmark.md, History). 64 keeps a broker busy without a queue
// that outlasts the timeout.
const DefaultMaxOpens = 64

// maxBackoff caps the delay between reconnect attempts, so that a cluster
// that comes back is used again within seconds.
const maxBackoff = 5 * time.Second

// maxRedirects bounds a lookup's redirect chain.
const maxRedirects = 20

// Broker is where a topic is served: Logical is the broker's host:port,
// Physical the address to dial (the service URL's host when the cluster
// asks to go through its proxy).
type Broker struct {
	Logical, Physical string
}

// Client is the entry point for one cluster: a pool holding one
// connection per broker (shared by every consumer and producer) and a
// lookup cache. Safe for concurrent use.
type Client struct {
	opts     ClientOptions
	log      *zap.Logger
	services []string     // host:port of each service URL host
	next     atomic.Int32 // index of the service host in use
	tls      bool

	mu      sync.Mutex
	conns   map[Broker]*poolEntry
	lookups map[string]Broker
	closed  bool

	pmu       sync.Mutex
	producers map[*Producer]struct{} // open ones, for OldestUnconfirmed

	// opens holds a token per subscribe or producer creation in flight
	// (see ClientOptions.MaxOpens).
	opens chan struct{}

	// exiting is done once Exiting was called: closes of consumers and
	// producers stop waiting for the broker's replies.
	exiting     context.Context
	exitingDone context.CancelFunc
}

type poolEntry struct {
	ready chan struct{} // closed when conn or err is set
	conn  *Conn
	err   error
}

// NewClient validates opts; it connects lazily.
func NewClient(opts ClientOptions) (*Client, error) {
	hosts, useTLS, err := parseServiceURL(opts.ServiceURL)
	if err != nil {
		return nil, err
	}
	if opts.OperationTimeout <= 0 {
		opts.OperationTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MaxOpens <= 0 {
		opts.MaxOpens = DefaultMaxOpens
	}
	if opts.Conn.Logger == nil {
		opts.Conn.Logger = opts.Logger
	}
	exiting, exitingDone := context.WithCancel(context.Background())
	return &Client{
		exiting:     exiting,
		exitingDone: exitingDone,
		opts:        opts,
		log:         opts.Logger,
		services:    hosts,
		tls:         useTLS,
		conns:       make(map[Broker]*poolEntry),
		lookups:     make(map[string]Broker),
		producers:   make(map[*Producer]struct{}),
		opens:       make(chan struct{}, opts.MaxOpens),
	}, nil
}

// openTurn waits until fewer than MaxOpens subscribes or producer
// creations are in flight, and returns the function that ends this one's
// turn. Waiting ends early, with ctx's error, when ctx is done.
func (c *Client) openTurn(ctx context.Context) (done func(), err error) {
	select {
	case c.opens <- struct{}{}:
		return func() { <-c.opens }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// track adds an open producer (or removes a closed one).
func (c *Client) track(p *Producer, open bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if open {
		c.producers[p] = struct{}{}
	} else {
		delete(c.producers, p)
	}
}

// OldestUnconfirmed is how long the oldest entry handed to any open
// producer of this client has waited for its receipt (0 when none): on a
// cut or half-open link it grows with the time since the cluster last
// confirmed anything, while reconnects hide nothing. It visits every open
// producer: call it at a metrics scrape, not per entry.
func (c *Client) OldestUnconfirmed() time.Duration {
	c.pmu.Lock()
	ps := make([]*Producer, 0, len(c.producers))
	for p := range c.producers {
		ps = append(ps, p)
	}
	c.pmu.Unlock()
	var oldest time.Time
	for _, p := range ps {
		if t := p.oldestUnconfirmed(); !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest)
}

// parseServiceURL splits "pulsar://h1:p1,h2:p2" into host:port pairs,
// adding the default port (6650, or 6651 with TLS) where it is missing.
func parseServiceURL(raw string) (hosts []string, useTLS bool, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok:
		return nil, false, fmt.Errorf("wire: service URL %q: want pulsar://host:port or pulsar+ssl://host:port", raw)
	case scheme == "pulsar":
	case scheme == "pulsar+ssl":
		useTLS = true
	default:
		return nil, false, fmt.Errorf("wire: service URL %q: scheme must be pulsar or pulsar+ssl", raw)
	}
	rest, _, _ = strings.Cut(rest, "/")
	for _, h := range strings.Split(rest, ",") {
		if h == "" {
			return nil, false, fmt.Errorf("wire: service URL %q: empty host", raw)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			port := "6650"
			if useTLS {
				port = "6651"
			}
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		if _, err := url.Parse("pulsar://" + h); err != nil {
			return nil, false, fmt.Errorf("wire: service URL %q: host %q: %w", raw, h, err)
		}
		hosts = append(hosts, h)
	}
	return hosts, useTLS, nil
}

// Exiting tells the client that the process exits and Close follows:
// from now on a consumer's or producer's Close asks the broker to close it
// without waiting for the reply (a Close waiting already stops waiting),
// and the connections' close ends on the broker whatever it had not
// closed yet. Waiting for each reply, up to OperationTimeout each, made
// the stop of thousands of partitions outlast its grace period. Nothing
// is confirmed or acknowledged by it: a producer's entries still in
// flight fail with ErrClosed at its Close (and are sent again by the next
// run), and a consumer's unacknowledged entries are delivered again.
func (c *Client) Exiting() { c.exitingDone() }

// Close closes every connection. Consumers and producers should be closed
// first; those still open see their connection lost and stop reconnecting
// once the client is closed. A dial in progress is not waited for: its
// connection is closed as soon as it is up.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[Broker]*poolEntry{}
	c.mu.Unlock()
	for _, e := range conns {
		select {
		case <-e.ready:
			if e.conn != nil {
				e.conn.Close()
			}
		default: // still dialling: Conn closes it once it is up
		}
	}
	return nil
}

// Conn returns the pooled connection to b, dialling it if needed. Callers
// racing for the same broker share one dial.
func (c *Client) Conn(ctx context.Context, b Broker) (*Conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		e := c.conns[b]
		if e == nil {
			e = &poolEntry{ready: make(chan struct{})}
			c.conns[b] = e
			c.mu.Unlock()
			e.conn, e.err = Dial(ctx, b.Logical, b.Physical, c.tls, c.opts.Conn)
			close(e.ready)
			if e.err != nil {
				c.drop(b, e)
				return nil, e.err
			}
			if c.isClosed() {
				// Close ran while this dialled, and did not wait for it.
				e.conn.Close()
				return nil, ErrClosed
			}
			c.log.Debug("connected", zap.String("broker", b.Logical), zap.String("server_version", e.conn.ServerVersion()))
			return e.conn, nil
		}
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		select {
		case <-e.conn.Done():
			c.drop(b, e) // dead: dial again
			continue
		default:
			return e.conn, nil
		}
	}
}

func (c *Client) drop(b Broker, e *poolEntry) {
	c.mu.Lock()
	if c.conns[b] == e {
		delete(c.conns, b)
	}
	c.mu.Unlock()
}

// service is the service URL host in use.
func (c *Client) service() string { return c.services[int(c.next.Load())%len(c.services)] }

// serviceBroker is the service URL host in use as a broker address, for
// lookups.
func (c *Client) serviceBroker() Broker { s := c.service(); return Broker{Logical: s, Physical: s} }

// serviceConn returns a connection to one of the service URL's hosts,
// moving on to the next host when one cannot be reached.
func (c *Client) serviceConn(ctx context.Context) (*Conn, error) {
	var errs []error
	for range c.services {
		conn, err := c.Conn(ctx, c.serviceBroker())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		var ce *ConnError
		if !errors.As(err, &ce) || ctx.Err() != nil || !IsRetryable(err) {
			break
		}
		c.next.Add(1)
	}
	return nil, errors.Join(errs...)
}

// brokerFor turns a lookup answer into a Broker.
func (c *Client) brokerFor(r *LookupResponse) (Broker, error) {
	raw := r.BrokerServiceURL
	if c.tls {
		raw = r.BrokerServiceURLTLS
	}
	if raw == "" {
		return Broker{}, fmt.Errorf("wire: lookup answered without a broker URL (tls=%v)", c.tls)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return Broker{}, fmt.Errorf("wire: lookup answered a bad broker URL %q", raw)
	}
	b := Broker{Logical: u.Host, Physical: u.Host}
	if r.ProxyThroughServiceURL {
		b.Physical = c.service()
	}
	return b, nil
}

// Lookup returns the broker serving topic (a partition, or a
// non-partitioned topic), from the cache when it has it. It follows
// redirects, each asked on the redirected broker's connection.
func (c *Client) Lookup(ctx context.Context, topic string) (Broker, error) {
	c.mu.Lock()
	b, ok := c.lookups[topic]
	c.mu.Unlock()
	if ok {
		return b, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	var at *Broker // nil: the service URL
	authoritative := false
	for range maxRedirects {
		var conn *Conn
		var err error
		if at == nil {
			conn, err = c.serviceConn(ctx)
		} else {
			conn, err = c.Conn(ctx, *at)
		}
		if err != nil {
			return Broker{}, fmt.Errorf("wire: lookup %s: %w", topic, err)
		}
		id := conn.newRequestID()
		cmd, err := conn.request(ctx, "lookup "+topic, id, &Lookup{Topic: topic, RequestID: id, Authoritative: authoritative})
		if err != nil {
			return Broker{}, err
		}
		r, err := asType[*LookupResponse](cmd, "lookup "+topic)
		if err != nil {
			return Broker{}, err
		}
		switch r.Kind {
		case LookupConnect:
			b, err := c.brokerFor(r)
			if err != nil {
				return Broker{}, err
			}
			c.mu.Lock()
			c.lookups[topic] = b
			c.mu.Unlock()
			return b, nil
		case LookupRedirect:
			b, err := c.brokerFor(r)
			if err != nil {
				return Broker{}, err
			}
			at, authoritative = &b, r.Authoritative
		default:
			return Broker{}, &BrokerError{Op: "lookup " + topic, Code: r.Error, Message: r.Message}
		}
	}
	return Broker{}, fmt.Errorf("wire: lookup %s: more than %d redirects", topic, maxRedirects)
}

// ForgetLookup drops topic's cached lookup; the next Lookup asks again.
// Called when the broker closed a consumer or producer (topic moved).
func (c *Client) ForgetLookup(topic string) {
	c.mu.Lock()
	delete(c.lookups, topic)
	c.mu.Unlock()
}

// PartitionedMetadata returns topic's partition count, 0 for a
// non-partitioned topic.
func (c *Client) PartitionedMetadata(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	conn, err := c.serviceConn(ctx)
	if err != nil {
		return 0, fmt.Errorf("wire: partitioned metadata %s: %w", topic, err)
	}
	id := conn.newRequestID()
	cmd, err := conn.request(ctx, "partitioned metadata "+topic, id, &PartitionedMetadata{Topic: topic, RequestID: id})
	if err != nil {
		return 0, err
	}
	r, err := asType[*PartitionedMetadataResponse](cmd, "partitioned metadata "+topic)
	if err != nil {
		return 0, err
	}
	if r.Failed {
		return 0, &BrokerError{Op: "partitioned metadata " + topic, Code: r.Error, Message: r.Message}
	}
	return int(r.Partitions), nil
}

// connFor looks topic up and returns the connection to its broker.
func (c *Client) connFor(ctx context.Context, topic string) (*Conn, error) {
	b, err := c.Lookup(ctx, topic)
	if err != nil {
		return nil, err
	}
	conn, err := c.Conn(ctx, b)
	if err != nil {
		c.ForgetLookup(topic)
		return nil, err
	}
	return conn, nil
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// backoff returns the capped exponential delay with jitter for attempt
// (0-based): 100ms, 200ms, ... up to 30s, each between 50% and 100%.
func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 0; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// typed response helpers

func asType[T Body](cmd Command, op string) (T, error) {
	b, ok := cmd.Body.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("wire: %s: %w", op, malformed("unexpected response %v", cmd.Type))
	}
	return b, nil
}

var errNoConn = errors.New("wire: not connected (reconnecting)")
