package wire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// moveBroker plays, on a fakeBroker, the part of a broker a move talks to:
// a subscription's mark-delete position moved by acknowledgements
// (cumulative: forward and not past the last entry; individual: the
// position follows contiguous acknowledged entries across the ledgers it
// knows), GET_LAST_MESSAGE_ID with the mark-delete position, CLOSE_CONSUMER.
// Like the broker, it drops an ACK of a consumer whose SUBSCRIBE it has
// not answered yet (E9), and records that as a violation; so is a FLOW.
// SUBSCRIBE is answered after subscribeDelay, so that anything the client
// sends before the answer arrives while it is pending.
type moveBroker struct {
	b *fakeBroker

	mu         sync.Mutex
	ready      map[uint64]bool // consumers whose SUBSCRIBE was answered
	md, last   MessageID
	ledgers    []Ledger // the ledgers md follows individual acks across; nil: one ledger
	acked      map[[2]uint64]bool
	violations []string

	subscribeDelay time.Duration
	refuse         ServerError // answer SUBSCRIBE with this error
	active         *bool       // send ACTIVE_CONSUMER_CHANGE with SUBSCRIBE's answer
	stall          CommandType // never answer this
	brokerClose    CommandType // close the consumer instead of answering this
	dropConn       CommandType // close the connection instead of answering this
	noMarkDelete   bool
}

func newMoveBroker(t *testing.T, md, last MessageID, setup func(*moveBroker)) *moveBroker {
	mb := &moveBroker{
		b: newFakeBroker(t), ready: map[uint64]bool{}, acked: map[[2]uint64]bool{},
		md: md, last: last, subscribeDelay: 20 * time.Millisecond,
	}
	if setup != nil {
		setup(mb)
	}
	mb.b.set(func() { mb.b.handle = mb.handle })
	return mb
}

func (mb *moveBroker) violate(format string, args ...any) {
	mb.violations = append(mb.violations, fmt.Sprintf(format, args...))
}

// next is the entry after id, across the known ledgers.
func (mb *moveBroker) next(id MessageID) MessageID {
	for i, l := range mb.ledgers {
		if l.ID == id.Ledger && int64(id.Entry)+1 >= l.Entries && i+1 < len(mb.ledgers) {
			return EntryID(mb.ledgers[i+1].ID, 0)
		}
	}
	return EntryID(id.Ledger, uint64(int64(id.Entry)+1))
}

func (mb *moveBroker) handle(fc *fakeConn, cmd Command, _ Frame) bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if cmd.Type == mb.stall {
		return true
	}
	if cmd.Type == mb.dropConn {
		fc.Close()
		return true
	}
	switch c := cmd.Body.(type) {
	case *SubscribeCommand:
		go func() {
			time.Sleep(mb.subscribeDelay)
			mb.mu.Lock()
			refuse, active := mb.refuse, mb.active
			if refuse == 0 {
				mb.ready[c.ConsumerID] = true // before the answer: the client may ack at once
			}
			mb.mu.Unlock()
			if refuse != 0 {
				fc.send(&Error{RequestID: c.RequestID, Error: refuse, Message: "refused"})
				return
			}
			if active != nil { // first: the client then has it before the success
				fc.send(&ActiveConsumerChange{ConsumerID: c.ConsumerID, IsActive: *active})
			}
			fc.send(&Success{RequestID: c.RequestID})
		}()
	case *Flow:
		mb.violate("FLOW of %d permits", c.Permits)
	case *Ack:
		if !mb.ready[c.ConsumerID] {
			mb.violate("ACK of consumer %d before its SUBSCRIBE was answered", c.ConsumerID)
			return true // dropped, as the broker does
		}
		if c.AckType == AckCumulative {
			if len(c.MessageIDs) != 1 {
				mb.violate("cumulative ACK of %d ids", len(c.MessageIDs))
				return true
			}
			id := entryOnly(c.MessageIDs[0])
			if comparePosition(id, mb.md) > 0 && comparePosition(id, mb.last) <= 0 {
				mb.md = id
			}
			return true
		}
		for _, id := range c.MessageIDs {
			mb.acked[[2]uint64{id.Ledger, id.Entry}] = true
		}
		for n := mb.next(mb.md); mb.acked[[2]uint64{n.Ledger, n.Entry}]; n = mb.next(mb.md) {
			mb.md = n
		}
	case *GetLastMessageID:
		if mb.brokerClose == TypeGetLastMessageID {
			delete(mb.ready, c.ConsumerID)
			fc.send(&CloseConsumer{ConsumerID: c.ConsumerID})
			return true
		}
		if !mb.ready[c.ConsumerID] {
			fc.send(&Error{RequestID: c.RequestID, Error: ConsumerNotFound, Message: "no consumer"})
			return true
		}
		fc.send(&GetLastMessageIDResponse{RequestID: c.RequestID, LastMessageID: mb.last, MarkDelete: mb.md, HasMarkDelete: !mb.noMarkDelete})
	case *CloseConsumer:
		if !mb.ready[c.ConsumerID] {
			fc.send(&Error{RequestID: c.RequestID, Error: ConsumerNotFound, Message: "no consumer"})
			return true
		}
		delete(mb.ready, c.ConsumerID)
		fc.send(&Success{RequestID: c.RequestID})
	default:
		return false
	}
	return true
}

// sequence is the commands the broker received, leaving out the
// connection's own (CONNECT, LOOKUP, PING, PONG).
func (mb *moveBroker) sequence() []string {
	mb.b.mu.Lock()
	defer mb.b.mu.Unlock()
	var out []string
	for _, c := range mb.b.received() {
		switch c.Type {
		case TypeConnect, TypeLookup, TypePing, TypePong:
			continue
		}
		out = append(out, c.Type.String())
	}
	return out
}

// acks are the ACKs received, in order.
func (mb *moveBroker) acks() []*Ack {
	var out []*Ack
	for _, b := range mb.b.commands(TypeAck) {
		out = append(out, b.(*Ack))
	}
	return out
}

// connCut reports whether the client's connection to the broker was closed.
func connCut(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.conns {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.conn == nil {
			continue
		}
		select {
		case <-e.conn.Done():
			return true
		default:
		}
	}
	return false
}

func entryRange(ledger uint64, from, through int64) []MessageID {
	var out []MessageID
	for e := from; e <= through; e++ {
		out = append(out, EntryID(ledger, uint64(e)))
	}
	return out
}

const (
	subscribed = "SUBSCRIBE"
	acked      = "ACK"
	readMD     = "GET_LAST_MESSAGE_ID"
	closedByUs = "CLOSE_CONSUMER"
)

var falseActive = false

// A move sends SUBSCRIBE, waits for its answer, acknowledges, reads the
// mark-delete position and closes its consumer, in that order and never a
// FLOW, and reports what the broker said.
func TestMoveSubscription(t *testing.T) {
	const minus1 = math.MaxUint64
	for _, tc := range []struct {
		name      string
		md, last  MessageID
		ledgers   []Ledger // the broker's
		move      Move     // Topic, Subscription and ConsumerName are set below
		active    *bool
		wantSeq   []string
		wantAcks  []MessageID // the ids acknowledged, in order, over every ACK
		wantType  AckType
		wantMD    MessageID
		reached   bool
		wantBatch int // the least number of ACKs
	}{
		{
			name: "failover", md: EntryID(5, 49), last: EntryID(5, 99), active: &falseActive,
			move:    Move{Type: Failover, To: EntryID(5, 79)},
			wantSeq: []string{subscribed, acked, readMD, closedByUs}, wantType: AckCumulative,
			wantAcks: []MessageID{EntryID(5, 79)}, wantMD: EntryID(5, 79), reached: true,
		},
		{
			name: "failover, target inside a batch", md: EntryID(5, 49), last: EntryID(5, 99),
			move:    Move{Type: Failover, To: MessageID{Ledger: 5, Entry: 80, Partition: 2, BatchIndex: 3}},
			wantSeq: []string{subscribed, acked, readMD, closedByUs}, wantType: AckCumulative,
			wantAcks: []MessageID{EntryID(5, 79)}, wantMD: EntryID(5, 79), reached: true,
		},
		{
			name: "failover, inside the first entry of a ledger", md: EntryID(5, 99), last: EntryID(6, 10),
			move:    Move{Type: Failover, To: MessageID{Ledger: 6, Entry: 0, Partition: -1, BatchIndex: 0}},
			wantSeq: []string{subscribed, acked, readMD, closedByUs}, wantType: AckCumulative,
			wantAcks: []MessageID{EntryID(6, minus1)}, wantMD: EntryID(6, minus1), reached: true,
		},
		{
			name: "failover, already past the target", md: EntryID(5, 90), last: EntryID(5, 99),
			move:    Move{Type: Failover, To: EntryID(5, 79)},
			wantSeq: []string{subscribed, acked, readMD, closedByUs}, wantType: AckCumulative,
			wantAcks: []MessageID{EntryID(5, 79)}, wantMD: EntryID(5, 90), reached: true,
		},
		{
			name: "failover, target past the last entry", md: EntryID(5, 49), last: EntryID(5, 60),
			move:    Move{Type: Failover, To: EntryID(5, 79)},
			wantSeq: []string{subscribed, acked, readMD, closedByUs}, wantType: AckCumulative,
			wantAcks: []MessageID{EntryID(5, 79)}, wantMD: EntryID(5, 49), reached: false,
		},
		{
			name: "shared", md: EntryID(5, 49), last: EntryID(5, 99),
			move:    Move{Type: Shared, To: EntryID(5, 79)},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: entryRange(5, 50, 79), wantMD: EntryID(5, 79), reached: true,
		},
		{
			name: "shared from entry -1", md: EntryID(5, minus1), last: EntryID(5, 99),
			move:    Move{Type: Shared, To: EntryID(5, 3)},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: entryRange(5, 0, 3), wantMD: EntryID(5, 3), reached: true,
		},
		{
			name: "shared, nothing to do", md: EntryID(5, 90), last: EntryID(5, 99),
			move:    Move{Type: Shared, To: EntryID(5, 79)},
			wantSeq: []string{subscribed, readMD, closedByUs}, wantMD: EntryID(5, 90), reached: true,
		},
		{
			name: "shared across ledgers", md: EntryID(5, 8), last: EntryID(9, 99),
			ledgers: []Ledger{{3, 10}, {5, 10}, {7, 4}, {9, 100}},
			move:    Move{Type: Shared, To: EntryID(9, 2), Ledgers: []Ledger{{3, 10}, {5, 10}, {7, 4}, {9, 0}}},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: slices.Concat(entryRange(5, 9, 9), entryRange(7, 0, 3), entryRange(9, 0, 2)), wantMD: EntryID(9, 2), reached: true,
		},
		{
			name: "shared, the mark-delete position's ledger deleted", md: EntryID(5, 9), last: EntryID(9, 99),
			ledgers: []Ledger{{5, 10}, {7, 4}, {9, 100}},
			move:    Move{Type: Shared, To: EntryID(9, 2), Ledgers: []Ledger{{7, 4}, {9, 100}}},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: slices.Concat(entryRange(7, 0, 3), entryRange(9, 0, 2)), wantMD: EntryID(9, 2), reached: true,
		},
		{
			name: "shared, target past the last entry", md: EntryID(5, 49), last: EntryID(5, 60),
			move:    Move{Type: Shared, To: EntryID(5, 79)},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: entryRange(5, 50, 60), wantMD: EntryID(5, 60), reached: false,
		},
		{
			name: "shared, at most MaxAcks", md: EntryID(5, 49), last: EntryID(5, 99),
			move:    Move{Type: Shared, To: EntryID(5, 79), MaxAcks: 10},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: entryRange(5, 50, 59), wantMD: EntryID(5, 59), reached: false,
		},
		{
			// The fake broker's frames stop at 64 KiB: 40,000 ids take
			// about 8 bytes each: more ACKs than 10,000 ids a piece would make.
			name: "shared, many entries in several ACKs", md: EntryID(5, minus1), last: EntryID(5, 50_000),
			move:    Move{Type: Shared, To: EntryID(5, 39_999)},
			wantSeq: nil, wantType: AckIndividual, wantBatch: 5,
			wantAcks: entryRange(5, 0, 39_999), wantMD: EntryID(5, 39_999), reached: true,
		},
		{
			name: "shared with holes past the target", md: EntryID(5, 49), last: EntryID(5, 99),
			move: Move{Type: Shared, To: EntryID(5, 59),
				Individually: []MessageID{EntryID(5, 40), EntryID(5, 62), {Ledger: 5, Entry: 65, Partition: 1, BatchIndex: 2}, EntryID(5, 120)}},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: append(entryRange(5, 50, 59), EntryID(5, 62), EntryID(5, 65)), wantMD: EntryID(5, 59), reached: true,
		},
		{
			name: "shared, only the holes", md: EntryID(5, 59), last: EntryID(5, 99),
			move:    Move{Type: Shared, To: EntryID(5, 59), Individually: []MessageID{EntryID(5, 61), EntryID(5, 60)}},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: []MessageID{EntryID(5, 61), EntryID(5, 60)}, wantMD: EntryID(5, 61), reached: true,
		},
		{
			// The continuous follow's ack holes: nothing up to To (not
			// used) is acknowledged, only the holes after the
			// mark-delete position and not past the last entry.
			name: "shared, only individually", md: EntryID(5, 49), last: EntryID(5, 99),
			move: Move{Type: Shared, OnlyIndividually: true, To: EntryID(5, 59),
				Individually: []MessageID{EntryID(5, 40), EntryID(5, 52), EntryID(5, 50), EntryID(5, 120)}},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: []MessageID{EntryID(5, 52), EntryID(5, 50)}, wantMD: EntryID(5, 50), reached: true,
		},
		{
			name: "key shared", md: EntryID(5, 49), last: EntryID(5, 99),
			move:    Move{Type: KeyShared, KeySharedAllowOutOfOrder: true, To: EntryID(5, 52)},
			wantSeq: []string{subscribed, readMD, acked, readMD, closedByUs}, wantType: AckIndividual,
			wantAcks: entryRange(5, 50, 52), wantMD: EntryID(5, 52), reached: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := newMoveBroker(t, tc.md, tc.last, func(mb *moveBroker) { mb.ledgers, mb.active = tc.ledgers, tc.active })
			c := newTestClient(t, mb.b.url(), ConnOptions{})
			m := tc.move
			m.Topic, m.Subscription, m.ConsumerName = "persistent://a/b/t-partition-0", "sub", "gs.follow-1"
			m.StepTimeout = 5 * time.Second
			res, err := c.MoveSubscription(context.Background(), m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantSeq != nil {
				if got := mb.sequence(); !slices.Equal(got, tc.wantSeq) {
					t.Errorf("commands %v, want %v", got, tc.wantSeq)
				}
			}
			seq := mb.sequence()
			if seq[0] != subscribed || seq[len(seq)-1] != closedByUs {
				t.Errorf("commands %v: want SUBSCRIBE first, CLOSE_CONSUMER last", seq)
			}
			mb.mu.Lock()
			if len(mb.violations) > 0 {
				t.Errorf("broker saw: %v", mb.violations)
			}
			mb.mu.Unlock()
			subs := mb.b.commands(TypeSubscribe)
			if len(subs) != 1 {
				t.Fatalf("%d SUBSCRIBEs", len(subs))
			}
			s := subs[0].(*SubscribeCommand)
			if s.SubType != m.Type || s.PriorityLevel != math.MaxInt32 || s.NonDurable || !s.NoTopicCreation ||
				s.InitialPosition != Earliest || s.ConsumerName != "gs.follow-1" || s.Topic != m.Topic || s.Subscription != "sub" {
				t.Errorf("SUBSCRIBE %+v", s)
			}
			if m.Type == KeyShared {
				if s.KeySharedMeta == nil || *s.KeySharedMeta != (KeySharedMeta{Mode: KeySharedAutoSplit, AllowOutOfOrderDelivery: true}) {
					t.Errorf("SUBSCRIBE's key shared meta %+v, want AUTO_SPLIT, out of order", s.KeySharedMeta)
				}
			} else if s.KeySharedMeta != nil {
				t.Errorf("a %v SUBSCRIBE with key shared meta %+v", m.Type, s.KeySharedMeta)
			}
			var ids []MessageID
			acks := mb.acks()
			for _, a := range acks {
				if a.ConsumerID != s.ConsumerID || a.AckType != tc.wantType {
					t.Errorf("ACK of consumer %d (type %v), want %d (type %v)", a.ConsumerID, a.AckType, s.ConsumerID, tc.wantType)
				}
				if n := len(AppendCommand(nil, a)); n > 1<<16 || len(a.MessageIDs) > maxAckIDs {
					t.Errorf("an ACK of %d ids takes %d bytes, over the broker's limit", len(a.MessageIDs), n)
				}
				ids = append(ids, a.MessageIDs...)
			}
			if !slices.Equal(ids, tc.wantAcks) {
				t.Errorf("acknowledged %d ids %v, want %d %v", len(ids), shortIDs(ids), len(tc.wantAcks), shortIDs(tc.wantAcks))
			}
			if len(acks) < tc.wantBatch {
				t.Errorf("%d ACKs, want at least %d", len(acks), tc.wantBatch)
			}
			if res.Acked != len(tc.wantAcks) || res.MarkDelete != tc.wantMD || res.Reached() != tc.reached {
				t.Errorf("result %+v, want %d acked, mark-delete %v, reached %v", res, len(tc.wantAcks), tc.wantMD, tc.reached)
			}
			if shared := m.Type != Failover; res.HasBefore != shared || (shared && res.Before != tc.md) {
				t.Errorf("before %v (%v), want %v (%v)", res.Before, res.HasBefore, tc.md, shared)
			}
			if tc.active != nil && (!res.ActiveTold || res.Active != *tc.active) {
				t.Errorf("active told %v, active %v, want told %v", res.ActiveTold, res.Active, *tc.active)
			}
			if res.ServerVersion != "fake" {
				t.Errorf("server version %q", res.ServerVersion)
			}
			if connCut(c) {
				t.Error("the connection was closed after a move that went well")
			}
		})
	}
}

func shortIDs(ids []MessageID) string {
	if len(ids) <= 6 {
		return fmt.Sprint(ids)
	}
	return fmt.Sprintf("%v ... %v", ids[:3], ids[len(ids)-3:])
}

// Every way a move fails: what it returns, what it sent (no ACK before a
// SUBSCRIBE's answer nor after a failure; the consumer closed, or the
// connection when the broker does not answer), and that a stall ends.
func TestMoveSubscriptionFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(*moveBroker)
		move    Move
		cancel  bool // the caller's context ends once SUBSCRIBE is sent
		wantIs  []error
		wantNot []error
		connErr bool        // a *ConnError in the chain
		code    ServerError // of a *BrokerError in the chain, when set
		wantSeq []string
		cut     bool // the connection is closed
		noErr   bool
	}{
		{
			name: "consumer busy", setup: func(mb *moveBroker) { mb.refuse = ConsumerBusy },
			move:   Move{Type: Failover},
			wantIs: []error{ErrSubscriptionBusy}, code: ConsumerBusy,
			wantSeq: []string{subscribed, closedByUs},
		},
		{
			name: "consumer assign error", setup: func(mb *moveBroker) { mb.refuse = ConsumerAssignError },
			move:   Move{Type: KeyShared},
			wantIs: []error{ErrSubscriptionBusy}, code: ConsumerAssignError,
			wantSeq: []string{subscribed, closedByUs},
		},
		{
			name: "topic not found", setup: func(mb *moveBroker) { mb.refuse = TopicNotFound },
			move:    Move{Type: Shared},
			wantNot: []error{ErrSubscriptionBusy}, code: TopicNotFound,
			wantSeq: []string{subscribed, closedByUs},
		},
		{
			name:   "ledgers unknown",
			setup:  func(mb *moveBroker) { mb.md, mb.last = EntryID(5, 8), EntryID(7, 9) },
			move:   Move{Type: Shared, To: EntryID(7, 3)},
			wantIs: []error{ErrLedgersUnknown},
			// No ACK: which entries of ledger 5 remain is unknown.
			wantSeq: []string{subscribed, readMD, closedByUs},
		},
		{
			name:   "ledgers listed without the target's",
			setup:  func(mb *moveBroker) { mb.md, mb.last = EntryID(5, 8), EntryID(8, 9) },
			move:   Move{Type: KeyShared, To: EntryID(8, 3), Ledgers: []Ledger{{5, 10}, {7, 3}}},
			wantIs: []error{ErrLedgersUnknown},
			// No ACK: a ledger may lie between 7 and 8.
			wantSeq: []string{subscribed, readMD, closedByUs},
		},
		{
			name:    "no mark-delete position",
			setup:   func(mb *moveBroker) { mb.noMarkDelete = true },
			move:    Move{Type: Failover},
			wantIs:  []error{ErrNoMarkDelete},
			wantSeq: []string{subscribed, acked, readMD, closedByUs},
		},
		{
			name:    "broker closes the consumer",
			setup:   func(mb *moveBroker) { mb.brokerClose = TypeGetLastMessageID },
			move:    Move{Type: Shared},
			wantIs:  []error{errBrokerClosed},
			wantSeq: []string{subscribed, readMD}, // nothing left to close
		},
		{
			name:    "connection lost",
			setup:   func(mb *moveBroker) { mb.dropConn = TypeGetLastMessageID },
			move:    Move{Type: Failover},
			connErr: true,
			wantSeq: []string{subscribed, acked, readMD},
			cut:     true,
		},
		{
			name:    "subscribe stalls",
			setup:   func(mb *moveBroker) { mb.stall = TypeSubscribe },
			move:    Move{Type: Failover},
			wantIs:  []error{ErrStepTimeout},
			wantSeq: []string{subscribed}, // the connection is closed instead
			cut:     true,
		},
		{
			name:    "reading the mark-delete position stalls",
			setup:   func(mb *moveBroker) { mb.stall = TypeGetLastMessageID },
			move:    Move{Type: Shared},
			wantIs:  []error{ErrStepTimeout},
			wantSeq: []string{subscribed, readMD},
			cut:     true,
		},
		{
			name:    "close stalls: the move stands, the connection is closed",
			setup:   func(mb *moveBroker) { mb.stall = TypeCloseConsumer },
			move:    Move{Type: Failover},
			noErr:   true,
			wantSeq: []string{subscribed, acked, readMD, closedByUs},
			cut:     true,
		},
		{
			name:    "the caller gives up",
			setup:   func(mb *moveBroker) { mb.stall = TypeSubscribe },
			move:    Move{Type: Failover, StepTimeout: time.Minute},
			cancel:  true,
			wantIs:  []error{context.Canceled},
			wantNot: []error{ErrStepTimeout},
			// The broker may create the consumer late: closed all the same
			// (this broker refuses to close a consumer it never created;
			// the connection stays).
			wantSeq: []string{subscribed, closedByUs},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := newMoveBroker(t, EntryID(5, 49), EntryID(5, 99), tc.setup)
			c := newTestClient(t, mb.b.url(), ConnOptions{})
			m := tc.move
			m.Topic, m.Subscription = "t", "sub"
			if m.To == (MessageID{}) {
				m.To = EntryID(5, 79)
			}
			if m.StepTimeout == 0 {
				// A stalled step waits this long; a step that is
				// answered must never reach it, even on a loaded
				// machine (100 ms did: a refusal read as a timeout).
				m.StepTimeout = 10 * time.Second
				if tc.setup != nil {
					probe := &moveBroker{}
					tc.setup(probe)
					if probe.stall != 0 {
						m.StepTimeout = time.Second
					}
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() {
					waitFor(t, "SUBSCRIBE", func() bool { return len(mb.b.commands(TypeSubscribe)) == 1 })
					cancel()
				}()
			}
			done := make(chan struct{})
			var err error
			go func() {
				defer close(done)
				_, err = c.MoveSubscription(ctx, m)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the move did not end")
			}
			if tc.noErr != (err == nil) {
				t.Fatalf("err %v, want an error: %v", err, !tc.noErr)
			}
			if ce := new(ConnError); tc.connErr && !errors.As(err, &ce) {
				t.Errorf("err %v is not a *ConnError", err)
			}
			for _, target := range tc.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("err %v is not %v", err, target)
				}
			}
			for _, target := range tc.wantNot {
				if errors.Is(err, target) {
					t.Errorf("err %v is %v", err, target)
				}
			}
			if tc.code != 0 {
				var be *BrokerError
				if !errors.As(err, &be) || be.Code != tc.code {
					t.Errorf("err %v: want a *BrokerError %v", err, tc.code)
				}
			}
			// Whatever may still be on its way has arrived: one more
			// round trip on a fresh connection.
			if _, err := newTestClient(t, mb.b.url(), ConnOptions{}).PartitionedMetadata(context.Background(), "t"); err != nil {
				t.Fatal(err)
			}
			got := slices.DeleteFunc(mb.sequence(), func(s string) bool { return s == "PARTITIONED_METADATA" })
			if !slices.Equal(got, tc.wantSeq) {
				t.Errorf("commands %v, want %v", got, tc.wantSeq)
			}
			mb.mu.Lock()
			if len(mb.violations) > 0 {
				t.Errorf("broker saw: %v", mb.violations)
			}
			mb.mu.Unlock()
			if got := connCut(c); got != tc.cut {
				t.Errorf("connection closed: %v, want %v", got, tc.cut)
			}
		})
	}
}

// A move that is not one is refused before anything is sent.
func TestMoveSubscriptionInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Move
		want string
	}{
		{"exclusive", Move{Topic: "t", Subscription: "s", Type: Exclusive, To: EntryID(1, 1)}, "want Failover, Shared or KeyShared"},
		{"unknown type", Move{Topic: "t", Subscription: "s", Type: 9, To: EntryID(1, 1)}, "want Failover, Shared or KeyShared"},
		{"failover with holes", Move{Topic: "t", Subscription: "s", Type: Failover, To: EntryID(1, 1), Individually: []MessageID{EntryID(1, 3)}}, "need Shared or KeyShared"},
		{"only individually, none", Move{Topic: "t", Subscription: "s", Type: Shared, OnlyIndividually: true}, "none given"},
		{"only individually, failover", Move{Topic: "t", Subscription: "s", Type: Failover, OnlyIndividually: true, Individually: []MessageID{EntryID(1, 3)}}, "need Shared or KeyShared"},
		{"no topic", Move{Subscription: "s", Type: Failover, To: EntryID(1, 1)}, "required"},
		{"no subscription", Move{Topic: "t", Type: Failover, To: EntryID(1, 1)}, "required"},
		{"no entry", Move{Topic: "t", Subscription: "s", Type: Failover, To: EntryID(1, math.MaxUint64)}, "not an entry"},
		{"empty topic's last id", Move{Topic: "t", Subscription: "s", Type: Shared, To: EntryID(math.MaxUint64, math.MaxUint64)}, "not an entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBroker(t)
			c := newTestClient(t, b.url(), ConnOptions{})
			_, err := c.MoveSubscription(context.Background(), tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			b.mu.Lock()
			n := len(b.received())
			b.mu.Unlock()
			if n != 0 {
				t.Fatalf("%d commands sent", n)
			}
		})
	}
}

func TestEntriesAfter(t *testing.T) {
	const minus1 = math.MaxUint64
	ls := []Ledger{{3, 10}, {5, 10}, {7, 0}, {8, 2}, {9, 100}}
	last := EntryID(9, 99)
	for _, tc := range []struct {
		name      string
		md, to    MessageID
		last      MessageID
		ledgers   []Ledger
		limit     int
		want      []MessageID
		unknown   bool
		wantError bool
	}{
		{name: "one ledger", md: EntryID(5, 2), to: EntryID(5, 5), want: entryRange(5, 3, 5)},
		{name: "one ledger, from -1", md: EntryID(5, minus1), to: EntryID(5, 1), want: entryRange(5, 0, 1)},
		{name: "to is md", md: EntryID(5, 5), to: EntryID(5, 5)},
		{name: "to before md", md: EntryID(5, 5), to: EntryID(5, 2)},
		{name: "to in an earlier ledger", md: EntryID(9, 0), to: EntryID(5, 9)},
		{name: "to entry -1 of md's next ledger", md: EntryID(5, 8), to: EntryID(7, minus1), ledgers: ls, want: entryRange(5, 9, 9)},
		{name: "across ledgers", md: EntryID(5, 8), to: EntryID(9, 1), ledgers: ls,
			want: slices.Concat(entryRange(5, 9, 9), entryRange(8, 0, 1), entryRange(9, 0, 1))},
		{name: "md on its ledger's last entry", md: EntryID(5, 9), to: EntryID(8, 0), ledgers: ls, want: entryRange(8, 0, 0)},
		{name: "md's ledger deleted", md: EntryID(2, 4), to: EntryID(5, 1), ledgers: ls,
			want: slices.Concat(entryRange(3, 0, 9), entryRange(5, 0, 1))},
		{name: "md's ledger missing from the list", md: EntryID(6, 4), to: EntryID(9, 1), ledgers: ls, unknown: true},
		{name: "to's ledger missing from the list", md: EntryID(5, 4), to: EntryID(10, 1), ledgers: ls, last: EntryID(10, 5), unknown: true},
		{name: "no list across ledgers", md: EntryID(5, 4), to: EntryID(9, 1), unknown: true},
		{name: "limited", md: EntryID(5, 8), to: EntryID(9, 50), ledgers: ls, limit: 4,
			want: slices.Concat(entryRange(5, 9, 9), entryRange(8, 0, 1), entryRange(9, 0, 0))},
		{name: "up to the last entry", md: EntryID(9, 97), to: EntryID(10, 3), want: entryRange(9, 98, 99)},
		{name: "empty topic", md: EntryID(9, minus1), to: EntryID(9, 3), last: EntryID(minus1, minus1)},
		{name: "ledgers out of order", md: EntryID(5, 8), to: EntryID(9, 1), ledgers: []Ledger{{5, 10}, {3, 1}, {9, 10}}, wantError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.limit == 0 {
				tc.limit = 1000
			}
			if tc.last == (MessageID{}) {
				tc.last = last
			}
			got, err := entriesAfter(tc.md, tc.to, tc.last, tc.ledgers, tc.limit)
			switch {
			case tc.unknown:
				if !errors.Is(err, ErrLedgersUnknown) {
					t.Fatalf("err %v, want ErrLedgersUnknown", err)
				}
				return
			case tc.wantError:
				if err == nil || errors.Is(err, ErrLedgersUnknown) {
					t.Fatalf("err %v", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMoveTarget(t *testing.T) {
	for _, tc := range []struct{ to, want MessageID }{
		{EntryID(3, 7), EntryID(3, 7)},
		{MessageID{Ledger: 3, Entry: 7, Partition: 1, BatchIndex: -1}, EntryID(3, 7)},
		{MessageID{Ledger: 3, Entry: 7, Partition: 1, BatchIndex: 0}, EntryID(3, 6)},
		{MessageID{Ledger: 3, Entry: 0, Partition: -1, BatchIndex: 4}, EntryID(3, math.MaxUint64)},
	} {
		if got := moveTarget(tc.to); got != tc.want {
			t.Errorf("moveTarget(%+v) = %v, want %v", tc.to, got, tc.want)
		}
	}
	if comparePosition(EntryID(3, math.MaxUint64), EntryID(3, 0)) >= 0 || comparePosition(EntryID(2, 9), EntryID(3, math.MaxUint64)) >= 0 {
		t.Error("entry -1 must come before entry 0 of its ledger and after the ledgers before")
	}
}

// SUBSCRIBE's key shared meta decodes back, and a meta without its mode is
// malformed (the mode is required).
func TestKeySharedMetaCodec(t *testing.T) {
	sub := &SubscribeCommand{Topic: "t", Subscription: "s", SubType: KeyShared, ConsumerID: 1, RequestID: 2,
		KeySharedMeta: &KeySharedMeta{Mode: KeySharedSticky, AllowOutOfOrderDelivery: true}}
	got, err := DecodeCommand(AppendCommand(nil, sub))
	if err != nil {
		t.Fatal(err)
	}
	if m := got.Body.(*SubscribeCommand).KeySharedMeta; m == nil || *m != *sub.KeySharedMeta {
		t.Fatalf("decoded %+v", m)
	}
	noMode := appendMsg(sub.appendTo(nil), 17, func(b []byte) []byte { return appendBool(b, 4, true) })
	in := appendBytes(appendU64(nil, 1, uint64(TypeSubscribe)), 4, noMode)
	if _, err := DecodeCommand(in); err == nil || !strings.Contains(err.Error(), "KeySharedMeta: required field 1 missing") {
		t.Fatalf("err %v, want the mode required", err)
	}
}
