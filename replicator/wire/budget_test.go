package wire

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of ConsumerOptions.Budget: consumers sharing a pool of bytes
// against a broker that dispatches as Pulsar's does.

// testBudget is a ByteBudget: a FIFO line, admission once least fits
// (or nothing is reserved at all), as replicator's receive pools do.
type testBudget struct {
	t     *testing.T
	limit int64

	mu       sync.Mutex
	used     int64 // reserved and held
	held     int64 // of entries received
	line     []*testWaiter
	admitted int // waiters let in from the line
}

type testWaiter struct {
	least, most int64
	admit       func(int64)
}

func newTestBudget(t *testing.T, limit int64) *testBudget {
	return &testBudget{t: t, limit: limit}
}

func (b *testBudget) TryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.line) > 0 || b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *testBudget) Acquire(least, most int64, admit func(int64)) (int64, func() bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if least <= 0 || most < least {
		b.t.Errorf("Acquire(%d, %d)", least, most)
	}
	if len(b.line) == 0 {
		if got := b.fits(least, most); got > 0 {
			return got, nil
		}
	}
	w := &testWaiter{least: least, most: most, admit: admit}
	b.line = append(b.line, w)
	return 0, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, x := range b.line {
			if x == w {
				b.line = append(b.line[:i], b.line[i+1:]...)
				return true
			}
		}
		return false
	}
}

// fits reserves what fits of least..most (b.mu held); 0 when least does
// not.
func (b *testBudget) fits(least, most int64) int64 {
	switch {
	case b.used == 0:
		got := max(least, min(most, b.limit))
		b.used += got
		return got
	case b.used+least <= b.limit:
		got := min(most, b.limit-b.used)
		b.used += got
		return got
	}
	return 0
}

func (b *testBudget) Hold(n int64) {
	if n > 0 {
		b.mu.Lock()
		b.used += n
		b.held += n
		b.mu.Unlock()
		return
	}
	b.release(-n, -n)
}

func (b *testBudget) Release(n int64) { b.release(n, 0) }

func (b *testBudget) release(n, held int64) {
	b.mu.Lock()
	b.used -= n
	b.held -= held
	if b.used < 0 || b.held < 0 || n < 0 {
		b.t.Errorf("budget at %d (%d held) after a release of %d", b.used, b.held, n)
	}
	type admission struct {
		w   *testWaiter
		got int64
	}
	var in []admission
	for len(b.line) > 0 {
		got := b.fits(b.line[0].least, b.line[0].most)
		if got == 0 {
			break
		}
		in = append(in, admission{b.line[0], got})
		b.line = b.line[1:]
		b.admitted++
	}
	b.mu.Unlock()
	for _, a := range in {
		a.w.admit(a.got)
	}
}

func (b *testBudget) state() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.line)
}

func (b *testBudget) heldBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// backlogBroker serves every topic from a backlog of entries as a broker
// dispatches: while a consumer has permits, entry by entry, a whole batch
// on its last permit (the excess counted against the next FLOW). It
// measures what the bound is about: bytes sent and not yet released by
// the test (released) plus what every consumer's permits may still bring
// from its backlog, at the entries' true sizes.
type backlogBroker struct {
	b *fakeBroker

	mu       sync.Mutex
	backlogs map[string][]backlogEntry
	subs     map[uint64]*backlogSub
	// start is where a topic's next subscription starts (a durable
	// cursor resumes at its first unacknowledged entry).
	start map[string]int
	// refuse answers subscriptions with ServiceNotReady (counted).
	refuse   bool
	refused  int
	sent     int64 // bytes dispatched
	released atomic.Int64
	potent   int64 // what the permits outstanding may bring, all consumers
	peak     int64 // the most sent-released+potent seen at a FLOW
}

type backlogEntry struct {
	msgs int32
	size int // payload bytes
}

type backlogSub struct {
	fc      *fakeConn
	id      uint64
	topic   string
	next    int
	permits int64
	potent  int64
}

func newBacklogBroker(t *testing.T) *backlogBroker {
	bb := &backlogBroker{b: newFakeBroker(t), backlogs: map[string][]backlogEntry{}, subs: map[uint64]*backlogSub{}, start: map[string]int{}}
	bb.b.set(func() { bb.b.handle = bb.handle })
	return bb
}

// entrySize is the bytes a consumer holds for e: metadata and payload.
func (e backlogEntry) bytes() int64 { return int64(len(testMetadata(e.msgs)) + e.size) }

func (bb *backlogBroker) handle(fc *fakeConn, cmd Command, _ Frame) bool {
	switch c := cmd.Body.(type) {
	case *SubscribeCommand:
		bb.mu.Lock()
		if bb.refuse {
			bb.refused++
			bb.mu.Unlock()
			fc.send(&Error{RequestID: c.RequestID, Error: ServiceNotReady, Message: "not now"})
			return true
		}
		bb.subs[c.ConsumerID] = &backlogSub{fc: fc, id: c.ConsumerID, topic: c.Topic, next: bb.start[c.Topic]}
		bb.mu.Unlock()
		fc.send(&Success{RequestID: c.RequestID})
		return true
	case *Flow:
		bb.mu.Lock()
		defer bb.mu.Unlock()
		s := bb.subs[c.ConsumerID]
		if s == nil {
			return true
		}
		s.permits += int64(c.Permits)
		bb.reestimate(s)
		bb.peak = max(bb.peak, bb.sent-bb.released.Load()+bb.potent)
		bb.dispatch(s)
		return true
	case *CloseConsumer:
		bb.mu.Lock()
		bb.drop(c.ConsumerID)
		bb.mu.Unlock()
		fc.send(&Success{RequestID: c.RequestID})
		return true
	}
	return false
}

// reestimate recomputes what s's permits may bring (bb.mu held).
func (bb *backlogBroker) reestimate(s *backlogSub) {
	bb.potent -= s.potent
	s.potent = 0
	l := bb.backlogs[s.topic]
	for i, p := s.next, s.permits; p > 0 && i < len(l); i++ {
		s.potent += l[i].bytes()
		p -= int64(l[i].msgs)
	}
	bb.potent += s.potent
}

func (bb *backlogBroker) dispatch(s *backlogSub) {
	l := bb.backlogs[s.topic]
	for s.permits > 0 && s.next < len(l) {
		e := l[s.next]
		s.next++
		s.permits -= int64(e.msgs)
		bb.sent += e.bytes()
		s.fc.sendPayload(&Message{ConsumerID: s.id, MessageID: EntryID(1, uint64(s.next))}, testMetadata(e.msgs), make([]byte, e.size))
	}
	bb.reestimate(s)
}

func (bb *backlogBroker) drop(id uint64) {
	if s := bb.subs[id]; s != nil {
		s.permits = 0
		bb.reestimate(s)
		delete(bb.subs, id)
	}
}

// closeConsumer closes the topic's consumer from the broker's side (a
// topic unload): its permits are gone, it subscribes again.
func (bb *backlogBroker) closeConsumer(topic string) {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	for id, s := range bb.subs {
		if s.topic == topic {
			bb.drop(id)
			s.fc.send(&CloseConsumer{ConsumerID: id})
		}
	}
}

func (bb *backlogBroker) flows(topic string) (n int) {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	for _, s := range bb.subs {
		if s.topic == topic && s.permits > 0 {
			n++
		}
	}
	return n
}

func (bb *backlogBroker) outstanding() (bytes, peak int64) {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	return bb.sent - bb.released.Load() + bb.potent, bb.peak
}

// drain receives every entry of want from cons and releases it, counting
// its bytes as released first (so the broker's measure never runs behind
// the consumer's reservation). first is closed at the first entry.
func drain(ctx context.Context, bb *backlogBroker, cons *Consumer, want int, first chan<- struct{}) error {
	for i := range want {
		e, err := cons.Receive(ctx)
		if err != nil {
			return fmt.Errorf("entry %d of %d: %w", i+1, want, err)
		}
		if i == 0 && first != nil {
			close(first)
		}
		bb.released.Add(int64(len(e.Metadata) + len(e.Payload)))
		if err := cons.Release(e); err != nil {
			return err
		}
	}
	return nil
}

// stallAfter bounds the tests' waits: a stall, not a timing.
const stallAfter = 20 * time.Second

// Many consumers over a budget far smaller than their windows together:
// what they hold and may still be sent never exceeds the budget (at true
// sizes: each topic's entries are alike, and no larger than the first
// window's estimate), and every one of them drains its backlog (served
// in turn, none starved, none stuck). Each topic has its own entry size
// and batch size.
//
// Without the budget, the 400 windows of 64 KiB would let the broker
// send 25 MiB at once.
func TestConsumersWithinBudget(t *testing.T) {
	const (
		cursors = 400
		entries = 25
		limit   = 1 << 20
		window  = 64 << 10 // MaxBytes: up to 16 KiB entries are estimated from the start
	)
	bb := newBacklogBroker(t)
	budget := newTestBudget(t, limit)
	for i := range cursors {
		msgs := []int32{1, 7, 60}[i%3]
		e := backlogEntry{msgs: msgs, size: 1<<10 + (i*997)%(15<<10)}
		l := make([]backlogEntry, entries)
		for j := range l {
			l[j] = e
		}
		bb.backlogs[fmt.Sprintf("t%d", i)] = l
	}
	c := newTestClient(t, bb.b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
	defer cancel()
	conss := make([]*Consumer, cursors)
	for i := range conss {
		cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: fmt.Sprintf("t%d", i), Subscription: "s", Permits: 100_000,
			MaxBytes: func() int64 { return window }, Budget: budget})
		if err != nil {
			t.Fatal(err)
		}
		conss[i] = cons
	}
	var wg sync.WaitGroup
	errs := make(chan error, cursors)
	for _, cons := range conss {
		wg.Go(func() {
			if err := drain(ctx, bb, cons, entries, nil); err != nil {
				errs <- fmt.Errorf("%s: %w", cons.opts.Topic, err)
			}
			// Drained, its permits out would hold their reservation
			// for good (see the receive pools' valve in replicator).
			cons.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		for _, cons := range conss {
			cons.mu.Lock()
			if !cons.closed {
				t.Logf("%s: reserved %d held %d heldBytes %d out %d wait %v queue %d m %.0f e %.0f", cons.opts.Topic, cons.credit.reserved, cons.credit.held, cons.credit.heldBytes, cons.credit.granted-cons.credit.received, cons.credit.wait != nil, len(cons.queue)-cons.head, cons.credit.msgBytes, cons.credit.entryBytes)
			}
			cons.mu.Unlock()
		}
		u, w := budget.state()
		t.Logf("budget used %d waiting %d", u, w)
	}
	if _, peak := bb.outstanding(); peak > limit {
		t.Errorf("held and still to be sent reached %d bytes, budget %d", peak, limit)
	} else {
		t.Logf("peak %d bytes held and still to be sent, budget %d; %d admissions from the line", peak, limit, budget.admitted)
	}
	if budget.admitted == 0 {
		t.Error("no consumer waited in line: the test does not exercise the budget")
	}
	for _, cons := range conss {
		cons.Close()
	}
	if used, waiting := budget.state(); used != 0 || waiting != 0 {
		t.Errorf("after every consumer closed: %d bytes reserved, %d waiting; want none", used, waiting)
	}
}

// uniform is a backlog of n entries of msgs messages and size payload
// bytes each.
func uniform(n int, msgs int32, size int) []backlogEntry {
	l := make([]backlogEntry, n)
	for i := range l {
		l[i] = backlogEntry{msgs: msgs, size: size}
	}
	return l
}

// reservedOf is what cons has reserved for its permits.
func reservedOf(cons *Consumer) int64 {
	cons.mu.Lock()
	defer cons.mu.Unlock()
	return cons.credit.reserved
}

func waiting(cons *Consumer) bool {
	cons.mu.Lock()
	defer cons.mu.Unlock()
	return cons.credit.wait != nil
}

// A consumer that holds nothing waits in line; bytes released by another
// (its entries confirmed) let it in, and it drains. The first consumer
// holds its first window, leaving less than one entry's worth.
func TestConsumerWaitsForReleasedBytes(t *testing.T) {
	bb := newBacklogBroker(t)
	const size = 4000 // with its metadata, under the first estimate (a quarter of MaxBytes)
	bb.backlogs["a"] = uniform(100, 1, size)
	bb.backlogs["b"] = uniform(10, 1, size)
	budget := newTestBudget(t, 18<<10)
	c := newTestClient(t, bb.b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
	defer cancel()
	opts := func(topic string) ConsumerOptions {
		return ConsumerOptions{Topic: topic, Subscription: "s", Permits: 1000, MaxBytes: func() int64 { return 16 << 10 }, Budget: budget}
	}
	a, err := Subscribe(ctx, c, opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// a holds its first window: 4 entries.
	var held []Entry
	for len(held) < minPermits {
		e, err := a.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, e)
	}
	b, err := Subscribe(ctx, c, opts("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !waiting(b) {
		used, _ := budget.state()
		t.Fatalf("b not waiting in line with %d of %d bytes reserved and held", used, budget.limit)
	}
	if bb.flows("b") != 0 {
		t.Fatal("b was granted permits before a released anything")
	}
	for _, e := range held {
		bb.released.Add(int64(len(e.Metadata) + len(e.Payload)))
		if err := a.Release(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := drain(ctx, bb, b, 10, nil); err != nil {
		t.Fatalf("b after a released its entries: %v", err)
	}
	if err := drain(ctx, bb, a, 96, nil); err != nil {
		t.Fatalf("a: %v", err)
	}
	if _, peak := bb.outstanding(); peak > budget.limit {
		t.Errorf("held and still to be sent reached %d bytes, budget %d", peak, budget.limit)
	}
}

// A partition that subscribes while busy ones keep the budget full is let
// in before any of them drains its backlog: waiters are served in order,
// and a consumer with something held takes no room while one waits.
func TestConsumerNotStarvedByBusyOnes(t *testing.T) {
	bb := newBacklogBroker(t)
	const busy, backlog, size = 6, 400, 4 << 10
	for i := range busy {
		bb.backlogs[fmt.Sprintf("busy%d", i)] = uniform(backlog, 1, size)
	}
	bb.backlogs["late"] = uniform(5, 1, size)
	budget := newTestBudget(t, 128<<10)
	c := newTestClient(t, bb.b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
	defer cancel()
	opts := func(topic string) ConsumerOptions {
		return ConsumerOptions{Topic: topic, Subscription: "s", Permits: 1000, MaxBytes: func() int64 { return 64 << 10 }, Budget: budget}
	}
	var done atomic.Int32 // busy consumers drained
	var wg sync.WaitGroup
	started := make([]chan struct{}, busy)
	for i := range busy {
		cons, err := Subscribe(ctx, c, opts(fmt.Sprintf("busy%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		started[i] = make(chan struct{})
		wg.Go(func() {
			if err := drain(ctx, bb, cons, backlog, started[i]); err != nil {
				t.Error(err)
			}
			done.Add(1)
		})
	}
	for _, s := range started {
		<-s
	}
	late, err := Subscribe(ctx, c, opts("late"))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	first := make(chan struct{})
	go func() {
		<-first
		if n := done.Load(); n > 0 {
			t.Errorf("%d busy consumers drained %d entries each before the late one got its first", n, backlog)
		}
	}()
	if err := drain(ctx, bb, late, 5, first); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if budget.admitted == 0 {
		t.Error("no consumer waited in line: the test does not exercise the budget")
	}
}

// What a session's permits could bring goes back when the session is
// lost; entries the caller still holds from it keep their bytes until it
// releases them, and Close hands back everything, held entries and
// permits alike, as does closing a consumer that waits in line.
func TestConsumerReturnsItsBudget(t *testing.T) {
	bb := newBacklogBroker(t)
	const size = 4 << 10
	bb.backlogs["t"] = uniform(10, 1, size)
	bb.backlogs["w"] = uniform(1, 1, size)
	budget := newTestBudget(t, 1<<20)
	c := newTestClient(t, bb.b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
	defer cancel()
	cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 1000,
		MaxBytes: func() int64 { return 64 << 10 }, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	// The first window, released: the next is sized, and the backlog's
	// last 6 entries leave permits out. Those 6 are held.
	if err := drain(ctx, bb, cons, minPermits, nil); err != nil {
		t.Fatal(err)
	}
	var held []Entry
	for range 6 {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, e)
	}
	if reservedOf(cons) == 0 {
		t.Fatal("no reservation for permits out: the test shows nothing")
	}
	entryBytes := int64(len(held[0].Metadata) + len(held[0].Payload))
	// The broker drops the session and refuses the next one for a while.
	bb.set(func() { bb.refuse, bb.start["t"] = true, 10 })
	bb.closeConsumer("t")
	waitFor(t, "a refused resubscription", func() bool { bb.mu.Lock(); defer bb.mu.Unlock(); return bb.refused > 0 })
	if r := reservedOf(cons); r != 0 {
		t.Errorf("%d bytes reserved for the permits of a lost session, want 0", r)
	}
	if used, h := func() (int64, int64) { u, _ := budget.state(); return u, budget.heldBytes() }(); used != h || h < 6*entryBytes {
		t.Errorf("with the session lost: %d bytes in the budget, %d of them held; want only the entries held (at least %d)", used, h, 6*entryBytes)
	}
	// Back: nothing is sent again (the broker resumes past the end), the
	// entries received before are still held.
	bb.set(func() { bb.refuse = false })
	waitFor(t, "the new session's permits", func() bool { return bb.flows("t") == 1 })
	if h := budget.heldBytes(); h != 6*entryBytes {
		t.Errorf("after the reconnect %d bytes held, want the 6 entries the caller holds (%d)", h, 6*entryBytes)
	}
	for _, e := range held {
		if err := cons.Release(e); err != nil {
			t.Fatal(err)
		}
	}
	if used, _ := budget.state(); used != reservedOf(cons) || budget.heldBytes() != 0 {
		t.Errorf("after the old entries were released: %d bytes in the budget (%d held), want only the new window's %d", used, budget.heldBytes(), reservedOf(cons))
	}
	// A waiter closes: it leaves the line.
	full := newTestBudget(t, 1)
	full.Hold(1)
	w, err := Subscribe(ctx, c, ConsumerOptions{Topic: "w", Subscription: "s", Permits: 10, Budget: full})
	if err != nil {
		t.Fatal(err)
	}
	if _, n := full.state(); n != 1 {
		t.Fatalf("%d waiting on a full budget, want 1", n)
	}
	w.Close()
	if _, n := full.state(); n != 0 {
		t.Errorf("%d waiting after the waiter closed, want 0", n)
	}
	full.Hold(-1)
	// Close with entries held and permits out.
	held = held[:0]
	bb.set(func() { bb.start["t"] = 0 })
	bb.closeConsumer("t")
	for range 3 {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, e)
	}
	cons.Close()
	if used, waiting := budget.state(); used != 0 || waiting != 0 || budget.heldBytes() != 0 {
		t.Errorf("after Close: %d bytes in the budget (%d held), %d waiting; want none", used, budget.heldBytes(), waiting)
	}
	for _, e := range held {
		cons.Release(e) // after Close: nothing more to hand back
	}
	if used, _ := budget.state(); used != 0 {
		t.Errorf("releases after Close moved the budget to %d", used)
	}
}

// Entries larger than the estimates their permits were granted at are
// held whatever the room, and counted: the budget is then over its size
// and lets no one in until they are released.
func TestConsumerHoldsLargerEntries(t *testing.T) {
	bb := newBacklogBroker(t)
	// Small entries size the window, then two of 48 KiB come on its
	// permits.
	l := uniform(8, 1, 1<<10)
	l = append(l, uniform(2, 1, 48<<10)...)
	bb.backlogs["t"] = l
	bb.backlogs["w"] = uniform(1, 1, 1<<10)
	budget := newTestBudget(t, 32<<10)
	c := newTestClient(t, bb.b.url(), ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
	defer cancel()
	opts := func(topic string) ConsumerOptions {
		return ConsumerOptions{Topic: topic, Subscription: "s", Permits: 1000, MaxBytes: func() int64 { return 16 << 10 }, Budget: budget}
	}
	cons, err := Subscribe(ctx, c, opts("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := drain(ctx, bb, cons, 8, nil); err != nil {
		t.Fatal(err)
	}
	var large []Entry
	for range 2 {
		e, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		large = append(large, e)
	}
	if h := budget.heldBytes(); h < 96<<10 {
		t.Errorf("two 48 KiB entries held, the budget counts %d bytes held", h)
	}
	w, err := Subscribe(ctx, c, opts("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !waiting(w) {
		t.Fatal("a consumer let in while the budget is over its size")
	}
	for _, e := range large {
		bb.released.Add(int64(len(e.Metadata) + len(e.Payload)))
		if err := cons.Release(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := drain(ctx, bb, w, 1, nil); err != nil {
		t.Fatalf("the waiter once the large entries were released: %v", err)
	}
}

func (bb *backlogBroker) set(f func()) {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	f()
}

// A budget with room narrows no window: a consumer alone in it is
// granted its whole MaxBytes (the WAN rows need 32 MiB per partition),
// overdraft included, as it would be without a budget.
func TestConsumerBudgetKeepsTheWindow(t *testing.T) {
	const window = 1 << 20
	for _, msgs := range []int32{1, 10} {
		t.Run(fmt.Sprintf("%d messages an entry", msgs), func(t *testing.T) {
			bb := newBacklogBroker(t)
			e := backlogEntry{msgs: msgs, size: 10 << 10}
			bb.backlogs["t"] = uniform(1000, msgs, e.size)
			budget := newTestBudget(t, 64<<20)
			c := newTestClient(t, bb.b.url(), ConnOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), stallAfter)
			defer cancel()
			cons, err := Subscribe(ctx, c, ConsumerOptions{Topic: "t", Subscription: "s", Permits: 100_000,
				MaxBytes: func() int64 { return window }, Budget: budget})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			if err := drain(ctx, bb, cons, 200, nil); err != nil {
				t.Fatal(err)
			}
			cons.mu.Lock()
			w, inWindow := cons.credit.window(), cons.credit.granted-cons.credit.received+cons.credit.held
			cons.mu.Unlock()
			// The window in messages, less the overdraft's entry.
			if want := int64((window - float64(e.bytes()) + float64(e.bytes())/float64(msgs)) / (float64(e.bytes()) / float64(msgs))); w != want {
				t.Errorf("window %d messages, want %d", w, want)
			}
			if inWindow < w/2 {
				t.Errorf("%d messages held or to come of a window of %d, want at least half", inWindow, w)
			}
			if _, peak := bb.outstanding(); peak < window/2 || peak > window {
				t.Errorf("held and still to be sent reached %d bytes with a window of %d, want between half and all of it", peak, window)
			}
		})
	}
}
