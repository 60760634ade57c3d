package replicator

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarbackoff "github.com/apache/pulsar-client-go/pulsar/backoff"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// Conn is the pair of clients geo-sidecar holds for one cluster: the binary
// protocol client (shared by every cursor and producer on that cluster, so
// they share connections) and the admin client.
type Conn struct {
	Name   string
	Client pulsar.Client
	Admin  pulsaradmin.Client
}

// Dial builds the clients for c. The token, if any, is read now and given to
// the clients; it never reaches a log.
func Dial(c config.Cluster, log *zap.Logger) (*Conn, error) {
	token, err := c.Auth.Token()
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	opts := pulsar.ClientOptions{
		URL:                     c.ServiceURL,
		TLSTrustCertsFilePath:   c.Auth.TLSTrustCertsFile,
		Logger:                  zapLogger{log.Named("pulsar").With(zap.String("cluster", c.Name)).Sugar()},
		MaxConnectionsPerBroker: 1,
	}
	if token != "" {
		opts.Authentication = pulsar.NewAuthenticationToken(token)
	}
	client, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: pulsar client: %w", c.Name, err)
	}
	admin, err := pulsaradmin.NewClient(&pulsaradmin.Config{
		WebServiceURL:         c.AdminURL,
		Token:                 token,
		TLSTrustCertsFilePath: c.Auth.TLSTrustCertsFile,
	})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster %s: admin client: %w", c.Name, err)
	}
	return &Conn{Name: c.Name, Client: client, Admin: admin}, nil
}

// Close releases the clients.
func (c *Conn) Close() { c.Client.Close() }

// pulsarEndpoints opens a partition's cursor on the local cluster and its
// producer on the remote.
type pulsarEndpoints struct {
	local, remote *Conn
	topic         string // full partition topic name, the same on both sides
	subscription  string
	producerName  string
	start         pulsar.SubscriptionInitialPosition
	maxPending    int
}

func (e *pulsarEndpoints) openSource(ctx context.Context, onActive func(bool)) (source, error) {
	return callCtx(ctx, func() (source, error) {
		return e.local.Client.Subscribe(pulsar.ConsumerOptions{
			Topic:                       e.topic,
			SubscriptionName:            e.subscription,
			Type:                        pulsar.Failover,
			SubscriptionInitialPosition: e.start,
			ReceiverQueueSize:           e.maxPending,
			EventListener:               activeListener(onActive),
			BackOffPolicyFunc:           reconnectPolicy,
		})
	}, func(s source) { s.Close() })
}

func (e *pulsarEndpoints) openTarget(ctx context.Context) (target, error) {
	return callCtx(ctx, func() (target, error) {
		return e.remote.Client.CreateProducer(pulsar.ProducerOptions{
			Topic: e.topic,
			// A fixed name makes the remote broker's deduplication (when
			// enabled) recognise resends, and lets only one sidecar instance
			// write a partition at a time.
			Name:                    e.producerName,
			MaxPendingMessages:      e.maxPending,
			BatchingMaxPublishDelay: batchDelay,
			BatchingMaxMessages:     uint(e.maxPending),
			BatchingMaxSize:         batchBytes,
			CompressionType:         pulsar.NoCompression,
			// No send timeout: a message that timed out while later ones
			// were sent after a reconnect would leave a gap on the remote.
			// While the remote is down, sends wait; the cursor's backlog
			// grows and nothing is acknowledged.
			SendTimeout:       -1,
			BackOffPolicyFunc: reconnectPolicy,
		})
	}, func(t target) { t.Close() })
}

// lookBack bounds how many entries lastCopied reads back from the end of
// the remote partition, past entries written by others (active-active).
const lookBack = 20

func (e *pulsarEndpoints) lastCopied(ctx context.Context) (position, bool, error) {
	tn, err := utils.GetTopicName(e.topic)
	if err != nil {
		return position{}, false, err
	}
	last, err := e.remote.Admin.Topics().GetLastMessageIDWithContext(ctx, *tn)
	if err != nil {
		return position{}, false, fmt.Errorf("last message id: %w", err)
	}
	for entry := last.EntryID; last.LedgerID >= 0 && entry >= 0 && entry > last.EntryID-lookBack; entry-- {
		msgs, err := e.remote.Admin.Subscriptions().GetMessagesByIDWithContext(ctx, *tn, last.LedgerID, entry)
		if err != nil || len(msgs) == 0 {
			return position{}, false, nil
		}
		// The admin client gives every message of a batch the same
		// (merged) property map; our copies all carry PropOriginID, so the
		// merged value is the last message's.
		props := msgs[len(msgs)-1].Properties
		if props[PropOriginCluster] != e.local.Name {
			continue
		}
		if p, ok := parsePosition(props[PropOriginID]); ok {
			return p, true, nil
		}
	}
	return position{}, false, nil
}

// Batching towards the remote: the source's batches were unpacked by the
// consumer; these settings pack them again.
const (
	batchDelay = 2 * time.Millisecond
	batchBytes = 1 << 20
)

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
// client's Info is chatty (every connect), so it lands at Debug.
type zapLogger struct{ s *zap.SugaredLogger }

func (l zapLogger) SubLogger(f pulsarlog.Fields) pulsarlog.Logger {
	return zapLogger{l.s.With(fieldArgs(f)...)}
}
func (l zapLogger) WithFields(f pulsarlog.Fields) pulsarlog.Entry {
	return zapLogger{l.s.With(fieldArgs(f)...)}
}
func (l zapLogger) WithField(name string, v any) pulsarlog.Entry { return zapLogger{l.s.With(name, v)} }
func (l zapLogger) WithError(err error) pulsarlog.Entry          { return zapLogger{l.s.With(zap.Error(err))} }
func (l zapLogger) Debug(args ...any)                            {}
func (l zapLogger) Info(args ...any)                             { l.s.Debug(args...) }
func (l zapLogger) Warn(args ...any)                             { l.s.Info(args...) }
func (l zapLogger) Error(args ...any)                            { l.s.Warn(args...) }
func (l zapLogger) Debugf(string, ...any)                        {}
func (l zapLogger) Infof(format string, args ...any)             { l.s.Debugf(format, args...) }
func (l zapLogger) Warnf(format string, args ...any)             { l.s.Infof(format, args...) }
func (l zapLogger) Errorf(format string, args ...any)            { l.s.Warnf(format, args...) }

func fieldArgs(f pulsarlog.Fields) []any {
	out := make([]any, 0, 2*len(f))
	for k, v := range f {
		out = append(out, k, v)
	}
	return out
}
