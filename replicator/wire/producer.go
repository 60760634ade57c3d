package wire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	// Topic is a partition or a non-partitioned topic.
	Topic string
	// Name is the producer name, fixed per (source partition, target, and
	// the entry pipe's epoch of ledger ids): the broker's deduplication
	// keys on it, and LastSequenceID reports what it persisted under it.
	// Must not start with "pulsar.repl" (that prefix switches on the
	// broker's replicator mode).
	Name string
	// MaxPending bounds the entries sent and not yet confirmed; Send blocks
	// beyond it. Default 1000.
	MaxPending int
	// Encrypted declares that entries may arrive encrypted. A topic that
	// requires encryption refuses a producer that does not declare it;
	// with it, the broker checks each entry instead and refuses plain
	// ones (SEND_ERROR MetadataError).
	Encrypted bool
	// SendTimeout: when the oldest unconfirmed entry has waited this long,
	// the producer is re-created and the unconfirmed entries sent again.
	// Checked at the connection's keep-alive ticks (no timer per
	// producer), so it fires up to one keep-alive interval late. Default
	// 30s; negative: never.
	SendTimeout time.Duration
	// Logger; default: the client's.
	Logger *zap.Logger
	// OnLinkChange, optional, is told when the producer's link to the
	// broker goes down (session lost, reconnecting; or its connection
	// silent) and when it is up again. Called with the producer's lock
	// held: it must not block nor call the producer.
	OnLinkChange func(up bool)
}

// Outgoing is one entry to send as one SEND. Metadata and Payload must stay
// unchanged until its receipt (they are sent again after a reconnect).
type Outgoing struct {
	Metadata    []byte
	Payload     []byte
	NumMessages int32
	// SequenceID..HighestSequenceID is the range the broker's
	// deduplication checks (HighestSequenceID 0: just SequenceID).
	// Sequence ids must increase from one Send to the next: receipts are
	// matched to entries in order by them.
	SequenceID        uint64
	HighestSequenceID uint64
	// IsChunk marks one chunk of a chunked message (the metadata has
	// chunk_id): the broker then deduplicates by chunk.
	IsChunk bool
	// PayloadCRC, when Known, is the CRC-32C of Payload alone: an entry
	// forwarded with its payload unchanged passes Entry.PayloadCRC, and
	// the SEND's checksum is then built without reading the payload again.
	// A value that is not Payload's makes the broker refuse the entry as
	// corrupt (ChecksumError).
	PayloadCRC PayloadCRC
}

// PayloadCRC is the CRC-32C (Castagnoli) of an entry's payload alone, as
// crc32.Checksum computes it; Known says it was.
type PayloadCRC struct {
	Sum   uint32
	Known bool
}

// Receipt is the broker's confirmation of one entry. A duplicate dropped by
// deduplication is confirmed too (with the id the broker chose for it).
type Receipt struct {
	SequenceID        uint64
	HighestSequenceID uint64
	MessageID         MessageID
}

// Producer sends whole entries to one topic partition, one SEND per entry,
// with confirmations in order. It reconnects by itself (new lookup,
// re-create with the same name, resend what was not confirmed). Safe for
// concurrent use; costs no goroutine while connected.
type Producer struct {
	client *Client
	opts   ProducerOptions
	log    *zap.Logger

	mu      sync.Mutex
	session *producerSession // nil while (re)connecting
	lastSeq int64
	pending []*pendingSend
	calling int // a goroutine runs done callbacks (0 or 1); Flush waits for it too
	// toCall are the done callbacks due, in order, not yet run: the
	// goroutine running callbacks runs them next (see complete).
	toCall  []completion
	changed chan struct{} // closed and replaced when pending shrinks or the producer ends
	waiting bool          // someone waits on changed (else signal is free)
	closed  bool
	err     error // terminal
	// lingering is the last session the broker closed (CLOSE_PRODUCER),
	// still registered on its connection: its receipts still confirm.
	// The broker sends CLOSE_PRODUCER at an unload before it answers the
	// sends it has handed to storage, and answers those under the closed
	// producer's id once they are stored. Dropped, those entries were
	// sent again on the reloaded topic, whose deduplication record can
	// be below them (rebuilt from a snapshot and from the stored
	// entries' metadata, which for forwarded entries names the origin's
	// producer): they were then stored twice. Taken, they leave pending
	// before the next session resends it, as the reloaded topic on the
	// same connection answers PRODUCER_SUCCESS only after the old one
	// closed. It stays until the broker closes a later session or the
	// producer closes.
	lingering *producerSession
	// rc re-creates the producer after a session is lost.
	rc reconnector
	// linkUp is what OnLinkChange was last told.
	linkUp bool
	// maxFrame is the frame size limit of the latest session's
	// connection: Send checks entries against it also while reconnecting.
	maxFrame int
	// recorded is the highest sequence id the broker has shown it
	// recorded for this producer name: the last_sequence_id of a
	// PRODUCER_SUCCESS, or a receipt's (highest) sequence id; -1 while
	// none. A reconnect whose PRODUCER_SUCCESS reports less lost the
	// record (see inDoubt).
	recorded int64
	// brokerClosed: the last session lost was closed by the broker
	// (CLOSE_PRODUCER, an unload), and so lingers (see inDoubt).
	brokerClosed bool
}

type pendingSend struct {
	out    Outgoing
	done   func(Receipt, error)
	sentAt time.Time // last written to a connection; zero while not
	// written: it was written to a connection at least once, so the
	// broker may have stored it (see inDoubt).
	written  bool
	queuedAt time.Time // Send called
	// refused is why the current session's connection cannot take it
	// (ErrTooLarge: its broker's limit is lower than the one it was sent
	// under). It is not written, and fails when its turn comes (once the
	// sends before it are confirmed), so that callbacks stay in order.
	refused error
}

// completion is one done callback due, with its arguments.
type completion struct {
	done func(Receipt, error)
	r    Receipt
	err  error
}

type producerSession struct {
	p         *Producer
	conn      *Conn
	id        uint64
	since     time.Time // created on the broker
	confirmed bool      // a receipt arrived (p.mu)
	silent    bool      // its connection is silent (p.mu)
	// lost is why the session closed before connect made it current (a
	// CLOSE_PRODUCER right behind PRODUCER_SUCCESS, read before connect
	// took the lock); connect then closes it as if current (p.mu).
	lost error
}

// CreateProducer creates the producer on the broker serving opts.Topic.
// The first attempt's error is returned as is.
func CreateProducer(ctx context.Context, client *Client, opts ProducerOptions) (*Producer, error) {
	if opts.Topic == "" || opts.Name == "" {
		return nil, errors.New("wire: create producer: topic and name are required")
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 1000
	}
	if opts.SendTimeout == 0 {
		opts.SendTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = client.log
	}
	p := &Producer{
		client:   client,
		opts:     opts,
		log:      opts.Logger.WithLazy(zap.String("topic", opts.Topic), zap.String("producer", opts.Name)),
		lastSeq:  -1,
		recorded: -1,
		changed:  make(chan struct{}),
	}
	p.rc = newReconnector("producer", client, opts.Topic, p.log, &p.mu, p)
	if err := p.connect(ctx); err != nil {
		p.Close()
		return nil, err
	}
	client.track(p, true)
	return p, nil
}

func (p *Producer) connect(ctx context.Context) error {
	done, err := p.client.openTurn(ctx)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, p.client.opts.OperationTimeout)
	defer cancel()
	conn, err := p.client.connFor(ctx, p.opts.Topic)
	if err != nil {
		return err
	}
	s := &producerSession{p: p, conn: conn, id: conn.newHandle()}
	if err := conn.addProducer(s.id, s); err != nil {
		return err
	}
	reqID := conn.newRequestID()
	cmd, err := conn.request(ctx, "create producer on "+p.opts.Topic, reqID, &ProducerCommand{
		Topic:        p.opts.Topic,
		ProducerID:   s.id,
		RequestID:    reqID,
		ProducerName: p.opts.Name,
		Encrypted:    p.opts.Encrypted,
	})
	if err == nil {
		var ps *ProducerSuccess
		if ps, err = asType[*ProducerSuccess](cmd, "create producer"); err == nil {
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				conn.removeProducer(s.id)
				_ = conn.writeCommand(&CloseProducer{ProducerID: s.id, RequestID: conn.newRequestID()})
				return ErrClosed
			}
			p.lastSeq = ps.LastSequenceID
			if err := p.inDoubt(ps.LastSequenceID); err != nil {
				// Resent, the entries the lost record no longer covers
				// and the broker stored before it lost it would be
				// stored twice: fail them all, and the producer, for
				// the caller to find out what the topic holds.
				p.log.Warn("the broker's deduplication record for the producer went back: in-flight entries fail as in doubt instead of being sent again",
					zap.Int64("last_sequence_id", ps.LastSequenceID), zap.Int64("recorded", p.recorded), zap.Int("pending", len(p.pending)))
				failed := p.pending
				p.pending = nil
				p.err = err
				p.complete(failed, Receipt{}, err)
				conn.removeProducer(s.id)
				_ = conn.writeCommand(&CloseProducer{ProducerID: s.id, RequestID: conn.newRequestID()})
				return nil
			}
			p.recorded = max(p.recorded, ps.LastSequenceID)
			p.maxFrame = conn.maxFrame
			s.since = time.Now()
			s.silent = conn.Silent()
			p.session = s
			p.tellLink()
			lost := s.lost
			// Resend, in order, whatever the previous session left
			// unconfirmed.
			now := time.Now()
			for _, ps := range p.pending {
				if lost != nil {
					break
				}
				ps.refused = nil
				if err := p.writeSend(s, ps.out); err != nil {
					if !errors.Is(err, ErrTooLarge) {
						break // the connection closed: its close reconnects again
					}
					// Stopping here stalled the producer for good: nothing
					// behind it was sent, and every send timeout's
					// re-creation stopped here again.
					ps.refused = err
					continue
				}
				ps.sentAt = now
				ps.written = true
			}
			if failed := p.popRefused(); failed != nil {
				p.complete(failed, Receipt{}, nil)
			} else {
				p.mu.Unlock()
			}
			if lost != nil {
				s.handleClose(lost)
			}
			return nil
		}
	}
	conn.removeProducer(s.id)
	p.rc.openFailed(ctx, conn, err, func(reqID uint64) Body { return &CloseProducer{ProducerID: s.id, RequestID: reqID} })
	return err
}

// inDoubt returns an ErrInDoubt when a reconnect's PRODUCER_SUCCESS
// reports last (its last_sequence_id) below what the broker had shown it
// recorded for the producer name (recorded) while entries written to an
// earlier session are unconfirmed: the broker lost the record that would
// drop the ones it stored. p.mu held.
//
// A broker that crashed rebuilds its record from its last snapshot and
// from the stored entries' metadata, whose producer_name is the origin's
// for forwarded copies: the producer's record comes back unknown (-1) or
// behind. The entries stored before the crash, whose receipts were lost
// with the broker, are then not recognized as duplicates, and a resend
// stored them twice, behind later ones. A connection lost with the broker
// alive keeps the record (last is at least recorded), and the resend
// stays transparent. A broker without deduplication reports -1 always,
// below any receipt's sequence id: there every reconnect with written
// entries unconfirmed is in doubt, and the caller's read-back spares it
// the duplicates a resend would store.
//
// What it cannot tell: a record that comes back at or above recorded but
// below entries stored before the crash (a snapshot taken after the last
// receipt), and a crash before the producer's first receipt (nothing to
// compare with; a record at the first report is also what a plain drop
// shows). Those are resent, as before.
//
// A session the broker closed (an unload) is not in doubt while its
// connection is open: the broker answers the sends it stored under the
// closed producer's id before the reloaded topic answers PRODUCER_SUCCESS
// (see lingering), so what is pending was not stored, and the reloaded
// topic's record, rebuilt, may well be lower.
func (p *Producer) inDoubt(last int64) error {
	if last >= p.recorded {
		return nil
	}
	if p.brokerClosed && p.lingering != nil && p.lingering.conn.Err() == nil {
		return nil
	}
	if !slices.ContainsFunc(p.pending, func(ps *pendingSend) bool { return ps.written }) {
		return nil // nothing was written: nothing can be stored twice
	}
	return fmt.Errorf("%w: %s: the broker's record for %s is at %d, below the %d it had recorded", ErrInDoubt, p.opts.Topic, p.opts.Name, last, p.recorded)
}

// writeSend queues one SEND on s. p.mu must be held, so that SENDs go out
// in pending order.
func (p *Producer) writeSend(s *producerSession, out Outgoing) error {
	return s.conn.writePayload(&Send{
		ProducerID:        s.id,
		SequenceID:        out.SequenceID,
		NumMessages:       max(out.NumMessages, 1),
		HighestSequenceID: out.HighestSequenceID,
		IsChunk:           out.IsChunk,
	}, out.Metadata, out.Payload, out.PayloadCRC)
}

// LastSequenceID is the last_sequence_id of the latest PRODUCER_SUCCESS:
// with deduplication on, the highest sequence id the broker persisted for
// this producer name; -1 without deduplication or before any.
func (p *Producer) LastSequenceID() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSeq
}

// Send queues out and returns; done is called exactly once, with the
// receipt or an error, in the order of Send calls. It blocks while
// MaxPending entries are unconfirmed. done runs on the connection's
// goroutine (or another of the producer's, one callback at a time): it
// must not block. An entry larger than the broker's limit
// (its connection's, or while reconnecting the last connection's) is
// refused with ErrTooLarge, and done is not called.
func (p *Producer) Send(ctx context.Context, out Outgoing, done func(Receipt, error)) error {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return err
		}
		if len(p.pending) < p.opts.MaxPending {
			break
		}
		p.waiting = true
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	s := p.session
	maxFrame := p.maxFrame
	if s != nil {
		maxFrame = s.conn.maxFrame
	}
	// Checked before it is queued, under the lock: queued while
	// reconnecting, it was found too large only by the resend, which
	// stopped there for good; taken back out after its write failed, it
	// stayed queued when a concurrent Send had queued another behind it.
	if err := checkSize(out.Metadata, out.Payload, maxFrame); err != nil {
		p.mu.Unlock()
		return err
	}
	now := time.Now()
	ps := &pendingSend{out: out, done: done, queuedAt: now}
	p.pending = append(p.pending, ps)
	if s != nil && p.writeSend(s, out) == nil {
		ps.sentAt = now
		ps.written = true
	} // else queued: the connection closed, and the reconnect resends it
	p.mu.Unlock()
	return nil
}

// Flush waits until every entry sent so far is confirmed or failed.
func (p *Producer) Flush(ctx context.Context) error {
	for {
		p.mu.Lock()
		if (len(p.pending) == 0 || p.closed || p.err != nil) && p.calling == 0 {
			err := p.err
			p.mu.Unlock()
			return err
		}
		p.waiting = true
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// signal wakes Send and Flush waiters; p.mu must be held.
func (p *Producer) signal() {
	if !p.waiting {
		return
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.waiting = false
}

func (s *producerSession) handleReceipt(r *SendReceipt) {
	p := s.p
	p.mu.Lock()
	current := p.session == s
	if !current && p.lingering != s || len(p.pending) == 0 {
		p.mu.Unlock()
		return
	}
	head := p.pending[0]
	switch {
	case r.SequenceID < head.out.SequenceID:
		p.mu.Unlock()
		return // a late receipt for an entry already confirmed
	case r.SequenceID > head.out.SequenceID && !current:
		// A closed session's receipt does not match: the broker stores
		// a producer's sends in order, so the head was not stored by it
		// either; the current session's sends will tell.
		p.mu.Unlock()
		return
	case r.SequenceID > head.out.SequenceID:
		p.mu.Unlock()
		s.restart(fmt.Errorf("receipt for sequence id %d while %d is unconfirmed", r.SequenceID, head.out.SequenceID))
		return
	}
	p.pending[0] = nil
	p.pending = p.pending[1:]
	if current {
		s.confirmed = true
	}
	p.recorded = max(p.recorded, receiptRecorded(r))
	done := append([]*pendingSend{head}, p.popRefused()...)
	p.complete(done, Receipt{SequenceID: r.SequenceID, HighestSequenceID: r.HighestSequenceID, MessageID: r.MessageID}, nil)
}

// receiptRecorded is the highest sequence id a receipt shows the broker
// recorded for the producer name: its sequence id, or the highest one it
// names when that is above it and a signed id. Pulsar's broker answers a
// send of a batched entry with no highest sequence id of its own with
// highest_sequence_id -1, which arrives as 2^64-1: taken as the highest
// (and then dropped as no signed id), the record stayed at the first
// PRODUCER_SUCCESS's, so a crashed broker's lost record was not seen as
// lost and the copies in flight were resent (TestTargetOutage stored the
// last batch before the crash twice in 3 of 4 runs). -1 when the
// sequence id itself is no signed id.
func receiptRecorded(r *SendReceipt) int64 {
	seq := r.SequenceID
	if r.HighestSequenceID > seq && r.HighestSequenceID <= math.MaxInt64 {
		seq = r.HighestSequenceID
	}
	if seq > math.MaxInt64 {
		return -1
	}
	return int64(seq)
}

// popRefused takes the refused sends at the head of pending out (p.mu
// held): their turn to fail has come.
func (p *Producer) popRefused() []*pendingSend {
	n := 0
	for n < len(p.pending) && p.pending[n].refused != nil {
		n++
	}
	if n == 0 {
		return nil
	}
	failed := slices.Clone(p.pending[:n])
	clear(p.pending[:n])
	p.pending = p.pending[n:]
	return failed
}

// complete runs the done callbacks of sends taken out of pending, outside
// the lock, and then wakes Send and Flush waiters. p.mu must be held; it is
// released. r is the receipt for a single success; failures get err, and
// refused sends their refusal.
//
// The callbacks are queued under the lock, in the order the sends left
// pending, and one goroutine at a time runs the queue: if another one is
// running callbacks, it runs these too, after the ones before them, and
// complete returns at once. Each caller running its own outside the lock
// broke the order: the reconnect's goroutine failing the refused sends at
// the head after the resend, and the connection's goroutine, handling the
// receipt of a send resent behind them, ran their callbacks at the same
// time, the later ones first when the first was descheduled.
func (p *Producer) complete(sends []*pendingSend, r Receipt, err error) {
	for _, ps := range sends {
		if ps.done == nil {
			continue
		}
		c := completion{done: ps.done, r: r}
		switch {
		case ps.refused != nil:
			c.r, c.err = Receipt{SequenceID: ps.out.SequenceID}, ps.refused
		case err != nil:
			c.r, c.err = Receipt{SequenceID: ps.out.SequenceID}, err
		}
		p.toCall = append(p.toCall, c)
	}
	if p.calling > 0 {
		p.mu.Unlock()
		return
	}
	p.calling++
	for len(p.toCall) > 0 {
		calls := p.toCall
		p.toCall = nil
		p.mu.Unlock()
		for _, c := range calls {
			c.done(c.r, c.err)
		}
		p.mu.Lock()
	}
	p.calling--
	p.signal()
	p.mu.Unlock()
}

func (s *producerSession) handleSendError(e *SendError) {
	p := s.p
	err := &BrokerError{Op: "send to " + p.opts.Topic, Code: e.Error, Message: e.Message}
	p.mu.Lock()
	if p.session != s || len(p.pending) == 0 {
		p.mu.Unlock()
		return
	}
	var failed []*pendingSend
	switch {
	case e.Error == ChecksumError && p.pending[0].out.SequenceID == e.SequenceID:
		// That entry is corrupt; the ones after it are unaffected.
		failed = []*pendingSend{p.pending[0]}
		p.pending = p.pending[1:]
		failed = append(failed, p.popRefused()...)
	case !err.Retryable() || e.Error == MetadataError:
		// On a send, MetadataError is the broker refusing the entry's
		// metadata by policy ("Messages must be encrypted" on a topic
		// that requires encryption): sent again, it is refused again.
		failed = p.pending
		p.pending = nil
		p.err = err
		p.session = nil
	}
	if failed != nil {
		terminal := p.err != nil
		p.complete(failed, Receipt{}, err)
		if terminal {
			s.conn.removeProducer(s.id)
			_ = s.conn.writeCommand(&CloseProducer{ProducerID: s.id, RequestID: s.conn.newRequestID()})
		}
		return
	}
	p.mu.Unlock()
	s.restart(err)
}

func (s *producerSession) checkStalled(now time.Time) {
	p := s.p
	if p.opts.SendTimeout < 0 {
		return
	}
	p.mu.Lock()
	if p.session != s || len(p.pending) == 0 {
		p.mu.Unlock()
		return
	}
	head := p.pending[0]
	waited := now.Sub(head.sentAt)
	p.mu.Unlock()
	if head.sentAt.IsZero() || waited < p.opts.SendTimeout {
		return
	}
	s.restart(fmt.Errorf("%w: no receipt for sequence id %d after %s", errSendTimeout, head.out.SequenceID, waited.Round(time.Millisecond)))
}

// restart drops this session on the broker and reconnects, which resends
// the unconfirmed entries in order.
func (s *producerSession) restart(reason error) {
	s.conn.removeProducer(s.id)
	_ = s.conn.writeCommand(&CloseProducer{ProducerID: s.id, RequestID: s.conn.newRequestID()})
	s.handleClose(reason)
}

func (s *producerSession) handleClose(err error) {
	p := s.p
	p.mu.Lock()
	if p.session != s {
		if s.lost == nil {
			s.lost = err
		}
		p.mu.Unlock()
		return
	}
	p.session = nil
	p.brokerClosed = errors.Is(err, errBrokerClosed)
	if p.brokerClosed {
		p.linger(s)
	}
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.tellLink()
	churn := p.rc.ended(s.confirmed, s.since)
	p.mu.Unlock()
	p.rc.disconnected(err, churn)
	p.rc.start()
}

// linger keeps s, which the broker closed, taking its receipts (see
// Producer.lingering), and removes the one before it from its
// connection. p.mu held.
func (p *Producer) linger(s *producerSession) {
	if old := p.lingering; old != nil && old != s {
		old.conn.removeProducer(old.id)
	}
	p.lingering = s
}

func (s *producerSession) handleSilent(silent bool) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.session != s || p.closed {
		return
	}
	s.silent = silent
	p.tellLink()
}

// tellLink tells OnLinkChange when the link's state changed (p.mu held).
func (p *Producer) tellLink() {
	tellLink(&p.linkUp, p.session != nil && !p.session.silent, p.opts.OnLinkChange)
}

// oldestUnconfirmed is when the oldest entry not yet confirmed was handed
// to Send; zero when none.
func (p *Producer) oldestUnconfirmed() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		return time.Time{}
	}
	return p.pending[0].queuedAt
}

// settled: nothing left to reconnect for (p.mu held; see redialer).
func (p *Producer) settled() bool { return p.session != nil || p.closed || p.err != nil }

func (p *Producer) reconnectedFields() []zap.Field {
	return []zap.Field{zap.Int64("last_sequence_id", p.LastSequenceID())}
}

// end fails the producer and every unconfirmed entry with err.
func (p *Producer) end(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	failed := p.pending
	p.pending = nil
	p.complete(failed, Receipt{}, err)
}

// Close closes the producer on the broker. Entries not yet confirmed fail
// with ErrClosed (call Flush first to wait for them).
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	s := p.session
	p.session = nil
	if l := p.lingering; l != nil {
		l.conn.removeProducer(l.id)
		p.lingering = nil
	}
	close(p.rc.stop)
	p.mu.Unlock()
	p.client.track(p, false)
	var err error
	if s != nil {
		s.conn.removeProducer(s.id)
		err = p.rc.closeOnBroker(s.conn, "close producer", func(reqID uint64) Body { return &CloseProducer{ProducerID: s.id, RequestID: reqID} })
	}
	p.rc.wg.Wait()
	p.end(ErrClosed)
	if err != nil {
		return fmt.Errorf("wire: close producer on %s: %w", p.opts.Topic, err)
	}
	return nil
}
