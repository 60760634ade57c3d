package entrypath

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// wireEndpoints opens a partition's cursor and producer for the entry
// pipe over the clusters' wire clients.
type wireEndpoints struct {
	local, remote *cluster.Clients
	topic         string // full partition topic name, the same on both sides
	subscription  string
	producerName  string // epoch 0's; later epochs add a suffix (epochProducerName)
	start         wire.InitialPosition
	permits       int // the cursor's window, in messages
	maxPending    int // the producer's window, in entries
	// pool is the target's share of the receive budget, which the
	// cursor reserves from before it grants permits.
	pool *ReceivePool
	// readBackPool is the target's share of the read-back budget, which
	// copiedSince takes its room from.
	readBackPool *ReadBackPool
	keys         marker.Keys // sign and check the copies' origins (marker.PropOriginSig); zero: none
	// readerPrefix starts the read-back's reader names: sidecar.cursor_prefix.
	readerPrefix string
	log          *zap.Logger

	// schemas maps a local schema version to the remote's; one session at
	// a time uses it. It is dropped when a producer opens and when the
	// producer's link goes down (schemasStale): the target topic may have
	// been deleted and created again meanwhile, and its versions with it.
	schemas      map[string][]byte
	schemasStale atomic.Bool
	// registerSchema, when set, stands in for fetching a schema from the
	// local cluster and registering it on the remote (tests).
	registerSchema func(ctx context.Context, version []byte) ([]byte, error)

	// health takes the partition off connected_partitions while its
	// links are down or silent.
	health linkHealth

	// Seams for unit tests; nil: the wire client's (subscribeWire,
	// newWireTail).
	subscribe func(ctx context.Context, c *wire.Client, o wire.ConsumerOptions) (entrySource, error)
	readBack  func() (tailReader, error)
}

func subscribeWire(ctx context.Context, c *wire.Client, o wire.ConsumerOptions) (entrySource, error) {
	cons, err := wire.Subscribe(ctx, c, o)
	if err != nil {
		return nil, err // an untyped nil
	}
	return cons, nil
}

// healthGauge is the pair's connected_partitions, or nil without
// metrics.
func (e *wireEndpoints) healthGauge() prometheus.Gauge {
	if e.local == nil || e.local.Metrics() == nil || e.remote == nil {
		return nil
	}
	return e.local.Metrics().Connected.WithLabelValues(e.local.Name, e.remote.Name)
}

// healthyTarget is the producer as the entry pipe sees it: its link's
// state goes to the partition's linkHealth and to the entry pipe's
// onLink until Close.
type healthyTarget struct {
	*wire.Producer
	h      *linkHealth
	onLink func(up bool) // nil: none
	mu     sync.Mutex
	closed bool
}

func (t *healthyTarget) linkChanged(up bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.h.update(func(h *linkHealth) { h.prodDown = !up })
		if t.onLink != nil {
			t.onLink(up)
		}
	}
}

// Close stops the link reports first: the entry pipe no longer counts
// the partition.
func (t *healthyTarget) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.h.update(func(h *linkHealth) { h.open, h.prodDown = false, false })
	return t.Producer.Close()
}

// healthySource is the cursor as the entry pipe sees it.
type healthySource struct {
	entrySource
	h      *linkHealth
	leave  func() // the cursor's place among the pool's open cursors
	mu     sync.Mutex
	closed bool
}

func (s *healthySource) linkChanged(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.h.update(func(h *linkHealth) { h.consDown = !up })
	}
}

func (s *healthySource) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.h.update(func(h *linkHealth) { h.consDown = false })
	s.leave()
	return s.entrySource.Close()
}

// instanceConsumerName is the consumer name of every replication cursor
// of this process. For a Failover subscription on a partition the broker
// makes active the consumer at rank partition-index mod n among the
// partition's n consumers sorted by name. With one name per instance
// every partition sees the instances in the same order, so they take the
// partitions in turn. With a name drawn per partition, one instance often
// held every partition; the e2e HA tests had to restart instances until
// each held one.
var instanceConsumerName = newConsumerName()

func (e *wireEndpoints) openCursor(ctx context.Context, onActive func(bool)) (entrySource, error) {
	c, err := e.local.WireClient()
	if err != nil {
		return nil, err
	}
	e.health.update(func(h *linkHealth) { h.gauge = e.healthGauge() })
	src := &healthySource{h: &e.health, leave: e.pool.join()}
	subscribe := e.subscribe
	if subscribe == nil {
		subscribe = subscribeWire
	}
	cons, err := subscribe(ctx, c, wire.ConsumerOptions{
		Topic: e.topic, Subscription: e.subscription, Name: instanceConsumerName,
		InitialPosition: e.start, Permits: e.permits, MaxBytes: e.pool.window, Budget: e.pool,
		OnActiveChange: onActive, Logger: e.log,
		// Every Release comes after the target confirmed the entry, or
		// for an entry skipped or not sent: nothing reads its bytes later.
		RecycleOnRelease: true,
		OnLinkChange:     src.linkChanged,
	})
	// A refusal (a missing permission, say) is reported once by name.
	e.local.NoteOpen("consumer", e.topic, err)
	if err != nil {
		src.leave()
		return nil, err
	}
	src.entrySource = cons
	return src, nil
}

func (e *wireEndpoints) openProducer(ctx context.Context, epoch uint64, onLink func(up bool)) (entryTarget, error) {
	c, err := e.remote.WireClient()
	if err != nil {
		return nil, err
	}
	e.health.update(func(h *linkHealth) { h.gauge = e.healthGauge() })
	e.schemas = nil
	dst := &healthyTarget{h: &e.health, onLink: e.producerLink(onLink)}
	p, err := wire.CreateProducer(ctx, c, e.producerOptions(epoch, dst.linkChanged))
	e.remote.NoteOpen("producer", e.topic, err)
	if err != nil {
		// An untyped nil: a typed nil pointer as an entryTarget is a
		// non-nil interface, and the session would call Close on it.
		return nil, err
	}
	dst.Producer = p
	// Counted by the entry pipe from here; the link's state decides.
	e.health.update(func(h *linkHealth) { h.open = true })
	return dst, nil
}

// producerOptions are the settings of the producer of epoch (see
// entrySeq): its name is the epoch's.
func (e *wireEndpoints) producerOptions(epoch uint64, onLink func(up bool)) wire.ProducerOptions {
	return wire.ProducerOptions{
		Topic: e.topic, Name: epochProducerName(e.producerName, epoch), MaxPending: e.maxPending, Logger: e.log,
		OnLinkChange: onLink,
		// The entry pipe forwards what applications wrote, encrypted or
		// not: a target topic that requires encryption then takes the
		// encrypted entries and refuses each plain one (on_refused),
		// where undeclared it refused the producer and so everything.
		Encrypted: true,
	}
}

// reachTarget looks the partition up on the remote afresh (not from the
// lookup cache) and connects to the broker named: both must answer. A
// pooled connection to that broker counts only while it is not silent.
func (e *wireEndpoints) reachTarget(ctx context.Context) error {
	c, err := e.remote.WireClient()
	if err != nil {
		return err
	}
	c.ForgetLookup(e.topic)
	b, err := c.Lookup(ctx, e.topic)
	if err != nil {
		return err
	}
	conn, err := c.Conn(ctx, b)
	if err != nil {
		return err
	}
	if conn.Silent() {
		return fmt.Errorf("connection to %s is silent", b.Logical)
	}
	return nil
}

// copiedSince reads the remote partition back in windows over the binary
// protocol (scanTail): a handful of readers, not an admin call per entry.
// It reads back until a window holds a copy of an entry before from
// (the pair writes in origin order: every copy of from and after is
// after it), or the partition's first entry, or readBackMost entries.
// Neither the in-flight window (max_pending_messages + lookBack) nor the
// remote's record (reach, recordReach) bounds it below that: entries of
// the remote's own producers can stand between the copies and the end,
// any number of them, and the record is no proof of where the copies
// stop: after a reload of the remote topic it is the broker's last
// snapshot of it, below the copies stored since (docs/guarantees.md,
// Deduplication state). A read that stopped at the in-flight window
// found none of the copies of soak seed 1382347120672031276 (issue 38:
// west's own 1,341 entries after them, its record at 268:1912 below the
// cursor's start, 268:2316), and the session sent 30 messages again
// under their own sequence ids, above the record: stored twice. The
// usual case costs what it did: a copy from before from lies in the
// first window or two.
//
// It waits first for room in the target's read-back pool, in line: a
// target back from an outage under thousands of partitions is read back
// a few partitions at a time, within the read-back budget.
func (e *wireEndpoints) copiedSince(ctx context.Context, from marker.Position, reach int64) (copySet, error) {
	release, err := e.readBackPool.acquire(ctx)
	if err != nil {
		return copySet{}, fmt.Errorf("wait for room to read back: %w", err)
	}
	defer release()
	newTail := func() (tailReader, error) { return e.newWireTail() }
	if e.readBack != nil {
		newTail = e.readBack
	}
	r, err := newTail()
	if err != nil {
		return copySet{}, err
	}
	limit := max(readBackMost, int64(e.maxPending)+lookBack, min(reach, maxRecordReach)+lookBack)
	return scanTail(ctx, r, bySignature(e.keys, e.topic, e.remote.Name), e.local.Name, from, int(limit))
}

// lookBack is how many entries beyond the in-flight window copiedSince
// read back from the end of the remote partition, for entries written by
// others (active-active) between the copies, before it read on to a copy
// older than the start (readBackMost).
const lookBack = 100

// maxRecordReach caps recordReach's widening of the read-back: the
// windows double, so reading back this far costs a handful of readers
// more, and a record further ahead than this is no in-flight window.
const maxRecordReach = 100_000

// readBackMost is how far copiedSince reads back at most when no window
// holds a copy from before the start (with max_pending_messages up to
// 100,000; the in-flight window and lookBack when larger): the same
// bound as the record's reach. It is read only where the proof needs it
// (the remote's own producers wrote that much since the pair's last
// copies) or where there is no older copy to find: a pair's first
// session on a remote partition that holds entries of others, which
// reads it back to its first entry, up to this many.
const readBackMost = maxRecordReach + lookBack

// cursorPermitsPerPending is the cursor's window in messages per entry the
// producer may have unconfirmed (max_pending_messages): batched entries
// hold many messages each, and a window of max_pending_messages messages
// kept a batched topic to a handful of entries in flight. With the default
// 1,000 it is 64,000 messages, so that 1 KiB messages fill
// cursorWindowBytes rather than stop at a message count.
const cursorPermitsPerPending = 64

// entryDrainTimeout bounds how long a stopping entry session waits for
// its producer (see Partition.drainTimeout).
const entryDrainTimeout = 4 * time.Second

// producerLink wraps the entry pipe's onLink for the producer: a link
// that went down makes the schema versions stale.
func (e *wireEndpoints) producerLink(onLink func(up bool)) func(up bool) {
	return func(up bool) {
		if !up {
			e.schemasStale.Store(true)
		}
		if onLink != nil {
			onLink(up)
		}
	}
}

func (e *wireEndpoints) targetSchema(ctx context.Context, version []byte) ([]byte, error) {
	if e.schemasStale.Swap(false) {
		e.schemas = nil
	}
	if v, ok := e.schemas[string(version)]; ok {
		return v, nil
	}
	register := e.registerSchema
	if register == nil {
		register = e.fetchAndRegisterSchema
	}
	v, err := register(ctx, version)
	if err != nil {
		return nil, err
	}
	if e.schemas == nil {
		e.schemas = map[string][]byte{}
	}
	e.schemas[string(version)] = v
	return v, nil
}

// fetchAndRegisterSchema fetches the local schema version from the local
// cluster and registers the same schema on the remote.
func (e *wireEndpoints) fetchAndRegisterSchema(ctx context.Context, version []byte) ([]byte, error) {
	lc, err := e.local.WireClient()
	if err != nil {
		return nil, err
	}
	rc, err := e.remote.WireClient()
	if err != nil {
		return nil, err
	}
	s, _, err := lc.GetSchema(ctx, e.topic, version)
	if err != nil {
		return nil, fetchSchemaError(e.local.Name, err)
	}
	v, err := rc.GetOrCreateSchema(ctx, e.topic, s)
	if err != nil {
		return nil, fmt.Errorf("register on %s: %w", e.remote.Name, err)
	}
	e.log.Info("schema registered on the remote", zap.String("remote", e.remote.Name))
	return v, nil
}

// errSourceSchemaMissing marks a schema version the source cluster no
// longer serves: its broker answered the version's fetch with "not found"
// (the schema deleted since the entry was written; Pulsar serves no
// version of a deleted schema, and a schema registered again gets new
// versions). Every later fetch is answered the same, so the entry takes
// the on_refused route (refusal: entryrule.SkipSourceSchemaMissing).
var errSourceSchemaMissing = errors.New("the source no longer serves the entry's schema version")

// getSchemaOp begins the Op of wire.Client.GetSchema's broker errors
// (TestEntryPipeOverWire's case for a deleted schema checks it still does).
const getSchemaOp = "get schema of "

// fetchSchemaError is the error of a schema version's fetch from cluster
// local: errSourceSchemaMissing besides err when the broker answered the
// fetch itself with TopicNotFound, its answer for a version it does not
// have ("Topic not found or no-schema"): the BrokerError's Op is
// wire.Client.GetSchema's (getSchemaOp), not the lookup's before it. Any
// other failure (a lookup, a lost connection, the broker's UnknownError
// when its schema storage fails) is retried as before.
func fetchSchemaError(local string, err error) error {
	var be *wire.BrokerError
	if errors.As(err, &be) && be.Code == wire.TopicNotFound && strings.HasPrefix(be.Op, getSchemaOp) {
		return fmt.Errorf("fetch from %s: %w: %w", local, errSourceSchemaMissing, err)
	}
	return fmt.Errorf("fetch from %s: %w", local, err)
}

// newWireTail is the read-back of e's remote partition.
func (e *wireEndpoints) newWireTail() (*wireTail, error) {
	c, err := e.remote.WireClient()
	if err != nil {
		return nil, err
	}
	tn, err := utils.GetTopicName(e.topic)
	if err != nil {
		return nil, err
	}
	return &wireTail{client: c, admin: adminLedgers{admin: e.remote.Admin, topic: tn}, topic: e.topic,
		subPrefix: e.readerPrefix, window: e.readBackPool.Window()}, nil
}
