package wire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"

	"go.uber.org/zap"
)

// ConsumerOptions configure a Consumer.
type ConsumerOptions struct {
	// Topic is a partition ("...-partition-3") or a non-partitioned topic.
	Topic string
	// Subscription is the cursor name. The subscription is durable and of
	// type Failover, so consumers of several processes share the partitions
	// with one active consumer per partition.
	Subscription string
	// Name is this consumer's name; the broker chooses the active Failover
	// consumer by name order, so every instance needs its own.
	Name string
	// InitialPosition applies when the subscription does not exist yet.
	InitialPosition InitialPosition
	// NonDurable makes a reader: no cursor is stored on the broker, and
	// StartMessageID (if set) says where to start; after a reconnect it
	// starts there again. A reader subscribes as Exclusive, not Failover:
	// a broker holds back the first dispatch to a Failover subscription's
	// new active consumer (activeConsumerFailoverDelayTimeMillis, 1 s by
	// default), which a short-lived reader would pay on every open.
	NonDurable     bool
	StartMessageID *MessageID
	// NoTopicCreation: subscribing to a missing topic fails (TopicNotFound)
	// instead of creating it.
	NoTopicCreation bool
	// Permits is the receive window in messages (not entries): what the
	// broker may send plus what was received and not released. It is
	// granted at subscribe and handed back as the caller releases entries.
	// Default 1000.
	Permits int
	// MaxBytes, when set, narrows the window so that, at the size per
	// message of the largest recent entries (msgBytes), received and
	// unreleased entries plus what the broker may still send stay within
	// about MaxBytes: a topic of
	// large messages does not fill memory with a window sized for small
	// ones. The window starts at minPermits until a size is known, and
	// never closes below it (so one entry larger than MaxBytes still
	// passes). It is asked at every grant, so callers can share one byte
	// budget among consumers whose number changes; a window that shrinks
	// grants nothing until what is held falls below it. Nil: no bound.
	MaxBytes func() int64
	// Budget, when set, is a pool of bytes shared with other consumers:
	// no permit is granted before what it may bring is reserved there,
	// and entries received count there until released, so that what the
	// consumers of one budget hold (of any session) and may still be sent
	// stays within it, at the size estimates of MaxBytes (see potential;
	// an entry larger than they are is held whatever the room). A
	// consumer that holds nothing waits in the budget's line for one
	// entry's worth at least; one that holds something never waits: it
	// grants more only when the budget has room at once and no one is
	// waiting, else it lets what it holds drain and then waits in line.
	// What a lost session's permits could bring goes back at once, what
	// its entries hold as the caller releases them, everything at Close.
	// Nil: no budget.
	Budget ByteBudget
	// RecycleOnRelease: Release hands an entry's bytes back for later
	// entries, so a large entry costs no allocation. The caller must then
	// not use the entry's Metadata and Payload (nor anything they were
	// sliced into, nor a send of them still unconfirmed) after Release.
	RecycleOnRelease bool
	// OnActiveChange is told when the broker makes this consumer the active
	// one of the Failover subscription or takes that away, and (false) when
	// the consumer lost its connection. Called from the connection's
	// goroutine: must not block. Optional.
	OnActiveChange func(active bool)
	// Logger; default: the client's.
	Logger *zap.Logger
	// OnLinkChange, optional, is told when the consumer's link to the
	// broker goes down (session lost, reconnecting; or its connection
	// silent) and when it is up again. Called with the consumer's lock
	// held: it must not block nor call the consumer.
	OnLinkChange func(up bool)
}

// Entry is one stored entry, whole: a batch stays packed and compressed.
// Metadata and Payload are owned by the caller (until Release, with
// RecycleOnRelease).
type Entry struct {
	ID          MessageID
	Metadata    []byte
	Payload     []byte
	NumMessages int32 // messages in the entry; permits it took
	// PayloadCRC is Payload's own CRC-32C when the frame's check learnt it
	// (a checksummed frame, a payload above splitCRCAbove): pass it on in
	// Outgoing.PayloadCRC when sending Payload unchanged.
	PayloadCRC      PayloadCRC
	RedeliveryCount uint32
	epoch           uint64    // subscription session that delivered it
	fb              *frameBuf // the buffer Metadata and Payload lie in, when a large frame's own
	fbGen           uint64    // fb's generation when read
	// delivery is the consumer's number for this delivery of the entry
	// (from 1; see credit.unreleased).
	delivery uint64
}

// size is what e counts for in bytes, held and released.
func (e *Entry) size() int64 { return int64(len(e.Metadata) + len(e.Payload)) }

// permits is what e took of the window: its messages, one at least.
func (e *Entry) permits() int64 { return int64(max(e.NumMessages, 1)) }

// Consumer reads the raw entries of one topic partition through a durable
// Failover subscription. It reconnects by itself (new lookup, re-subscribe)
// when the connection is lost or the broker closes it; unacknowledged
// entries are then delivered again. Safe for concurrent use; costs no
// goroutine while connected.
type Consumer struct {
	client *Client
	opts   ConsumerOptions
	log    *zap.Logger

	mu      sync.Mutex
	session *consumerSession // nil while reconnecting
	epoch   uint64
	queue   []Entry
	head    int
	notify  chan struct{} // signalled when the queue grows or the consumer ends
	// credit is the receive accounting (permits, bytes held, the
	// budget's reservation); under mu.
	credit         credit
	redeliverEpoch uint64 // consumer epoch: bumped by RedeliverUnacknowledged
	closed         bool
	err            error // terminal: the consumer gave up
	// rc re-subscribes after a session is lost.
	rc reconnector
	// linkUp is what OnLinkChange was last told.
	linkUp bool
}

// consumerSession is one subscription on one connection; events from an
// older session are ignored.
type consumerSession struct {
	c        *Consumer
	conn     *Conn
	id       uint64
	epoch    uint64
	since    time.Time // subscribed (c.mu)
	received bool      // an entry arrived (c.mu)
	silent   bool      // its connection is silent (c.mu)
	ready    bool      // subscribed (c.mu)
	// acks are the entries acknowledged (Ack) whose ACK is not encoded
	// yet; acksQueued says that its place is queued on conn (c.mu).
	acks       []MessageID
	acksQueued bool
}

// Subscribe subscribes to opts.Topic and grants the first permits. The
// first attempt's error is returned as is (no retry), so a caller sees
// authorization or naming errors at once.
func Subscribe(ctx context.Context, client *Client, opts ConsumerOptions) (*Consumer, error) {
	if opts.Topic == "" || opts.Subscription == "" {
		return nil, errors.New("wire: subscribe: topic and subscription are required")
	}
	if opts.Permits <= 0 {
		opts.Permits = 1000
	}
	if opts.Logger == nil {
		opts.Logger = client.log
	}
	c := &Consumer{
		client: client,
		opts:   opts,
		log:    opts.Logger.WithLazy(zap.String("topic", opts.Topic), zap.String("subscription", opts.Subscription)),
		notify: make(chan struct{}, 1),
	}
	c.credit = credit{permits: opts.Permits, maxBytes: opts.MaxBytes, budget: opts.Budget, onAdmit: c.admitted}
	c.rc = newReconnector("consumer", client, opts.Topic, c.log, &c.mu, c)
	if err := c.connect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Consumer) connect(ctx context.Context) error {
	done, err := c.client.openTurn(ctx)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, c.client.opts.OperationTimeout)
	defer cancel()
	conn, err := c.client.connFor(ctx, c.opts.Topic)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	s := &consumerSession{c: c, conn: conn, id: conn.newHandle(), epoch: c.epoch + 1}
	c.session = s
	redeliverEpoch := c.redeliverEpoch
	c.mu.Unlock()
	if err := conn.addConsumer(s.id, s); err != nil {
		c.dropSession(s)
		return err
	}
	reqID := conn.newRequestID()
	_, err = conn.request(ctx, "subscribe "+c.opts.Topic, reqID, &SubscribeCommand{
		Topic:           c.opts.Topic,
		Subscription:    c.opts.Subscription,
		SubType:         c.subType(),
		ConsumerID:      s.id,
		RequestID:       reqID,
		ConsumerName:    c.opts.Name,
		InitialPosition: c.opts.InitialPosition,
		ConsumerEpoch:   redeliverEpoch,
		NonDurable:      c.opts.NonDurable,
		StartMessageID:  c.opts.StartMessageID,
		NoTopicCreation: c.opts.NoTopicCreation,
	})
	if err != nil {
		conn.removeConsumer(s.id)
		c.dropSession(s)
		c.rc.openFailed(ctx, conn, err, func(reqID uint64) Body { return &CloseConsumer{ConsumerID: s.id, RequestID: reqID} })
		return err
	}
	c.mu.Lock()
	if c.session != s {
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return ErrClosed
		}
		// Closed right behind its success (handleClose has started a
		// reconnect, or the running one goes on): retryable.
		return fmt.Errorf("wire: subscribe %s: %w", c.opts.Topic, errBrokerClosed)
	}
	c.epoch = s.epoch
	s.since = time.Now()
	s.ready = true
	s.silent = conn.Silent()
	c.tellLink()
	// Entries queued by the session before are dropped; those the caller
	// received keep their bytes until it releases them.
	queued := c.dropQueue()
	c.credit.resubscribed()
	n, back := c.grant(true)
	c.mu.Unlock()
	c.credit.settle(queued, back)
	if n == 0 {
		return nil // waiting for the budget
	}
	return conn.writeCommand(&Flow{ConsumerID: s.id, Permits: uint32(n)})
}

// subType is the subscription type the consumer asks for (see
// ConsumerOptions.NonDurable).
func (c *Consumer) subType() SubType {
	if c.opts.NonDurable {
		return Exclusive
	}
	return Failover
}

// dropQueue drops the entries queued and not received (c.mu held): they
// come again. queued is their bytes, to settle.
func (c *Consumer) dropQueue() (queued int64) {
	for i := c.head; i < len(c.queue); i++ {
		e := &c.queue[i]
		c.credit.drop(e.delivery, e.permits(), e.size())
		queued += e.size()
	}
	c.queue, c.head = nil, 0
	return queued
}

// grant returns the permits to grant now and the bytes of reservation
// to hand back (c.mu held; see credit.grant).
func (c *Consumer) grant(now bool) (n, back int64) { return c.credit.grant(c.ready(), now) }

// ready reports whether the current session can be granted permits
// (c.mu held).
func (c *Consumer) ready() bool {
	return !c.closed && c.session != nil && c.session.ready && c.epoch == c.session.epoch
}

// admitted is the budget's admission of w with got bytes (see
// credit.admitted): the consumer grants what they cover on its session.
func (c *Consumer) admitted(w *budgetWait, got int64) {
	c.mu.Lock()
	n, back := c.credit.admitted(w, got, c.ready())
	s := c.session
	c.mu.Unlock()
	if n > 0 {
		_ = s.flow(n)
	}
	c.credit.settle(0, back)
}

// flow grants n permits on s (n > 0).
func (s *consumerSession) flow(n int64) error {
	if n <= 0 {
		return nil
	}
	return s.conn.writeCommand(&Flow{ConsumerID: s.id, Permits: uint32(n)})
}

func (c *Consumer) dropSession(s *consumerSession) {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	c.mu.Unlock()
}

func (s *consumerSession) handleMessage(m *Message, md, payload []byte, pc PayloadCRC, fb *frameBuf) (kept bool) {
	var gen uint64
	if fb == nil {
		buf := make([]byte, 0, len(md)+len(payload))
		buf = append(append(buf, md...), payload...)
		md, payload = buf[:len(md)], buf[len(md):]
	} else {
		gen = fb.gen.Load()
	}
	e := Entry{
		ID:              m.MessageID,
		Metadata:        md[:len(md):len(md)],
		Payload:         payload,
		NumMessages:     numMessages(md),
		PayloadCRC:      pc,
		RedeliveryCount: m.RedeliveryCount,
		epoch:           s.epoch,
		fb:              fb,
		fbGen:           gen,
	}
	c := s.c
	c.mu.Lock()
	if c.session != s || c.epoch != s.epoch {
		c.mu.Unlock()
		return false
	}
	c.credit.arrived(e.permits())
	s.received = true
	if m.HasConsumerEpoch && m.ConsumerEpoch < c.redeliverEpoch {
		// Dispatched before RedeliverUnacknowledged: it comes again.
		// Its permits are granted back at once.
		n, back := c.grant(true)
		c.mu.Unlock()
		_ = s.flow(n)
		c.credit.settle(0, back)
		return false
	}
	var back int64
	e.delivery, back = c.credit.hold(e.permits(), e.size())
	c.queue = append(c.queue, e)
	c.mu.Unlock()
	c.credit.settle(0, back)
	c.wake()
	return true
}

func (s *consumerSession) handleActive(active bool) {
	c := s.c
	c.mu.Lock()
	current := c.session == s
	c.mu.Unlock()
	if current && c.opts.OnActiveChange != nil {
		c.opts.OnActiveChange(active)
	}
}

func (s *consumerSession) handleClose(err error) {
	c := s.c
	c.mu.Lock()
	if c.session != s {
		c.mu.Unlock()
		return
	}
	c.session = nil
	// The session's permits died with it: what they could bring goes
	// back, and a place in the budget's line is left (the next session
	// asks again).
	back := c.credit.lost()
	closed := c.closed
	if !closed {
		c.tellLink()
	}
	churn := c.rc.ended(s.received, s.since)
	c.mu.Unlock()
	c.credit.settle(0, back)
	if closed {
		return
	}
	c.rc.disconnected(err, churn)
	if c.opts.OnActiveChange != nil {
		c.opts.OnActiveChange(false)
	}
	c.rc.start()
}

func (s *consumerSession) handleSilent(silent bool) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != s || c.closed {
		return
	}
	s.silent = silent
	c.tellLink()
}

// tellLink tells OnLinkChange when the link's state changed (c.mu held).
func (c *Consumer) tellLink() {
	tellLink(&c.linkUp, c.session != nil && c.session.ready && !c.session.silent, c.opts.OnLinkChange)
}

// settled: nothing left to reconnect for (c.mu held; see redialer).
func (c *Consumer) settled() bool { return c.session != nil || c.closed || c.err != nil }

func (c *Consumer) reconnectedFields() []zap.Field { return nil }

// end makes the consumer fail with err from now on.
func (c *Consumer) end(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.wake()
}

func (c *Consumer) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Receive returns the next entry, waiting for one. After a reconnect,
// entries not yet acknowledged arrive again.
func (c *Consumer) Receive(ctx context.Context) (Entry, error) {
	for {
		c.mu.Lock()
		if c.head < len(c.queue) {
			e := c.queue[c.head]
			c.queue[c.head] = Entry{}
			c.head++
			if c.head == len(c.queue) {
				c.queue, c.head = c.queue[:0], 0
			}
			c.mu.Unlock()
			return e, nil
		}
		if c.closed {
			c.mu.Unlock()
			return Entry{}, ErrClosed
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return Entry{}, err
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-c.rc.stop:
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		}
	}
}

func (c *Consumer) current() (*consumerSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked()
}

// currentLocked is current with c.mu held.
func (c *Consumer) currentLocked() (*consumerSession, error) {
	if c.closed {
		return nil, ErrClosed
	}
	if c.session == nil || c.epoch != c.session.epoch {
		return nil, errNoConn
	}
	return c.session, nil
}

// Ack acknowledges the entry id (individually). An entry id with
// BatchIndex -1 acknowledges every message of the entry. Fire and forget,
// as in every Pulsar client: an ack lost with its connection is redelivered.
//
// Acks go out together: the first one queues the place of an ACK on the
// connection, and the ACK, encoded when the connection's writer sends
// it, carries every entry acknowledged until then (at most maxConsumerAckIDs
// per ACK). A broker handles one ACK of many entries as one cursor
// update, where one ACK per entry cost it an update each (the drain's
// one per receipt). Commands queued after an Ack go out after its ACK; an
// entry acknowledged after them may go before them, which only ever
// acknowledges it sooner.
func (c *Consumer) Ack(id MessageID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.currentLocked()
	if err != nil {
		return err
	}
	s.acks = append(s.acks, entryOnly(id))
	if s.acksQueued {
		return nil
	}
	// The write lock is taken under c.mu; the writer encodes (appendAcks,
	// which takes c.mu) without it.
	if err := s.conn.writeLater(s.appendAcks); err != nil {
		s.acks = s.acks[:0]
		return err
	}
	s.acksQueued = true
	return nil
}

// maxConsumerAckIDs is the most entries one of Ack's ACKs carries (about
// 20 KB).
const maxConsumerAckIDs = 1000

// appendAcks appends ACKs of the entries acknowledged since the last
// ones to b; on the connection's writer goroutine (see Ack).
func (s *consumerSession) appendAcks(b []byte) []byte {
	c := s.c
	c.mu.Lock()
	ids := s.acks
	s.acks, s.acksQueued = nil, false
	c.mu.Unlock()
	var scratch [256]byte
	for len(ids) > 0 {
		n := min(len(ids), maxConsumerAckIDs)
		b = AppendFrame(b, AppendCommand(scratch[:0], &Ack{ConsumerID: s.id, AckType: AckIndividual, MessageIDs: ids[:n]}))
		ids = ids[n:]
	}
	return b
}

// AckCumulative acknowledges everything up to and including id.
func (c *Consumer) AckCumulative(id MessageID) error {
	s, err := c.current()
	if err != nil {
		return err
	}
	return s.conn.writeCommand(&Ack{ConsumerID: s.id, AckType: AckCumulative, MessageIDs: []MessageID{entryOnly(id)}})
}

func entryOnly(id MessageID) MessageID { return EntryID(id.Ledger, id.Entry) }

// Release hands the permits of e (its message count) back to the broker.
// Call it when e is done with (confirmed by the target), not when it
// arrives, so the window bounds what is in flight. Permits are granted in
// batches of half the window. Entries from before a reconnect grant no
// permits (the new subscription got a full window); with a Budget their
// bytes go back.
//
// Releasing e again (or an entry this consumer did not deliver) does
// nothing: its permits and bytes went back the first time.
//
// With RecycleOnRelease, e's bytes go back for later entries (once, however
// often e is released).
func (c *Consumer) Release(e Entry) error {
	if c.opts.RecycleOnRelease {
		frames.put(e.fb, e.fbGen)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	size, ok := c.credit.release(e.delivery, e.permits(), e.size(), e.epoch, c.epoch)
	if !ok {
		c.mu.Unlock()
		return nil
	}
	n, back := c.grant(false)
	s := c.session
	c.mu.Unlock()
	var err error
	if n > 0 {
		err = s.flow(n)
	}
	c.credit.settle(size, back)
	return err
}

// RedeliverUnacknowledged asks the broker to deliver again every entry not
// yet acknowledged (after the target failed, say). Entries queued but not
// yet received are dropped and their permits granted again; entries the
// broker dispatched before the request are recognised by their consumer
// epoch and dropped too.
func (c *Consumer) RedeliverUnacknowledged() error {
	c.mu.Lock()
	s := c.session
	if s == nil || c.epoch != s.epoch {
		c.mu.Unlock()
		return errNoConn
	}
	queued := c.dropQueue()
	c.redeliverEpoch++
	epoch := c.redeliverEpoch
	n, back := c.grant(true)
	c.mu.Unlock()
	defer c.credit.settle(queued, back)
	if err := s.conn.writeCommand(&RedeliverUnacknowledged{ConsumerID: s.id, ConsumerEpoch: epoch}); err != nil {
		return err
	}
	return s.flow(n)
}

// Close closes the consumer on the broker (the subscription stays) and
// waits for a reconnect in progress to stop.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	s := c.session
	c.session = nil
	// Everything goes back: entries the caller still holds are no longer
	// counted.
	released, back := c.credit.close()
	close(c.rc.stop)
	c.mu.Unlock()
	c.credit.settle(released, back)
	var err error
	if s != nil {
		s.conn.removeConsumer(s.id)
		err = c.rc.closeOnBroker(s.conn, "close consumer", func(reqID uint64) Body { return &CloseConsumer{ConsumerID: s.id, RequestID: reqID} })
	}
	c.rc.wg.Wait()
	if err != nil {
		return fmt.Errorf("wire: close consumer on %s: %w", c.opts.Topic, err)
	}
	return nil
}

// numMessages reads num_messages_in_batch (field 11) from metadata bytes
// without parsing the rest: 1 when absent or unreadable (the caller's
// ParseMetadata reports malformed metadata).
func numMessages(md []byte) int32 {
	n := int32(1)
	for len(md) > 0 {
		num, typ, l := protowire.ConsumeTag(md)
		if l < 0 {
			return 1
		}
		md = md[l:]
		if num == 11 && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(md)
			if l < 0 {
				return 1
			}
			n = int32(v)
			md = md[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, md)
		if l < 0 {
			return 1
		}
		md = md[l:]
	}
	if n < 1 {
		return 1
	}
	return n
}

// LastMessageID asks the broker for the id of the topic's last stored
// entry; ok is false for an empty topic.
func (c *Consumer) LastMessageID(ctx context.Context) (id MessageID, ok bool, err error) {
	r, err := c.lastMessageID(ctx)
	if err != nil {
		return MessageID{}, false, err
	}
	last := r.LastMessageID
	if int64(last.Entry) < 0 || int64(last.Ledger) < 0 {
		return last, false, nil
	}
	return last, true, nil
}

// MarkDelete asks the broker for the subscription's mark-delete position:
// every entry up to it is acknowledged, by this consumer or by the broker
// itself for entries it never dispatches (Pulsar's own markers, entries
// an entry filter rejects). ok is false when the broker does not say (before
// 2.8).
func (c *Consumer) MarkDelete(ctx context.Context) (id MessageID, ok bool, err error) {
	r, err := c.lastMessageID(ctx)
	if err != nil {
		return MessageID{}, false, err
	}
	return r.MarkDelete, r.HasMarkDelete, nil
}

func (c *Consumer) lastMessageID(ctx context.Context) (*GetLastMessageIDResponse, error) {
	s, err := c.current()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.client.opts.OperationTimeout)
	defer cancel()
	op := "get last message id of " + c.opts.Topic
	reqID := s.conn.newRequestID()
	cmd, err := s.conn.request(ctx, op, reqID, &GetLastMessageID{ConsumerID: s.id, RequestID: reqID})
	if err != nil {
		return nil, err
	}
	return asType[*GetLastMessageIDResponse](cmd, op)
}

// LastEntry reads topic's last stored entry (a partition or a
// non-partitioned topic) with two short-lived non-durable readers: one to
// ask for the last id, one positioned on it. ok is false for an empty
// topic; a missing topic is an error (TopicNotFound), not created.
func (c *Client) LastEntry(ctx context.Context, topic string) (e Entry, ok bool, err error) {
	// Readers subscribe as Exclusive: each needs a name of its own, the
	// second too. The broker answers the probe's close before it has
	// removed the probe's non-durable subscription, and a subscribe under
	// the same name in between is refused as "Subscription is fenced"
	// (seen in CI).
	sub := "geo-sidecar-last-entry-" + uuid.NewString()[:8]
	probe, err := Subscribe(ctx, c, ConsumerOptions{Topic: topic, Subscription: sub + "-probe", NonDurable: true, Permits: 1, NoTopicCreation: true})
	if err != nil {
		return Entry{}, false, err
	}
	last, ok, err := probe.LastMessageID(ctx)
	probe.Close()
	if err != nil || !ok {
		return Entry{}, false, err
	}
	// A batch index makes the start inclusive of its entry.
	start := MessageID{Ledger: last.Ledger, Entry: last.Entry, Partition: -1, BatchIndex: 0}
	r, err := Subscribe(ctx, c, ConsumerOptions{Topic: topic, Subscription: sub, NonDurable: true, StartMessageID: &start, Permits: 1, NoTopicCreation: true})
	if err != nil {
		return Entry{}, false, err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	for {
		e, err := r.Receive(ctx)
		if err != nil {
			return Entry{}, false, fmt.Errorf("wire: read last entry %v of %s: %w", last, topic, err)
		}
		if e.ID.Ledger == last.Ledger && e.ID.Entry == last.Entry {
			return e, true, nil
		}
		_ = r.Release(e)
	}
}
