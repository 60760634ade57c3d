package wire

import "math"

// credit is a consumer's receive accounting: the permits it gave the
// broker (FLOW) and the messages and bytes those brought, what of that
// the caller holds, and, with a ByteBudget, the bytes reserved there for
// what the permits may still bring. It decides how many permits to grant
// and how many bytes go back to the budget; the consumer writes the FLOW
// and settles with the budget. Apart from the consumer, so that the
// arithmetic that keeps a cursor from stalling and memory within its
// bound is tested without a broker.
//
// Not safe for concurrent use: every method but settle is called with
// the owner's lock held (the consumer's mu), settle without it, because
// handing bytes back may admit waiters that take their own lock.
type credit struct {
	// permits, maxBytes and budget are ConsumerOptions.Permits, MaxBytes
	// and Budget.
	permits  int
	maxBytes func() int64
	budget   ByteBudget
	// onAdmit is the owner's end of an admission from the budget's line:
	// called by the budget with no lock held, it takes the owner's lock
	// and calls admitted.
	onAdmit func(w *budgetWait, got int64)

	// Window accounting for the current session, in messages: granted
	// by FLOW, received, and held (received, not released); heldBytes and
	// msgBytes (the size per message of the largest recent entries, 0
	// until known; see hold) for MaxBytes.
	granted, received, held int64
	heldBytes               int64
	msgBytes                float64
	// With a budget: reserved is what is reserved for the permits
	// outstanding (potential); staleBytes the bytes of entries earlier
	// sessions delivered and the caller has not released (they count in
	// the budget with heldBytes); entryBytes the size of the largest
	// recent entries, as msgBytes is per message (for the broker's batch
	// overdraft); wait is set while waiting in the budget's line.
	reserved, staleBytes int64
	entryBytes           float64
	wait                 *budgetWait
	// unreleased holds the deliveries (Entry.delivery) queued or handed
	// to the caller and not yet released, so that release counts each
	// back once however often it is called for the same entry: a second
	// release would otherwise grant its permits again and hand its bytes
	// back twice (more in flight than the window, a budget counting
	// less than is held). A delivery, not the entry id: an entry
	// delivered again is another delivery, released in its turn.
	// deliveries numbers them.
	unreleased map[uint64]struct{}
	deliveries uint64
}

// ByteBudget is the pool of bytes of ConsumerOptions.Budget, shared by
// consumers so that what they hold and may still be sent together stays
// within it. It counts bytes reserved for permits (what they may bring)
// and, apart, bytes of entries received and not released (Hold): a
// policy can then tell permits that may never be used (Pulsar cannot
// take them back from a partition gone idle) from entries that will be
// released. Implementations must be safe for concurrent use. Consumers
// call TryAcquire, Acquire, the cancel func and Hold with n > 0 with
// their own lock held: those must never call an admit func.
type ByteBudget interface {
	// TryAcquire reserves n bytes if they fit now and no one is waiting
	// in line; it never waits.
	TryAcquire(n int64) bool
	// Acquire reserves between least and most bytes, as many as fit. When
	// no one is waiting and least fits (or nothing at all is held, so
	// that an entry larger than the whole budget still passes alone), got
	// is what was reserved. Otherwise got is 0 and the caller waits in
	// line: waiters are served in the order they came, and admit is
	// called once with what was reserved, from a goroutine releasing
	// bytes and with no lock of the budget held; it must not block.
	// cancel leaves the line; it reports false when the waiter was
	// served already (admit has been or will be called, and owns the
	// bytes).
	Acquire(least, most int64, admit func(got int64)) (got int64, cancel func() bool)
	// Release hands n reserved bytes back and admits the waiters that
	// now fit; it may call their admit funcs before it returns.
	Release(n int64)
	// Hold counts n bytes of entries received (n > 0) or released
	// (n < 0). Entries received count whatever the room (the consumer
	// releases its permits' reservation as they arrive); releasing admits
	// waiters as Release does.
	Hold(n int64)
}

// minPermits is the window while no entry size is known, with MaxBytes.
const minPermits = 4

// unknownMsgBytes is the size per message and per entry assumed, with a
// Budget, before any entry arrived: at most a quarter of MaxBytes, so
// that the first window (minPermits) fits in it. A larger first entry is
// held whatever the room when it arrives. A consumer idle from the start
// keeps its first window reserved; with MaxBytes a share of the budget,
// no more than its share.
const unknownMsgBytes = 64 << 10

// resubscribed starts the window of a new session: the broker forgot the
// old session's permits, and the entries the caller received keep their
// bytes, as stale, until released. Entries queued and not received are
// dropped before (drop).
func (c *credit) resubscribed() {
	c.staleBytes += c.heldBytes
	c.granted, c.received, c.held, c.heldBytes = 0, 0, 0, 0
}

// drop forgets delivery, an entry of msgs messages and size bytes
// received and not handed to the caller (it comes again): no longer held
// nor unreleased. Its bytes are the caller's to settle.
func (c *credit) drop(delivery uint64, msgs, size int64) {
	c.held -= msgs
	c.heldBytes -= size
	delete(c.unreleased, delivery)
}

// arrived counts msgs messages the broker sent on the session's permits,
// whether kept (hold) or dropped.
func (c *credit) arrived(msgs int64) { c.received += msgs }

// hold counts an entry of msgs messages and size bytes, arrived and
// kept, as held until released, and returns its delivery's number (for
// release) and the bytes of reservation to hand back to the budget: its
// permits' reservation goes as it arrives.
func (c *credit) hold(msgs, size int64) (delivery uint64, back int64) {
	c.held += msgs
	c.heldBytes += size
	// The window is sized for the largest entries seen lately, not the
	// mean: up at once, down by a 64th of the gap per smaller entry. With
	// the mean, a backlog of small batched messages followed by large
	// ones (chunks of 5 MB) kept a window of thousands of permits, each of
	// which the broker could fill with a large entry.
	if per := float64(size) / float64(msgs); per > c.msgBytes {
		c.msgBytes = per
	} else {
		c.msgBytes += (per - c.msgBytes) / 64
	}
	if float64(size) > c.entryBytes {
		c.entryBytes = float64(size)
	} else {
		c.entryBytes += (float64(size) - c.entryBytes) / 64
	}
	if c.budget != nil {
		// Held before the permits' reservation goes, so the budget never
		// counts less than there is.
		c.budget.Hold(size)
		back = c.shrink(c.granted - c.received)
	}
	c.deliveries++
	if c.unreleased == nil {
		c.unreleased = map[uint64]struct{}{}
	}
	c.unreleased[c.deliveries] = struct{}{}
	return c.deliveries, back
}

// release counts delivery, an entry of msgs messages and size bytes,
// back, once: ok is false when it was released already or not delivered
// here. session is the epoch of the session that delivered it, current
// the current session's: its messages leave the window only if the
// current session delivered it; the bytes of an earlier session's entry
// leave the stale ones. released is the bytes to settle.
func (c *credit) release(delivery uint64, msgs, size int64, session, current uint64) (released int64, ok bool) {
	if _, ok := c.unreleased[delivery]; !ok {
		return 0, false
	}
	delete(c.unreleased, delivery)
	switch {
	case session == current:
		c.held -= msgs
		c.heldBytes -= size
	case session < current:
		size = min(size, c.staleBytes)
		c.staleBytes -= size
	}
	return size, true
}

// lost ends the session's permits: they died with it, so what they could
// bring goes back (back, to settle), and a place in the budget's line is
// left (the next session asks again).
func (c *credit) lost() (back int64) {
	c.granted = c.received
	c.unwait()
	_, back = c.grant(false, false)
	return back
}

// close hands everything back: entries the caller still holds are no
// longer counted. released and back are to settle.
func (c *credit) close() (released, back int64) {
	c.unwait()
	released, back = c.heldBytes+c.staleBytes, c.reserved
	c.heldBytes, c.staleBytes, c.reserved = 0, 0, 0
	c.unreleased = nil
	return released, back
}

// window is the current receive window in messages. The broker's batch
// overdraft (one entry past the last permit, see room) comes out of
// MaxBytes, so that what the window may bring stays within it.
func (c *credit) window() int64 {
	w := int64(c.permits)
	if c.maxBytes == nil {
		return w
	}
	maxBytes := c.maxBytes()
	if maxBytes <= 0 {
		return w
	}
	if c.msgBytes <= 0 {
		return min(w, minPermits)
	}
	room := float64(maxBytes) - max(c.entryBytes-c.msgBytes, 0)
	return min(w, max(minPermits, int64(room/c.msgBytes)))
}

// want returns the permits to grant now, not counting them: the window
// less what is held and what the broker may still send. Unless now,
// permits are granted in batches of half the window (or when nothing at
// all is held or outstanding).
//
// What the broker may still send can be negative: it dispatches a whole
// batch while it has any permit left and counts the messages past its
// permits against the next FLOW. That debt is granted on top, or a
// window smaller than a batch would end with the broker at zero permits
// and nothing held whose release could grant more: the cursor would
// stall for good (e2e TestWireReconnectAndFailover, 50 permits and
// batches of 100, stalled that way after a Failover switch).
func (c *credit) want(now bool) int64 {
	w := c.window()
	out := c.granted - c.received
	n := w - c.held - out
	if n <= 0 || (!now && n < (w+1)/2 && (c.held > 0 || out > 0)) {
		return 0
	}
	return n
}

// grant returns the permits to grant now, counted as granted, and the
// bytes of reservation to hand back to the budget. ready says whether
// the current session can be granted permits (subscribed, not closed).
// The caller writes the FLOW and then settles, after unlocking: releasing
// may admit waiters, which take their own consumer's lock.
//
// With a budget, permits are granted only against bytes reserved for
// what they may bring (potential), and the reservation shrinks to what
// is still needed at every call, so bytes freed go back at once to
// whoever waits. A consumer that holds something (entries, or permits
// out) takes more only when the budget has room and no one waits
// (TryAcquire); otherwise it grants nothing now, and once it holds
// nothing (its entries released, its permits used) it waits in line for
// one entry's worth at least, asking for its whole window. So a waiter
// holds nothing (no cycle of consumers waiting for each other), and a
// busy consumer cannot keep bytes from a waiting one by granting again
// what its releases free.
func (c *credit) grant(ready, now bool) (n, back int64) {
	out := c.granted - c.received
	if !ready {
		return 0, c.shrink(out)
	}
	b := c.budget
	if b == nil {
		n = c.want(now)
		c.granted += n
		return n, 0
	}
	back = c.shrink(out)
	if n = c.want(now); n == 0 {
		return 0, back
	}
	cover := c.potential(out + n)
	switch {
	case cover <= c.reserved:
	case c.holds(out):
		if !b.TryAcquire(cover - c.reserved) {
			return 0, back
		}
		c.reserved = cover
	case c.wait != nil:
		return 0, back
	default:
		got := c.enqueue(cover)
		if got == 0 {
			return 0, back
		}
		c.reserved = got
		n = c.admit(out, n)
		back += c.shrink(out + n)
	}
	c.granted += n
	return n, back
}

// holds reports whether the consumer holds entries or has permits out.
func (c *credit) holds(out int64) bool {
	return out > 0 || c.heldBytes+c.staleBytes > 0
}

// potential is what out permits outstanding may bring, at the size
// estimates: out messages at msgBytes each, and the overdraft: the
// broker sends the whole entry its last permit falls in, at most
// entryBytes of which that permit paid msgBytes.
func (c *credit) potential(out int64) int64 {
	if out <= 0 {
		return 0
	}
	m, e := c.estimates()
	return int64(math.Ceil(float64(out)*m + max(e-m, 0)))
}

// estimates are the sizes per message and per entry potential counts
// with: the largest recent ones, or unknownMsgBytes (at most a quarter of
// MaxBytes) for both before any entry arrived.
func (c *credit) estimates() (msg, entry float64) {
	if c.msgBytes > 0 {
		return c.msgBytes, max(c.entryBytes, c.msgBytes)
	}
	d := int64(unknownMsgBytes)
	if c.maxBytes != nil {
		if mb := c.maxBytes(); mb > 0 {
			d = min(d, max(mb/minPermits, 1))
		}
	}
	return float64(d), float64(d)
}

// admit returns how many of n permits a consumer that holds nothing but
// its fresh reservation grants: as many as the reservation covers, and
// one entry at least; 0 when it does not cover one entry at today's
// estimates (a smaller MaxBytes since it asked).
func (c *credit) admit(out, n int64) int64 {
	m, e := c.estimates()
	k := min(n, int64((float64(c.reserved)-max(e-m, 0))/m)-out)
	if out+k < 1 {
		return 0
	}
	return k
}

// enqueue asks the budget for most bytes, one entry's worth at least, for
// a consumer that holds nothing: got is what it reserved at once, or 0
// when it now waits in line (c.wait; the budget answers through onAdmit).
func (c *credit) enqueue(most int64) (got int64) {
	least := c.potential(1)
	w := &budgetWait{}
	got, cancel := c.budget.Acquire(least, max(most, least), func(got int64) { c.onAdmit(w, got) })
	if got > 0 {
		return got
	}
	w.cancel = cancel
	c.wait = w
	return 0
}

// budgetWait is a consumer's place in its budget's line.
type budgetWait struct {
	cancel func() bool
}

// admitted is the budget's admission of w with got bytes: n permits to
// grant on what they cover, and back bytes to hand back; all of got when
// the consumer stopped waiting meanwhile (closed, its session lost).
// ready is as for grant.
func (c *credit) admitted(w *budgetWait, got int64, ready bool) (n, back int64) {
	if c.wait != w {
		return 0, got
	}
	c.wait = nil
	c.reserved += got
	out := c.granted - c.received
	if ready && !c.holds(out) {
		n = c.admit(out, max(c.want(true), 1-out))
		c.granted += n
	}
	back = c.shrink(out + n)
	if n == 0 {
		// Not enough at today's estimates: back in line.
		var more int64
		n, more = c.grant(ready, true)
		back += more
	}
	return n, back
}

// unwait leaves the budget's line; bytes the budget reserved for the
// consumer meanwhile come back through admitted.
func (c *credit) unwait() {
	if c.wait != nil {
		c.wait.cancel()
		c.wait = nil
	}
}

// shrink lowers the reservation to what out permits outstanding may
// still bring and returns what it no longer needs.
func (c *credit) shrink(out int64) int64 {
	x := c.potential(out)
	if c.reserved <= x {
		return 0
	}
	back := c.reserved - x
	c.reserved = x
	return back
}

// settle tells the budget, with the owner's lock not held, of released
// bytes of entries and of back bytes of reservation handed back.
func (c *credit) settle(released, back int64) {
	b := c.budget
	if b == nil {
		return
	}
	if released > 0 {
		b.Hold(-released)
	}
	if back > 0 {
		b.Release(back)
	}
}
