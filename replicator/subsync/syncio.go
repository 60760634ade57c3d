package subsync

// The Pulsar side of subscription sync (sync.go): the admin calls (the
// admin route of applying an update, and the states its route is decided
// on), the marker producer and the start-up re-read, behind the small interfaces
// Sync declares, so that Sync is unit-tested with fakes.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// NewMarkerWriter is the MarkerSink of topic, a partition of client's
// cluster: a producer named name, opened on first use, writing markers
// signed under keys. Safe for concurrent use.
func NewMarkerWriter(client pulsar.Client, topic, name string, keys marker.Keys) MarkerSink {
	return &markerWriter{client: client, topic: topic, name: name, keys: keys}
}

// markerWriter is MarkerSink over a producer to the local partition.
type markerWriter struct {
	client pulsar.Client
	topic  string
	name   string
	keys   marker.Keys

	mu sync.Mutex
	p  pulsar.Producer
}

func (w *markerWriter) Write(ctx context.Context, mk marker.Marker) error {
	payload, err := w.keys.Encode(mk)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.p == nil {
		p, err := callCtx(ctx, func() (pulsar.Producer, error) {
			// One marker per entry: the entry pipe and a broker entry
			// filter see the marker's properties in the entry's metadata
			// without unpacking a batch.
			//
			// pulsar-client-go gives every producer a batch-flush ticker
			// (10 ms by default, batching or not) and a partition
			// discovery ticker (1 min): with a producer per partition and
			// direction, 1,000 idle partitions woke the process 200,000
			// times a second. Neither has work here (no batches; the
			// topic is one partition), so both are stretched to an hour.
			return w.client.CreateProducer(pulsar.ProducerOptions{Topic: w.topic, Name: w.name,
				DisableBatching: true, SendTimeout: 30 * time.Second,
				BatchingMaxPublishDelay: time.Hour, PartitionsAutoDiscoveryInterval: time.Hour})
		}, func(p pulsar.Producer) { p.Close() })
		if err != nil {
			w.mu.Unlock()
			return fmt.Errorf("open marker producer: %w", err)
		}
		w.p = p
	}
	p := w.p
	w.mu.Unlock()
	p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload, Properties: marker.Properties(mk.Kind)},
		func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				w.mu.Lock()
				if w.p == p {
					w.p = nil // reopen on next write
					go p.Close()
				}
				w.mu.Unlock()
			}
		})
	return nil
}

// callCtx runs open, which cannot be cancelled (pulsar-client-go's
// CreateProducer), and returns early when ctx ends; a result that arrives
// after that is closed, so that no producer is left open unowned.
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

func (w *markerWriter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.p != nil {
		_ = w.p.Flush()
		w.p.Close()
		w.p = nil
	}
}

// NewSubAdmin is subscription.Admin and States over a cluster's admin
// API. Consumers whose names start with followPrefix are a protocol
// move's (see FollowName), not an application's: they are not counted.
func NewSubAdmin(a pulsaradmin.Client, followPrefix string) interface {
	subscription.Admin
	States
} {
	return pulsarSubAdmin{a: a, followPrefix: followPrefix}
}

// pulsarSubAdmin is subscription.Admin and States over Pulsar's admin
// API.
type pulsarSubAdmin struct {
	a            pulsaradmin.Client
	followPrefix string
}

// FollowName names the consumer of this process's protocol moves:
// followPrefix and an instance id (in the broker's stats, and left out of
// the consumers counted there).
func FollowName(followPrefix, instance string) string { return followPrefix + instance }

func (p pulsarSubAdmin) stats(ctx context.Context, topic string) (map[string]utils.SubscriptionStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	st, err := p.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, utils.GetStatsOptions{ExcludePublishers: true})
	if err != nil {
		return nil, err
	}
	return st.Subscriptions, nil
}

// stateOf is a subscription's state in its stats, without the
// mark-delete position (stats do not carry it).
func (p pulsarSubAdmin) stateOf(ss utils.SubscriptionStats) subscription.State {
	st := subscription.State{Exists: true, Type: subscription.ParseType(ss.SubType), AllowOutOfOrder: ss.AllowOutOfOrderDelivery}
	for _, c := range ss.Consumers {
		if p.followPrefix == "" || !strings.HasPrefix(c.ConsumerName, p.followPrefix) {
			st.Consumers++
		}
	}
	return st
}

func (p pulsarSubAdmin) States(ctx context.Context, topic string) (map[string]subscription.State, error) {
	subs, err := p.stats(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[string]subscription.State, len(subs))
	for name, ss := range subs {
		out[name] = p.stateOf(ss)
	}
	return out, nil
}

func (p pulsarSubAdmin) State(ctx context.Context, topic, sub string) (subscription.State, error) {
	subs, err := p.stats(ctx, topic)
	if err != nil {
		return subscription.State{}, err
	}
	ss, ok := subs[sub]
	if !ok {
		return subscription.State{}, nil
	}
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return subscription.State{}, err
	}
	internal, err := p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	if err != nil {
		return subscription.State{}, err
	}
	md, ok := cluster.ParseEntry(internal.Cursors[sub].MarkDeletePosition)
	if !ok {
		return subscription.State{}, fmt.Errorf("no mark-delete position for %s", sub)
	}
	st := p.stateOf(ss)
	st.MarkDelete = md
	return st, nil
}

func (p pulsarSubAdmin) Create(ctx context.Context, topic, sub string, at marker.Position) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return p.a.Subscriptions().CreateWithContext(ctx, *tn, sub, utils.MessageID{LedgerID: at.Ledger, EntryID: at.Entry, PartitionIndex: -1})
}

func (p pulsarSubAdmin) Reset(ctx context.Context, topic, sub string, at marker.Position) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return p.a.Subscriptions().ResetCursorToMessageIDWithContext(ctx, *tn, sub, utils.MessageID{LedgerID: at.Ledger, EntryID: at.Entry, PartitionIndex: -1})
}
