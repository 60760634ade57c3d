package wire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
)

// A move (Client.MoveSubscription) carries a subscription's mark-delete
// position forward with the acknowledgement of a consumer that attaches
// for a few milliseconds, takes no permits and is never the one the broker
// dispatches to: an admin reset-cursor would disconnect every consumer
// attached, this disconnects none (docs/design/subscription-follow.md §4
// and §5; experiments E1, E3, E7).

// Defaults of a Move.
const (
	// DefaultMoveStepTimeout bounds each step of a move (lookup, connect,
	// subscribe, each request, the close). A step takes about a
	// millisecond on loopback (E1, E3); the design's 100 ms cut-off is
	// for a production network, and a loaded test machine needs more.
	DefaultMoveStepTimeout = 2 * time.Second
	// DefaultMoveMaxAcks is the most entries one Shared or Key_Shared
	// move acknowledges; a later move goes on from where it stopped.
	DefaultMoveMaxAcks = 100_000
)

// maxAckIDs is the most entry ids one ACK carries (about 100 KB); the
// connection's frame limit may make it fewer.
const maxAckIDs = 10_000

// movePriority is the priority level a move's consumer attaches with: the
// broker chooses a Failover subscription's active consumer among the
// lowest level, so an application's consumer (level 0 unless set) stays
// active and keeps its messages (E1). At level 0 the move's consumer can
// take the partition over: in E2 the application was inactive from 1 s
// after the attach until 1 s after it ended, and got nothing meanwhile.
// In Shared and Key_Shared subscriptions a consumer without permits gets
// nothing whatever its level; the level only puts it last.
const movePriority = math.MaxInt32

// ErrSubscriptionBusy is returned (wrapped, with the *BrokerError) when the
// broker refuses a move's consumer: the subscription's type, its Key_Shared
// mode or allowOutOfOrderDelivery differ from the move's while a consumer
// is attached, it is Exclusive and taken, a consumer limit is reached
// (ConsumerBusy), or a STICKY range conflicts (ConsumerAssignError). The
// subscription is unchanged; the caller falls back to another route and
// should not retry at once (design §4 step 1).
var ErrSubscriptionBusy = errors.New("wire: the subscription refused the move's consumer")

// ErrLedgersUnknown is returned by a Shared or Key_Shared move whose
// mark-delete position and target lie in different ledgers when
// Move.Ledgers does not list the ledgers between them: which entries to
// acknowledge is then unknown, so none were. Read the topic's ledgers
// (internal stats) and move again.
var ErrLedgersUnknown = errors.New("wire: the ledgers between the mark-delete position and the target are not known")

// ErrNoMarkDelete is returned when the broker's GET_LAST_MESSAGE_ID
// answer carries no mark-delete position (brokers before 2.8): the move
// cannot tell whether it took.
var ErrNoMarkDelete = errors.New("wire: the broker does not report the mark-delete position")

// ErrStepTimeout is returned (wrapped) when a step of a move got no answer
// within Move.StepTimeout. The move's connection was closed with it, so
// that the broker drops the move's consumer, whatever it had done so far.
var ErrStepTimeout = errors.New("wire: a step of the move got no answer in time")

// Move says which subscription to move where, and how to attach to it.
type Move struct {
	// Topic is a partition or a non-partitioned topic. A missing topic is
	// an error (TopicNotFound): a move never creates one.
	Topic string
	// Subscription is the durable subscription to move. A missing one is
	// created at the earliest position and then moved; creating it by
	// admin instead keeps its type open for the applications (design §3).
	Subscription string
	// Type is Failover, Shared or KeyShared: the type the subscription's
	// applications use. While a consumer is attached the broker admits
	// only one of the same type; a consumer attached to an Exclusive
	// subscription is refused, and attaching while its application
	// reconnects would make that application's subscribe fail (E6), so
	// Exclusive is not accepted here.
	Type SubType
	// KeySharedAllowOutOfOrder, for KeyShared, is the applications'
	// allowOutOfOrderDelivery: the broker refuses a consumer whose setting
	// differs (E4). A move's Key_Shared consumer is AUTO_SPLIT, never
	// STICKY: any hash range it took could be one an application's
	// consumer brings when it reconnects (E5).
	KeySharedAllowOutOfOrder bool
	// ConsumerName names the move's consumer in the broker's stats (say
	// "<cursor prefix>.follow-<instance>"). Empty: the broker picks one.
	ConsumerName string
	// To is where the subscription should be: everything up to and
	// including To was consumed. A To inside a batch (BatchIndex >= 0)
	// moves to the entry before it, whose messages are all consumed
	// (MoveResult.Target); the entry itself still holds unconsumed ones.
	To MessageID
	// Ledgers, for Shared and KeyShared, are the topic's ledgers in order
	// with their entry counts, as internal stats list them: from the one
	// holding the mark-delete position (unless deleted since) through
	// To's. Those subscriptions take no cumulative acknowledgement, so a
	// move acknowledges each entry after the mark-delete position up to
	// To (E3, E8); within one ledger those are known without the list.
	// A move that finds the mark-delete position in a ledger before To's
	// and the ledgers between not listed acknowledges nothing and returns
	// ErrLedgersUnknown. The Failover move needs no list: one cumulative
	// acknowledgement crosses ledgers.
	Ledgers []Ledger
	// Individually, for Shared and KeyShared, are entries after To that
	// were consumed as well: the acknowledgement holes a subscription
	// keeps past its mark-delete position, which a switchover copies
	// (subscription/switchover). They are acknowledged individually after
	// the entries up to To, in the order given; those at or before the
	// mark-delete position or past the topic's last entry are left out
	// (the broker would ignore them). They do not count against MaxAcks:
	// each was consumed, wherever the move stops.
	Individually []MessageID
	// OnlyIndividually: acknowledge Individually and nothing else (no
	// entry up to To, which is not used): the continuous follow's ack
	// holes, whose mark-delete position the update moves apart
	// (replicator/subsync). Shared and KeyShared only; MoveResult.Target
	// is then the mark-delete position read before.
	OnlyIndividually bool
	// MaxAcks bounds the entries a Shared or KeyShared move
	// acknowledges (the first ones after the mark-delete position, so it
	// follows them at once). Default DefaultMoveMaxAcks.
	MaxAcks int
	// StepTimeout bounds each step; default DefaultMoveStepTimeout. A step
	// past it ends the move with ErrStepTimeout and closes its connection.
	StepTimeout time.Duration
}

// Ledger is one ledger of a topic and the number of entries it holds.
type Ledger struct {
	ID      uint64
	Entries int64
}

// MoveResult is what a move did and what the broker reported after it.
type MoveResult struct {
	// Target is where the move aimed: To, or the entry before To's when To
	// is inside a batch (entry -1, all ones, when To's entry is 0).
	Target MessageID
	// MarkDelete is the subscription's mark-delete position the broker
	// reported after the acknowledgements (GET_LAST_MESSAGE_ID field 3).
	// The acknowledgements' receipts would say nothing: the broker
	// answers success also for an acknowledgement it ignored (E1).
	MarkDelete MessageID
	// Before is the mark-delete position before the move, read by Shared
	// and KeyShared moves only (HasBefore): a Failover move acknowledges
	// blindly, since the broker refuses a step back by itself.
	Before    MessageID
	HasBefore bool
	// Acked is the number of entry ids acknowledged.
	Acked int
	// ActiveTold says the broker told the move's consumer whether it is
	// the active one (Failover), Active what it said last. A consumer that
	// is not the broker's choice is told "inactive" at once (E1); one that
	// is becomes active with the notice held back by the failover delay
	// (1 s). So a move that was not told "inactive" while an application's
	// consumer was attached may have taken the partition over for its
	// attach (design §5: count it).
	ActiveTold, Active bool
	// Attached is how long the move's consumer was attached: from
	// SUBSCRIBE's answer to CLOSE_CONSUMER's (or to the connection's cut).
	// Key_Shared keys that hash to it wait that long (E4).
	Attached time.Duration
	// ServerVersion is the broker's, from CONNECTED, for the version floor
	// of design §7.
	ServerVersion string
}

// Reached reports whether the mark-delete position is at or after the
// target: the move took, or there was nothing to move.
func (r MoveResult) Reached() bool { return comparePosition(r.MarkDelete, r.Target) >= 0 }

// MoveSubscription moves m.Subscription's mark-delete position forward to
// m.To with a consumer of its own that attaches for the move and never
// receives anything; no admin call (design §4):
//
//  1. SUBSCRIBE: durable, m.Type (KeyShared: AUTO_SPLIT with
//     m.KeySharedAllowOutOfOrder), priority level 2³¹−1, no topic
//     creation, and no FLOW ever, so the broker dispatches nothing to it.
//     Nothing else is sent before SUBSCRIBE's answer: the broker drops an
//     acknowledgement of a consumer it is still creating, silently (E9).
//  2. Failover: one cumulative ACK of the target. Shared and KeyShared:
//     GET_LAST_MESSAGE_ID for the mark-delete position md; if md is not
//     before the target nothing is sent, else an individual ACK of every
//     entry of (md, target] in order (in commands of at most 10,000 ids
//     within the frame limit), ending at the topic's last entry.
//  3. GET_LAST_MESSAGE_ID: the mark-delete position after (the broker
//     handles the ACK first: same connection, in order).
//  4. CLOSE_CONSUMER, also on every error after SUBSCRIBE was sent.
//
// The broker moves a mark-delete position forward only and never past the
// last entry: it ignores a cumulative ack before the position or after the
// last entry, and individual acks at or before the position. So a move
// never takes a subscription back, and the caller learns whether it took
// from MoveResult.Reached, not from an error. A refused SUBSCRIBE
// gives ErrSubscriptionBusy (or the *BrokerError for other codes); a
// CLOSE_CONSUMER from the broker or a lost connection ends the move with
// an error (there is no reconnect); a step without an answer within
// m.StepTimeout gives ErrStepTimeout and closes the connection, as does a
// CLOSE_CONSUMER without one (then the move's result stands).
//
// Moves share the client's connections, so a cut connection ends every
// move on it; use a Client of its own for moves, apart from the data
// path's consumers and producers. Safe for concurrent use.
func (c *Client) MoveSubscription(ctx context.Context, m Move) (MoveResult, error) {
	if err := m.check(); err != nil {
		return MoveResult{}, err
	}
	if m.StepTimeout <= 0 {
		m.StepTimeout = DefaultMoveStepTimeout
	}
	if m.MaxAcks <= 0 {
		m.MaxAcks = DefaultMoveMaxAcks
	}
	mv := &move{c: c, m: m, res: MoveResult{Target: moveTarget(m.To)}}
	mv.log = c.log.WithLazy(zap.String("topic", m.Topic), zap.String("subscription", m.Subscription))
	err := mv.run(ctx)
	if err != nil {
		err = fmt.Errorf("wire: move %s of %s to %v: %w", m.Subscription, m.Topic, mv.res.Target, err)
	}
	return mv.res, err
}

func (m *Move) check() error {
	if m.Topic == "" || m.Subscription == "" {
		return errors.New("wire: move: topic and subscription are required")
	}
	switch m.Type {
	case Failover, Shared, KeyShared:
	default:
		return fmt.Errorf("wire: move %s of %s: subscription type %d: want Failover, Shared or KeyShared", m.Subscription, m.Topic, m.Type)
	}
	if len(m.Individually) > 0 && m.Type == Failover {
		return fmt.Errorf("wire: move %s of %s: individual acknowledgements past the target need Shared or KeyShared", m.Subscription, m.Topic)
	}
	if m.OnlyIndividually {
		if len(m.Individually) == 0 {
			return fmt.Errorf("wire: move %s of %s: only individual acknowledgements, and none given", m.Subscription, m.Topic)
		}
		return nil
	}
	if int64(m.To.Ledger) < 0 || int64(m.To.Entry) < 0 {
		return fmt.Errorf("wire: move %s of %s: target %v is not an entry", m.Subscription, m.Topic, m.To)
	}
	return nil
}

// moveTarget is the entry a move aims at: to, or the entry before to's when
// to is inside a batch (E8: entry -1 is valid).
func moveTarget(to MessageID) MessageID {
	if to.BatchIndex >= 0 {
		return EntryID(to.Ledger, uint64(int64(to.Entry)-1))
	}
	return EntryID(to.Ledger, to.Entry)
}

// comparePosition orders entry positions (ledger, entry), with -1 (all
// ones) before 0 as the broker does; batch indexes are ignored.
func comparePosition(a, b MessageID) int {
	switch {
	case int64(a.Ledger) != int64(b.Ledger):
		return cmpInt64(int64(a.Ledger), int64(b.Ledger))
	default:
		return cmpInt64(int64(a.Entry), int64(b.Entry))
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// entriesAfter lists the entries of (md, to], in order and at most limit,
// never past last. ledgers are as Move.Ledgers says; they are needed only
// when md and to lie in different ledgers.
func entriesAfter(md, to, last MessageID, ledgers []Ledger, limit int) ([]MessageID, error) {
	if comparePosition(last, to) < 0 {
		to = last
	}
	if comparePosition(md, to) >= 0 || limit <= 0 {
		return nil, nil
	}
	var out []MessageID
	add := func(ledger uint64, from, through int64) {
		for e := from; e <= through && len(out) < limit; e++ {
			out = append(out, EntryID(ledger, uint64(e)))
		}
	}
	next := int64(md.Entry) + 1 // md's entry may be -1: nothing of its ledger is acknowledged
	if md.Ledger == to.Ledger {
		add(to.Ledger, next, int64(to.Entry))
		return out, nil
	}
	known := func() error {
		return fmt.Errorf("%w: mark-delete position %v, target %v, %d ledgers listed", ErrLedgersUnknown, md, to, len(ledgers))
	}
	iMD, iTo := -1, -1
	for i, l := range ledgers {
		if i > 0 && l.ID <= ledgers[i-1].ID {
			return nil, fmt.Errorf("wire: ledgers out of order: %d after %d", l.ID, ledgers[i-1].ID)
		}
		switch l.ID {
		case md.Ledger:
			iMD = i
		case to.Ledger:
			iTo = i
		}
	}
	// md's ledger may be gone (deleted once consumed, md on its last
	// entry); one listed after the first is not.
	if iTo < 0 || (iMD < 0 && md.Ledger >= ledgers[0].ID) {
		return nil, known()
	}
	from := iMD
	if iMD >= 0 {
		add(md.Ledger, next, ledgers[iMD].Entries-1)
	}
	for i := from + 1; i < iTo; i++ {
		add(ledgers[i].ID, 0, ledgers[i].Entries-1)
	}
	add(to.Ledger, 0, int64(to.Entry))
	return out, nil
}

// move is one MoveSubscription in progress.
type move struct {
	c   *Client
	m   Move
	log *zap.Logger
	res MoveResult

	conn *Conn
	id   uint64
	sink *moveSink
	// ctx ends when the broker closes the consumer or the connection is
	// lost (with that cause), or when the caller's ends.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// moveSink is the move's consumer as the connection sees it. The broker
// sends it nothing but ACTIVE_CONSUMER_CHANGE (no permits); a CLOSE_CONSUMER
// or the connection's loss ends the move.
type moveSink struct {
	cancel context.CancelCauseFunc

	mu                 sync.Mutex
	activeTold, active bool
}

func (s *moveSink) handleMessage(*Message, []byte, []byte, PayloadCRC, *frameBuf) bool { return false }

func (s *moveSink) handleActive(active bool) {
	s.mu.Lock()
	s.activeTold, s.active = true, active
	s.mu.Unlock()
}

func (s *moveSink) handleClose(err error) { s.cancel(err) }

func (mv *move) run(parent context.Context) error {
	if err := mv.connect(parent); err != nil {
		return err
	}
	mv.ctx, mv.cancel = context.WithCancelCause(parent)
	defer mv.cancel(nil)
	mv.sink = &moveSink{cancel: mv.cancel}
	mv.id = mv.conn.newHandle()
	if err := mv.conn.addConsumer(mv.id, mv.sink); err != nil {
		return err
	}
	err := mv.subscribe()
	attached := time.Now()
	if err == nil {
		err = mv.acknowledge()
	}
	mv.sink.mu.Lock()
	mv.res.ActiveTold, mv.res.Active = mv.sink.activeTold, mv.sink.active
	mv.sink.mu.Unlock()
	mv.close(err)
	mv.res.Attached = time.Since(attached)
	if err != nil {
		return err
	}
	mv.log.Debug("subscription moved", zap.Stringer("target", mv.res.Target), zap.Stringer("mark_delete", mv.res.MarkDelete),
		zap.Int("acked", mv.res.Acked), zap.Duration("attached", mv.res.Attached))
	return nil
}

// connect looks the topic up and gets the connection to its broker, each
// within a step.
func (mv *move) connect(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, mv.m.StepTimeout)
	defer cancel()
	b, err := mv.c.Lookup(ctx, mv.m.Topic)
	if err != nil {
		return mv.stepErr(parent, ctx, "lookup", err)
	}
	ctx2, cancel2 := context.WithTimeout(parent, mv.m.StepTimeout)
	defer cancel2()
	mv.conn, err = mv.c.Conn(ctx2, b)
	if err != nil {
		mv.c.ForgetLookup(mv.m.Topic)
		return mv.stepErr(parent, ctx2, "connect", err)
	}
	mv.res.ServerVersion = mv.conn.ServerVersion()
	return nil
}

// stepErr turns a step's failure into the move's error: ErrStepTimeout
// when the step's own deadline passed.
func (mv *move) stepErr(parent, step context.Context, what string, err error) error {
	if parent.Err() == nil && errors.Is(step.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (%s)", what, ErrStepTimeout, mv.m.StepTimeout)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// request sends body and waits for its answer within a step. It ends
// early when the consumer is closed by the broker or its connection lost.
func (mv *move) request(what string, id uint64, body Body) (Command, error) {
	if mv.ctx.Err() != nil {
		return Command{}, fmt.Errorf("%s: %w", what, context.Cause(mv.ctx))
	}
	ctx, cancel := context.WithTimeout(mv.ctx, mv.m.StepTimeout)
	defer cancel()
	cmd, err := mv.conn.request(ctx, what, id, body)
	var be *BrokerError
	switch {
	case err == nil:
		return cmd, nil
	case errors.As(err, &be):
		return Command{}, err // it names the step
	case mv.ctx.Err() != nil:
		return Command{}, fmt.Errorf("%s: %w", what, context.Cause(mv.ctx))
	}
	return Command{}, mv.stepErr(mv.ctx, ctx, what, err)
}

func (mv *move) subscribe() error {
	sub := &SubscribeCommand{
		Topic:        mv.m.Topic,
		Subscription: mv.m.Subscription,
		SubType:      mv.m.Type,
		ConsumerID:   mv.id,
		ConsumerName: mv.m.ConsumerName,
		// A missing subscription starts at the earliest position, so the
		// acknowledgement then puts it at the target; at the latest it
		// would start past it and skip what the target leaves unconsumed.
		InitialPosition: Earliest,
		PriorityLevel:   movePriority,
		NoTopicCreation: true,
	}
	if mv.m.Type == KeyShared {
		sub.KeySharedMeta = &KeySharedMeta{Mode: KeySharedAutoSplit, AllowOutOfOrderDelivery: mv.m.KeySharedAllowOutOfOrder}
	}
	sub.RequestID = mv.conn.newRequestID()
	_, err := mv.request("subscribe", sub.RequestID, sub)
	if err == nil {
		return nil
	}
	var be *BrokerError
	if !errors.As(err, &be) || be.Code == ServiceNotReady || be.Code == TopicNotFound {
		mv.c.ForgetLookup(mv.m.Topic) // moved, or the cached broker is wrong
	}
	if be != nil && (be.Code == ConsumerBusy || be.Code == ConsumerAssignError) {
		return fmt.Errorf("%w: %w", ErrSubscriptionBusy, err)
	}
	return err
}

// markDelete asks for the subscription's mark-delete position (and the
// topic's last entry).
func (mv *move) markDelete(what string) (md, last MessageID, err error) {
	id := mv.conn.newRequestID()
	cmd, err := mv.request(what, id, &GetLastMessageID{ConsumerID: mv.id, RequestID: id})
	if err != nil {
		return MessageID{}, MessageID{}, err
	}
	r, err := asType[*GetLastMessageIDResponse](cmd, what)
	if err != nil {
		return MessageID{}, MessageID{}, err
	}
	if !r.HasMarkDelete {
		return MessageID{}, MessageID{}, fmt.Errorf("%s: %w", what, ErrNoMarkDelete)
	}
	return entryOnly(r.MarkDelete), entryOnly(r.LastMessageID), nil
}

func (mv *move) acknowledge() error {
	target := mv.res.Target
	if mv.m.Type == Failover {
		if err := mv.ack(AckCumulative, []MessageID{target}); err != nil {
			return err
		}
	} else {
		md, last, err := mv.markDelete("read the mark-delete position")
		if err != nil {
			return err
		}
		mv.res.Before, mv.res.HasBefore = md, true
		var ids []MessageID
		if mv.m.OnlyIndividually {
			mv.res.Target = md
		} else if ids, err = entriesAfter(md, target, last, mv.m.Ledgers, mv.m.MaxAcks); err != nil {
			return err
		}
		ids = append(ids, holesAfter(mv.m.Individually, md, last)...)
		if len(ids) == 0 {
			mv.res.MarkDelete = md
			return nil
		}
		if err := mv.ack(AckIndividual, ids); err != nil {
			return err
		}
	}
	md, _, err := mv.markDelete("read the mark-delete position after the ack")
	if err != nil {
		return err
	}
	mv.res.MarkDelete = md
	return nil
}

// ack writes ACKs of ids, split within maxAckIDs and the frame limit.
// Acks get no receipt: it would prove nothing (E1).
func (mv *move) ack(typ AckType, ids []MessageID) error {
	room := mv.conn.MaxMessageSize() - 64 // the ACK's own fields
	for len(ids) > 0 {
		n, size := 0, 0
		for n < len(ids) && n < maxAckIDs {
			s := protowire.SizeTag(3) + protowire.SizeBytes(len(ids[n].appendTo(nil)))
			if n > 0 && size+s > room {
				break
			}
			size += s
			n++
		}
		if mv.ctx.Err() != nil {
			return fmt.Errorf("ack: %w", context.Cause(mv.ctx))
		}
		if err := mv.conn.writeCommand(&Ack{ConsumerID: mv.id, AckType: typ, MessageIDs: ids[:n]}); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		mv.res.Acked += n
		ids = ids[n:]
	}
	return nil
}

// close closes the move's consumer on the broker, within a step of its
// own (the caller's context may be done); without an answer in time, or
// after a step that got none (failed: the broker is not answering), it
// closes the connection instead, which drops the consumer there.
func (mv *move) close(failed error) {
	if mv.conn.removeConsumer(mv.id) == nil {
		return // closed by the broker, or the connection is gone
	}
	if errors.Is(failed, ErrStepTimeout) {
		mv.cut(failed)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), mv.m.StepTimeout)
	defer cancel()
	id := mv.conn.newRequestID()
	_, err := mv.conn.request(ctx, "close consumer", id, &CloseConsumer{ConsumerID: mv.id, RequestID: id})
	var ce *ConnError
	var be *BrokerError
	switch {
	case err == nil, errors.As(err, &ce):
	case errors.As(err, &be):
		// Not there (its SUBSCRIBE was refused): nothing to close.
		mv.log.Debug("move's consumer close refused", zap.Error(err))
	default:
		mv.cut(fmt.Errorf("close consumer: %w", err))
	}
}

func (mv *move) cut(why error) {
	mv.log.Info("closing the move's connection", zap.String("broker", mv.conn.Logical), zap.Error(why))
	mv.conn.Close()
	mv.c.ForgetLookup(mv.m.Topic)
}
