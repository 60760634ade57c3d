package replicator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarbackoff "github.com/apache/pulsar-client-go/pulsar/backoff"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	pulsaradminpkg "github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Conn is the pair of clients geo-sidecar holds for one cluster: the binary
// protocol client (shared by every cursor and producer on that cluster, so
// they share connections) and the admin client.
type Conn struct {
	Name   string
	Client pulsar.Client
	Admin  pulsaradmin.Client
	// control is Admin as discovery and subscription sync use it.
	control controlPlane
	admin   *adminTransport // Admin's and entries' transport
	// entries reads single entries through the admin API, authenticated
	// like Admin (the same transport: current token, TLS, refusals
	// reported).
	entries *entryReader

	// For the entry pipe's binary-protocol client, built on first use.
	cluster  config.Cluster
	watch    *authWatch
	log      *zap.Logger
	wireOnce sync.Once
	wire     *wire.Client
	wireErr  error
	// m, set by countAdmin, receives the wire client's link events.
	m *Metrics
}

// Dial builds the clients for c. Neither keeps a copy of the token: both
// ask for it when they need it (the binary client at each connection and
// when the broker challenges an expiring token, the admin client before
// each call), and each time the file or variable is read again, so a
// short-lived token that an agent replaces keeps replication going
// without a restart. Host names are verified on TLS connections. Refused
// credentials, missing permissions and refused certificates are logged
// once each by the "security" logger (see EventPermissionDenied); tokens
// and message properties never reach a log.
func Dial(c config.Cluster, log *zap.Logger) (*Conn, error) {
	w := newAuthWatch(c, log)
	opts := pulsar.ClientOptions{
		URL:                     c.ServiceURL,
		TLSTrustCertsFilePath:   c.Auth.TLSTrustCertsFile,
		TLSValidateHostname:     true,
		Logger:                  zapLogger{s: log.Named("pulsar").With(zap.String("cluster", c.Name)).Sugar(), w: w},
		MaxConnectionsPerBroker: 1,
		// The client closes a connection silent for twice this.
		KeepAliveInterval: c.KeepAlive.Duration / 2,
	}
	switch {
	case c.Auth.HasToken():
		// Read once now, so a missing file fails at start, naming it.
		if _, err := w.Token(); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		opts.Authentication = pulsar.NewAuthenticationTokenFromSupplier(w.Token)
	case c.Auth.TLSCertFile != "":
		// Read at each handshake: a renewed certificate is used at the
		// next connection.
		opts.Authentication = pulsar.NewAuthenticationTLS(c.Auth.TLSCertFile, c.Auth.TLSKeyFile)
	}
	client, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: pulsar client: %w", c.Name, err)
	}
	base, err := newAdminBase(c.Auth, c.KeepAlive.Duration)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster %s: admin client: %w", c.Name, err)
	}
	rt := &adminTransport{base: base, w: w}
	admin, err := pulsaradminpkg.NewPulsarClientWithAuthProvider(&pulsaradmin.Config{WebServiceURL: c.AdminURL}, rt)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster %s: admin client: %w", c.Name, err)
	}
	entries := &entryReader{base: strings.TrimRight(c.AdminURL, "/"), client: &http.Client{Transport: rt, Timeout: 30 * time.Second}}
	return &Conn{Name: c.Name, Client: client, Admin: admin, control: pulsarControl{admin}, entries: entries, cluster: c, watch: w, log: log, admin: rt}, nil
}

// countAdmin counts this cluster's admin calls in m, and its links'
// events (before any call).
func (c *Conn) countAdmin(m *Metrics) {
	c.admin.requests = m.AdminRequests.WithLabelValues(c.Name)
	c.m = m
}

// Close releases the clients.
func (c *Conn) Close() {
	c.Client.Close()
	c.wireOnce.Do(func() {}) // after this, c.wire is set or never will be
	if c.wire != nil {
		_ = c.wire.Close()
	}
}

// pulsarEndpoints opens a partition's cursor on the local cluster and its
// producer on the remote.
type pulsarEndpoints struct {
	local, remote *Conn
	topic         string // full partition topic name, the same on both sides
	subscription  string
	producerName  string
	start         pulsar.SubscriptionInitialPosition
	maxPending    int
	// tickDelay is the producer's own batch timer (see batchDelayFor).
	tickDelay time.Duration

	dst atomic.Pointer[remoteProducer] // the latest producer opened
}

func (e *pulsarEndpoints) openSource(ctx context.Context, onActive func(bool)) (source, error) {
	c, err := callCtx(ctx, func() (pulsar.Consumer, error) {
		return e.local.Client.Subscribe(pulsar.ConsumerOptions{
			Topic:                       e.topic,
			SubscriptionName:            e.subscription,
			Name:                        instanceConsumerName, // partitions in turn across instances
			Type:                        pulsar.Failover,
			SubscriptionInitialPosition: e.start,
			ReceiverQueueSize:           e.maxPending,
			EventListener:               activeListener(onActive),
			BackOffPolicyFunc:           reconnectPolicy,
			// Acknowledgements go to the broker at once, one per entry:
			// the client sends a batch's acknowledgement when its last
			// message is acknowledged, so a source that batches costs one
			// command per batch. The client's grouping (the default)
			// runs a ticker per partition, busy or idle (every 100 ms:
			// 10,000 wake-ups a second for 1,000 partitions), and a
			// longer period leaves copied messages counted in the
			// backlog that long.
			AckGroupingOptions: &pulsar.AckGroupingOptions{MaxSize: 1},
			// The cursor is on one partition: partition discovery (a
			// lookup a minute per consumer, by default) finds nothing.
			AutoDiscoveryPeriod: noDiscovery,
		})
	}, func(c pulsar.Consumer) { c.Close() })
	if err != nil {
		return nil, err
	}
	return &flushWhenDry{Consumer: c, dst: &e.dst}, nil
}

func (e *pulsarEndpoints) openTarget(ctx context.Context) (target, error) {
	p, err := callCtx(ctx, func() (pulsar.Producer, error) {
		return e.remote.Client.CreateProducer(e.producerOptions())
	}, func(p pulsar.Producer) { p.Close() })
	if err != nil {
		// An untyped nil: CreateProducer returns a typed nil pointer on
		// failure, which as a target is a non-nil interface; the session
		// then called Close on it and the process died of a nil-pointer
		// panic whenever the remote refused a producer (seen in e2e/bench
		// with west's bookie unavailable).
		return nil, err
	}
	rp := &remoteProducer{Producer: p, delay: batchDelay}
	e.dst.Store(rp)
	return rp, nil
}

// producerOptions are the settings of a partition's producer to the
// remote; the comments say why each one matters for loss and order.
func (e *pulsarEndpoints) producerOptions() pulsar.ProducerOptions {
	return pulsar.ProducerOptions{
		Topic: e.topic,
		// A fixed name: the read-back (copiedSince) recognises the
		// pair's copies by it, the remote broker's deduplication (when
		// enabled) keeps its record under it and starts each new
		// producer after that record, and only one sidecar instance can
		// write a partition at a time.
		Name:                    e.producerName,
		MaxPendingMessages:      e.maxPending,
		BatchingMaxPublishDelay: e.tickDelay,
		BatchingMaxMessages:     uint(e.maxPending),
		BatchingMaxSize:         batchBytes,
		// Uncompressed: the read-back parses the copies' batches.
		CompressionType: pulsar.NoCompression,
		// No send timeout: a message that timed out while later ones
		// were sent after a reconnect would leave a gap on the remote.
		// While the remote is down, sends wait; the cursor's backlog
		// grows and nothing is acknowledged.
		SendTimeout:       -1,
		BackOffPolicyFunc: reconnectPolicy,
		// One partition: nothing to discover (see openSource).
		PartitionsAutoDiscoveryInterval: noDiscovery,
	}
}

// remoteProducer is a partition's producer to the remote. It remembers
// whether anything was sent since its batch was last flushed, and flushes
// it a batch delay after the cursor first ran dry.
type remoteProducer struct {
	pulsar.Producer
	delay     time.Duration
	unflushed atomic.Bool
	armed     atomic.Bool
}

func (p *remoteProducer) SendAsync(ctx context.Context, msg *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	p.unflushed.Store(true)
	p.Producer.SendAsync(ctx, msg, cb)
}

// flushSoon flushes the open batch one batch delay from now, unless a
// flush is already due. The flush waits for the remote's confirmation in
// the timer's goroutine, which ends with ctx at the latest.
func (p *remoteProducer) flushSoon(ctx context.Context) {
	if !p.unflushed.Load() || p.armed.Swap(true) {
		return
	}
	time.AfterFunc(p.delay, func() {
		p.armed.Store(false)
		if p.unflushed.Swap(false) {
			_ = p.FlushWithCtx(ctx)
		}
	})
}

// flushWhenDry is a partition's cursor. When it has no message ready, it
// has the producer flush its open batch one batch delay later: batches
// fill up to their size limits under load and leave within the batch
// delay otherwise, as with pulsar-client-go's own batch timer.
//
// That timer is the reason for this type: it is a ticker per producer,
// firing every batch delay whether or not anything is batched. With 2 ms
// and 1,000 idle partitions, its 500,000 wake-ups a second kept a whole
// core busy doing nothing (e2e/bench, scale run). Here a timer runs only
// while a batch is open; the producer's own ticker is set to
// batchDelayFallback.
type flushWhenDry struct {
	pulsar.Consumer
	dst *atomic.Pointer[remoteProducer]
}

func (s *flushWhenDry) Receive(ctx context.Context) (pulsar.Message, error) {
	select {
	case cm, ok := <-s.Chan():
		if ok {
			return cm.Message, nil
		}
	default:
	}
	if p := s.dst.Load(); p != nil {
		p.flushSoon(ctx)
	}
	return s.Consumer.Receive(ctx)
}

// lookBack is how many entries beyond the in-flight window copiedSince
// reads back from the end of the remote partition, for entries written by
// others (active-active) between the copies.
const lookBack = 100

func (e *pulsarEndpoints) copiedSince(ctx context.Context, from marker.Position) (copySet, error) {
	tn, err := utils.GetTopicName(e.topic)
	if err != nil {
		return copySet{}, err
	}
	return scanCopies(ctx, adminEntries{admin: e.remote.Admin, reader: e.remote.entries, topic: tn},
		byProducer(e.producerName), e.local.Name, from, e.maxPending+lookBack)
}

// Batching towards the remote: the source's batches were unpacked by the
// consumer; these settings pack them again. A batch leaves when it is full
// or batchDelay after the cursor ran dry (flushWhenDry). The producer's
// own ticker is a fallback: batchDelay for pairs with a rate limit (their
// session waits in the limiter, not on the cursor), batchDelayFallback
// otherwise.
const (
	batchDelay         = 2 * time.Millisecond
	batchDelayFallback = 10 * time.Second
	batchBytes         = 1 << 20
)

// noDiscovery is the partition discovery interval of cursors and producers:
// each works on a single partition (the pair discovers topics and
// partitions itself), so the client's discovery would only cost a lookup
// per partition every minute.
const noDiscovery = time.Hour

// callCtx runs open, which cannot be cancelled, and returns early when ctx
// ends; a result that arrives after that is closed.
func callCtx[T any](ctx context.Context, open func() (T, error), closeLate func(T)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := open()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				closeLate(r.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// reconnectPolicy caps the client's reconnect delay at 5 s (its default
// grows to 60 s), so a remote that comes back is written to again within
// seconds.
func reconnectPolicy() pulsarbackoff.Policy {
	return &reconnect{b: newBackoff(100*time.Millisecond, 5*time.Second)}
}

type reconnect struct{ b *backoff }

func (r *reconnect) Next() time.Duration       { return r.b.next() }
func (r *reconnect) IsMaxBackoffReached() bool { return r.b.cur >= r.b.max }
func (r *reconnect) Reset()                    { r.b.reset() }

// activeListener adapts a func to pulsar.ConsumerEventListener.
type activeListener func(bool)

func (f activeListener) BecameActive(pulsar.Consumer, string, int32)   { f(true) }
func (f activeListener) BecameInactive(pulsar.Consumer, string, int32) { f(false) }

// zapLogger routes pulsar-client-go's logs into zap, one level down: the
// client's Info is chatty (every connect), so it lands at Debug. Fields
// that carry message contents are dropped (see dropField): the client logs
// a failed send with the message's properties, and whatever applications
// put there (customer ids, emails) must not reach the sidecar's logs.
// What the client says about producers, consumers and connections also
// goes to the cluster's authWatch, which reports refusals once.
type zapLogger struct {
	s     *zap.SugaredLogger
	w     *authWatch // nil in tests
	topic string     // the "topic" field, for the authWatch
	err   error      // the error given with WithError
}

func (l zapLogger) with(f pulsarlog.Fields) zapLogger {
	args := make([]any, 0, 2*len(f))
	for k, v := range f {
		if dropField(k, v) {
			continue
		}
		if k == "topic" {
			if t, ok := v.(string); ok {
				l.topic = t
			}
		}
		args = append(args, k, v)
	}
	if len(args) > 0 {
		l.s = l.s.With(args...)
	}
	return l
}

func (l zapLogger) SubLogger(f pulsarlog.Fields) pulsarlog.Logger { return l.with(f) }
func (l zapLogger) WithFields(f pulsarlog.Fields) pulsarlog.Entry { return l.with(f) }
func (l zapLogger) WithField(name string, v any) pulsarlog.Entry {
	return l.with(pulsarlog.Fields{name: v})
}
func (l zapLogger) WithError(err error) pulsarlog.Entry {
	l.err = err
	l.s = l.s.With(zap.Error(err))
	return l
}
func (l zapLogger) Debug(args ...any) {}
func (l zapLogger) Info(args ...any) {
	msg := fmt.Sprint(args...)
	l.s.Debug(msg)
	l.note(msg)
}
func (l zapLogger) Warn(args ...any) {
	if msg := fmt.Sprint(args...); !l.note(msg) {
		l.s.Info(msg)
	}
}
func (l zapLogger) Error(args ...any) {
	if msg := fmt.Sprint(args...); !l.note(msg) {
		l.s.Warn(msg)
	}
}
func (l zapLogger) Debugf(string, ...any)            {}
func (l zapLogger) Infof(format string, args ...any) { l.s.Debugf(format, args...) }
func (l zapLogger) Warnf(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !l.note(msg) {
		l.s.Info(msg)
	}
}
func (l zapLogger) Errorf(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !l.note(msg) {
		l.s.Warn(msg)
	}
}

// note gives msg to the cluster's authWatch. It reports whether msg was a
// refusal that the security logger reports (once), in which case the
// client's own line, repeated at every retry, goes to Debug instead.
func (l zapLogger) note(msg string) bool {
	if l.w == nil || !l.w.clientEvent(msg, l.err, l.topic) {
		return false
	}
	l.s.Debug(msg)
	return true
}

// dropField reports whether a field of the client's logs may carry message
// contents: the properties (pulsar-client-go logs them with failed sends),
// payloads and keys, and any string map, which is how properties travel.
func dropField(name string, v any) bool {
	switch strings.ToLower(name) {
	case "properties", "payload", "key", "ordering_key", "orderingkey", "value", "msg", "message":
		return true
	}
	switch v.(type) {
	case map[string]string, []byte:
		return true
	}
	return false
}

// batchDelayFor is the batch delay of the producers of a pair with these
// rate limiters (nil: unlimited).
func batchDelayFor(msgRate, byteRate *limiter) time.Duration {
	if msgRate != nil || byteRate != nil {
		return batchDelay
	}
	return batchDelayFallback
}
