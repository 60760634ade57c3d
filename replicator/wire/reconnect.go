package wire

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// redialer is a Consumer or a Producer as its reconnector drives it.
type redialer interface {
	// connect opens a new session: lookup, subscribe or create, and what
	// follows (permits granted, unconfirmed entries sent again). Called
	// without the owner's lock.
	connect(ctx context.Context) error
	// settled reports, with the owner's lock held, that nothing is left
	// to reconnect for: a session is current, or the owner is closed or
	// has failed.
	settled() bool
	// end fails the owner with a terminal err from now on (lock not
	// held).
	end(err error)
	// reconnectedFields are the fields of the "reconnected" log (lock
	// not held).
	reconnectedFields() []zap.Field
}

// reconnector is the reconnect loop of a Consumer or a Producer: it counts
// the sessions in a row that ended young (churn) and, once a session is
// lost, retries the owner's connect with capped backoff with jitter until
// a session is up, the error is terminal, or the client or the owner is
// closed. Its fields are guarded by the owner's lock (mu), under which
// the owner's Close also closes stop.
type reconnector struct {
	kind   string // "consumer" or "producer": its logs and Events.Reconnect
	client *Client
	topic  string
	log    *zap.Logger
	mu     *sync.Mutex
	owner  redialer
	stop   chan struct{} // closed by the owner's Close
	wg     sync.WaitGroup
	// retrying is set while the loop runs.
	retrying bool
	// churn counts the sessions in a row that ended young (see
	// stableAfter): the next reconnect waits backoff(churn), so a broker
	// that closes a fresh session again and again is not asked to open
	// it ten times a second.
	churn int
}

func newReconnector(kind string, c *Client, topic string, log *zap.Logger, mu *sync.Mutex, owner redialer) reconnector {
	return reconnector{kind: kind, client: c, topic: topic, log: log, mu: mu, owner: owner, stop: make(chan struct{})}
}

// stableAfter is how long a session must last, without any receipt or
// entry, for its end to count as an isolated loss (reconnect at once)
// rather than as one more of a session the broker keeps closing
// (reconnect with growing backoff). A receipt or an entry proves the
// session worked too.
const stableAfter = 10 * time.Second

// ended counts a session that ended (r.mu held): proven (it delivered an
// entry or a receipt) or lasting stableAfter since it was up, churn
// starts over. It returns the churn.
func (r *reconnector) ended(proven bool, since time.Time) int {
	if proven || (!since.IsZero() && time.Since(since) >= stableAfter) {
		r.churn = 0
	} else {
		r.churn++
	}
	return r.churn
}

// disconnected reports a lost session (r.mu not held): the log, the
// Reconnect event and the lookup forgotten. The caller then starts the
// loop (start).
func (r *reconnector) disconnected(err error, churn int) {
	cause := reconnectCause(err)
	if churn > 0 {
		r.log.Info(r.kind+" disconnected, reconnecting", zap.String("cause", cause), zap.Int("closed_young_in_a_row", churn), zap.Error(err))
	} else {
		r.log.Info(r.kind+" disconnected, reconnecting", zap.String("cause", cause), zap.Error(err))
	}
	if f := r.client.opts.Conn.Events.Reconnect; f != nil {
		f(r.kind, cause)
	}
	r.client.ForgetLookup(r.topic)
}

// openFailed cleans up after a subscribe or create on conn failed with
// err: the lookup is forgotten unless the broker answered for the topic,
// and when the caller gave up (ctx done) the broker, which may still open
// the session, is asked to close it (closeCmd).
func (r *reconnector) openFailed(ctx context.Context, conn *Conn, err error, closeCmd func(reqID uint64) Body) {
	var be *BrokerError
	if !errors.As(err, &be) || be.Code == ServiceNotReady || be.Code == TopicNotFound {
		r.client.ForgetLookup(r.topic)
	}
	if ctx.Err() != nil {
		_ = conn.writeCommand(closeCmd(conn.newRequestID()))
	}
}

// closeOnBroker asks the broker to close a session of the owner, already
// removed from conn: op names it in errors. A connection gone closes the
// session with it: no error. Once the client is exiting (Client.Exiting)
// the close is written and not waited for: the connection's close, which
// follows, closes the session on the broker if the command did not.
func (r *reconnector) closeOnBroker(conn *Conn, op string, closeCmd func(reqID uint64) Body) error {
	ctx, cancel := context.WithTimeout(r.client.exiting, r.client.opts.OperationTimeout)
	defer cancel()
	id := conn.newRequestID()
	_, err := conn.request(ctx, op, id, closeCmd(id))
	var ce *ConnError
	if errors.As(err, &ce) || r.client.exiting.Err() != nil {
		return nil
	}
	return err
}

// stopped reports whether the owner's Close has run (r.mu held).
func (r *reconnector) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// start runs the loop unless it runs already or the owner is closed
// (r.mu not held).
func (r *reconnector) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retrying || r.stopped() {
		return
	}
	r.retrying = true
	r.wg.Add(1)
	go r.run()
}

// run retries connect with capped backoff with jitter until it succeeds,
// the error is terminal, or the owner is closed. The first wait grows
// with the sessions that ended young in a row (churn).
func (r *reconnector) run() {
	defer r.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// retrying is cleared under the same lock that sees the outcome: a
	// session lost between connect's success and here finds retrying set
	// and starts nothing, so this loop must go on for it.
	done := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.owner.settled() {
			return false
		}
		r.retrying = false
		return true
	}
	stop := func() {
		r.mu.Lock()
		r.retrying = false
		r.mu.Unlock()
	}
	r.mu.Lock()
	attempt := r.churn
	r.mu.Unlock()
	var last string
	for ; ; attempt++ {
		select {
		case <-r.stop:
			stop()
			return
		case <-time.After(backoff(attempt)):
		}
		if r.client.isClosed() {
			r.owner.end(ErrClosed)
			stop()
			return
		}
		err := r.owner.connect(ctx)
		if err == nil {
			r.log.Info(r.kind+" reconnected", r.owner.reconnectedFields()...)
			if done() {
				return
			}
			r.mu.Lock()
			attempt = r.churn
			r.mu.Unlock()
			continue
		}
		if errors.Is(err, ErrClosed) && ctx.Err() != nil {
			stop()
			return
		}
		if !IsRetryable(err) {
			r.log.Error(r.kind+" gave up", zap.Error(err))
			r.owner.end(err)
			stop()
			return
		}
		if msg := err.Error(); msg != last {
			r.log.Warn(r.kind+" reconnect failed, retrying", zap.Error(err))
			last = msg
		}
	}
}

// tellLink tells on (optional) that a consumer's or producer's link is up
// or down, when that changed since last, what it was last told (the
// owner's lock held).
func tellLink(last *bool, up bool, on func(up bool)) {
	changed := up != *last
	*last = up
	if changed && on != nil {
		on(up)
	}
}
