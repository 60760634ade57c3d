package wiretest

import (
	"bytes"
	"math"
	"sync"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Stored is one entry a topic of KeepEntries holds.
type Stored struct {
	ID          wire.MessageID
	Metadata    []byte
	Payload     []byte
	NumMessages int32
	// Producer and SequenceID are the SEND's (empty and 0 for Append).
	Producer   string
	SequenceID uint64
}

// KeepEntries makes the broker keep what producers send and serve it, from
// now on: each topic is one ledger of entries; a SEND whose highest
// sequence id is not above the producer name's record is answered as a
// duplicate (message id -1:-1) and not stored, as with deduplication on,
// and PRODUCER_SUCCESS carries that record. A durable subscription keeps
// its acknowledgements across consumers; a reader (non-durable) starts
// at its start message id (inclusive when it has a batch index). Entries
// are dispatched within the consumer's permits (a batch whole while any
// permit is left); a Failover consumer is told it is active. A Handler
// still sees every command first.
func (b *Broker) KeepEntries() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.store == nil {
		b.store = &store{b: b, topics: map[string]*topic{}, consumers: map[handle]*consumer{}, producers: map[handle]*producer{}}
	}
}

// Append stores an entry in topic as if a producer had sent it (without
// deduplication) and returns its id. KeepEntries must have been called.
func (b *Broker) Append(topic string, metadata, payload []byte, numMessages int32) wire.MessageID {
	st := b.keeping()
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.appendLocked(st.topic(topic), Stored{Metadata: bytes.Clone(metadata), Payload: bytes.Clone(payload), NumMessages: numMessages})
}

// Entries returns what topic holds, oldest first.
func (b *Broker) Entries(topic string) []Stored {
	st := b.keeping()
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.topics[topic]
	if t == nil {
		return nil
	}
	return append([]Stored(nil), t.entries...)
}

// MarkDelete returns the mark-delete position of topic's durable
// subscription sub: the number of entries from the first acknowledged
// in a row (0 for none, or an unknown subscription).
func (b *Broker) MarkDelete(topic, sub string) int {
	st := b.keeping()
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.topics[topic]; t != nil && t.subs[sub] != nil {
		return int(t.subs[sub].markDelete + 1)
	}
	return 0
}

// LoseReceipts makes f see each entry a SEND stored, on the connection
// it came on; when f returns true no receipt is sent, as when a receipt
// is lost with its connection (f may close c). nil: every receipt is sent.
// f runs with the broker's entries locked: it must not call the Broker.
func (b *Broker) LoseReceipts(f func(c *Conn, e Stored) bool) {
	st := b.keeping()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lose = f
}

// Unload closes every producer and consumer of topic on its client (as a
// broker unloading the topic does, so that they reconnect) and forgets
// them; entries, records and durable subscriptions stay.
func (b *Broker) Unload(topic string) {
	st := b.keeping()
	st.mu.Lock()
	var closes []func()
	for h, p := range st.producers {
		if p.topic.name == topic {
			delete(st.producers, h)
			closes = append(closes, func() { h.c.Send(&wire.CloseProducer{ProducerID: h.id}) })
		}
	}
	for h, c := range st.consumers {
		if c.topic.name == topic {
			delete(st.consumers, h)
			closes = append(closes, func() { h.c.Send(&wire.CloseConsumer{ConsumerID: h.id}) })
		}
	}
	st.mu.Unlock()
	for _, f := range closes {
		f()
	}
}

func (b *Broker) keeping() *store {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.store == nil {
		b.t.Fatal("wiretest: KeepEntries was not called")
	}
	return b.store
}

// store is what KeepEntries keeps. Frames are written with st.mu held, so
// that what a consumer is sent follows the order decided under it.
type store struct {
	b          *Broker
	mu         sync.Mutex
	topics     map[string]*topic
	consumers  map[handle]*consumer
	producers  map[handle]*producer
	nextLedger uint64
	lose       func(*Conn, Stored) bool
}

// handle is a producer or consumer id on one connection.
type handle struct {
	c  *Conn
	id uint64
}

type topic struct {
	name    string
	ledger  uint64
	entries []Stored
	records map[string]int64 // producer name: highest sequence id stored
	subs    map[string]*cursor
}

// cursor is a subscription's acknowledgements: every entry through
// markDelete (an index; -1: none) and those in acked beyond it.
type cursor struct {
	markDelete int64
	acked      map[int64]bool
}

type consumer struct {
	h       handle
	topic   *topic
	cur     *cursor
	next    int64 // the next entry to dispatch (an index)
	permits int64
	epoch   uint64
}

type producer struct {
	topic *topic
	name  string
}

func (st *store) topic(name string) *topic {
	t := st.topics[name]
	if t == nil {
		st.nextLedger++
		t = &topic{name: name, ledger: 100 + st.nextLedger, records: map[string]int64{}, subs: map[string]*cursor{}}
		st.topics[name] = t
	}
	return t
}

// appendLocked stores e and dispatches it (st.mu held).
func (st *store) appendLocked(t *topic, e Stored) wire.MessageID {
	e.ID = wire.EntryID(t.ledger, uint64(len(t.entries)))
	t.entries = append(t.entries, e)
	for _, c := range st.consumers {
		if c.topic == t {
			st.dispatch(c)
		}
	}
	return e.ID
}

// dispatch sends c what it has permits for (st.mu held).
func (st *store) dispatch(c *consumer) {
	for c.permits > 0 && c.next < int64(len(c.topic.entries)) {
		i := c.next
		c.next++
		if i <= c.cur.markDelete || c.cur.acked[i] {
			continue
		}
		e := c.topic.entries[i]
		c.permits -= int64(max(e.NumMessages, 1))
		c.h.c.SendPayload(&wire.Message{ConsumerID: c.h.id, MessageID: e.ID, ConsumerEpoch: c.epoch, HasConsumerEpoch: true}, e.Metadata, e.Payload)
	}
}

// ack acknowledges entry i (st.mu held).
func (cur *cursor) ack(i int64) {
	if i <= cur.markDelete {
		return
	}
	cur.acked[i] = true
	for cur.acked[cur.markDelete+1] {
		delete(cur.acked, cur.markDelete+1)
		cur.markDelete++
	}
}

// firstUnacked is the index of the first entry not acknowledged.
func (cur *cursor) firstUnacked() int64 {
	i := cur.markDelete + 1
	for cur.acked[i] {
		i++
	}
	return i
}

// index is the entry index of id in t, or -1 for an id of another ledger
// before t's, len for one after.
func (t *topic) index(id wire.MessageID) int64 {
	switch {
	case id.Ledger == t.ledger:
		return int64(id.Entry)
	case id.Ledger < t.ledger || int64(id.Ledger) < 0:
		return -1
	default:
		return int64(len(t.entries))
	}
}

func (t *topic) id(i int64) wire.MessageID {
	if i < 0 {
		return wire.MessageID{Ledger: t.ledger, Entry: math.MaxUint64, Partition: -1, BatchIndex: -1}
	}
	return wire.EntryID(t.ledger, uint64(i))
}

// serve answers the commands KeepEntries changes; false for the rest.
func (st *store) serve(c *Conn, cmd wire.Command, f wire.Frame) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch x := cmd.Body.(type) {
	case *wire.ProducerCommand:
		t := st.topic(x.Topic)
		st.producers[handle{c, x.ProducerID}] = &producer{topic: t, name: x.ProducerName}
		last, ok := t.records[x.ProducerName]
		if !ok {
			last = -1
		}
		c.Send(&wire.ProducerSuccess{RequestID: x.RequestID, ProducerName: x.ProducerName, LastSequenceID: last})
	case *wire.Send:
		p := st.producers[handle{c, x.ProducerID}]
		if p == nil {
			return true // closed on the broker (Unload): dropped, as the client resends
		}
		highest := max(x.SequenceID, x.HighestSequenceID)
		if last, ok := p.topic.records[p.name]; ok && int64(highest) <= last {
			c.Send(&wire.SendReceipt{ProducerID: x.ProducerID, SequenceID: x.SequenceID, HighestSequenceID: x.HighestSequenceID,
				MessageID: wire.MessageID{Ledger: math.MaxUint64, Entry: math.MaxUint64, Partition: -1, BatchIndex: -1}})
			return true
		}
		p.topic.records[p.name] = int64(highest)
		id := st.appendLocked(p.topic, Stored{Metadata: bytes.Clone(f.Metadata), Payload: bytes.Clone(f.Payload),
			NumMessages: x.NumMessages, Producer: p.name, SequenceID: x.SequenceID})
		if st.lose != nil && st.lose(c, p.topic.entries[len(p.topic.entries)-1]) {
			return true
		}
		c.Send(&wire.SendReceipt{ProducerID: x.ProducerID, SequenceID: x.SequenceID, HighestSequenceID: receiptHighest(x, f.Metadata), MessageID: id})
	case *wire.CloseProducer:
		delete(st.producers, handle{c, x.ProducerID})
		c.Send(&wire.Success{RequestID: x.RequestID})
	case *wire.SubscribeCommand:
		st.subscribe(c, x)
	case *wire.Flow:
		if k := st.consumers[handle{c, x.ConsumerID}]; k != nil {
			k.permits += int64(x.Permits)
			st.dispatch(k)
		}
	case *wire.Ack:
		k := st.consumers[handle{c, x.ConsumerID}]
		if k == nil {
			return true
		}
		for _, id := range x.MessageIDs {
			i := k.topic.index(id)
			if x.AckType == wire.AckCumulative {
				for j := k.cur.markDelete + 1; j <= i; j++ {
					k.cur.ack(j)
				}
			} else {
				k.cur.ack(i)
			}
		}
	case *wire.RedeliverUnacknowledged:
		if k := st.consumers[handle{c, x.ConsumerID}]; k != nil {
			k.epoch = max(k.epoch, x.ConsumerEpoch)
			k.next = k.cur.firstUnacked()
			st.dispatch(k)
		}
	case *wire.GetLastMessageID:
		k := st.consumers[handle{c, x.ConsumerID}]
		if k == nil {
			c.Send(&wire.Error{RequestID: x.RequestID, Error: wire.ConsumerNotFound, Message: "no such consumer"})
			return true
		}
		c.Send(&wire.GetLastMessageIDResponse{RequestID: x.RequestID, LastMessageID: k.topic.id(int64(len(k.topic.entries)) - 1),
			MarkDelete: k.topic.id(k.cur.markDelete), HasMarkDelete: true})
	case *wire.CloseConsumer:
		delete(st.consumers, handle{c, x.ConsumerID})
		c.Send(&wire.Success{RequestID: x.RequestID})
	default:
		return false
	}
	return true
}

// subscribe answers SUBSCRIBE (st.mu held).
func (st *store) subscribe(c *Conn, x *wire.SubscribeCommand) {
	t := st.topics[x.Topic]
	if t == nil && x.NoTopicCreation {
		c.Send(&wire.Error{RequestID: x.RequestID, Error: wire.TopicNotFound, Message: "topic " + x.Topic + " not found"})
		return
	}
	t = st.topic(x.Topic)
	var cur *cursor
	switch {
	case !x.NonDurable && t.subs[x.Subscription] != nil:
		cur = t.subs[x.Subscription]
	case x.NonDurable && x.StartMessageID != nil:
		i := t.index(*x.StartMessageID)
		if x.StartMessageID.BatchIndex < 0 {
			i++ // exclusive
		}
		cur = &cursor{markDelete: min(i, int64(len(t.entries))) - 1}
	case x.InitialPosition == wire.Earliest:
		cur = &cursor{markDelete: -1}
	default:
		cur = &cursor{markDelete: int64(len(t.entries)) - 1}
	}
	if cur.acked == nil {
		cur.acked = map[int64]bool{}
	}
	if !x.NonDurable {
		t.subs[x.Subscription] = cur
	}
	k := &consumer{h: handle{c, x.ConsumerID}, topic: t, cur: cur, next: cur.firstUnacked(), epoch: x.ConsumerEpoch}
	st.consumers[k.h] = k
	c.Send(&wire.Success{RequestID: x.RequestID})
	if x.SubType == wire.Failover {
		c.Send(&wire.ActiveConsumerChange{ConsumerID: x.ConsumerID, IsActive: true})
	}
}

// dropConn forgets c's producers and consumers.
func (st *store) dropConn(c *Conn) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for h := range st.producers {
		if h.c == c {
			delete(st.producers, h)
		}
	}
	for h := range st.consumers {
		if h.c == c {
			delete(st.consumers, h)
		}
	}
}

// receiptHighest is the highest_sequence_id Pulsar's broker (4.0) puts in
// the receipt of a stored SEND: the SEND's own when it named one, and -1
// (2^64-1 on the wire) for a batched entry (its metadata has
// num_messages_in_batch) that named none; absent otherwise. Seen on the
// test bed; a client that took the 2^64-1 for a sequence id lost track of
// the broker's deduplication record (wire.Producer's receiptRecorded).
func receiptHighest(x *wire.Send, metadata []byte) uint64 {
	if x.HighestSequenceID != 0 {
		return x.HighestSequenceID
	}
	if md, err := wire.ParseMetadata(metadata); err == nil && md.HasNumMessagesInBatch {
		return math.MaxUint64
	}
	return 0
}
