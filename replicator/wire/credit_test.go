package wire

import (
	"fmt"
	"strings"
	"testing"
)

// TestConsumerWindowAndRoom pins the permit arithmetic: the window (by
// messages, narrowed by MaxBytes at the size of the largest recent
// entries) and what want asks of it (grant adds that, without a Budget): the window less what is held and
// what the broker may still send, in batches of half the window unless
// now, with the broker's overdraft (received beyond granted) on top.
func TestConsumerWindowAndRoom(t *testing.T) {
	bytesOf := func(n int64) func() int64 { return func() int64 { return n } }
	for _, tt := range []struct {
		name                    string
		permits                 int
		maxBytes                func() int64
		msgBytes                float64
		granted, received, held int64
		now                     bool
		wantWindow, wantRoom    int64
		wantGrantedAfter        int64
	}{
		{name: "no byte bound", permits: 10, wantWindow: 10, wantRoom: 10, wantGrantedAfter: 10},
		{name: "byte bound of 0 is none", permits: 10, maxBytes: bytesOf(0), msgBytes: 100, wantWindow: 10, wantRoom: 10, wantGrantedAfter: 10},
		{name: "negative byte bound is none", permits: 10, maxBytes: bytesOf(-1), msgBytes: 100, wantWindow: 10, wantRoom: 10, wantGrantedAfter: 10},
		{name: "no size known yet", permits: 10, maxBytes: bytesOf(1000), wantWindow: minPermits, wantRoom: minPermits, wantGrantedAfter: minPermits},
		{name: "no size known, window below the floor", permits: 2, maxBytes: bytesOf(1000), wantWindow: 2, wantRoom: 2, wantGrantedAfter: 2},
		{name: "bytes over size", permits: 100, maxBytes: bytesOf(1000), msgBytes: 100, wantWindow: 10, wantRoom: 10, wantGrantedAfter: 10},
		{name: "bytes over size, at most the permits", permits: 8, maxBytes: bytesOf(1000), msgBytes: 100, wantWindow: 8, wantRoom: 8, wantGrantedAfter: 8},
		{name: "entries larger than the budget keep the floor", permits: 100, maxBytes: bytesOf(1000), msgBytes: 5000, wantWindow: minPermits, wantRoom: minPermits, wantGrantedAfter: minPermits},

		// Window 10: grants come once half of it (5) is free.
		{name: "half the window held back", permits: 10, granted: 10, received: 10, held: 5, wantWindow: 10, wantRoom: 5, wantGrantedAfter: 15},
		{name: "less than half free: nothing yet", permits: 10, granted: 10, received: 10, held: 6, wantWindow: 10},
		{name: "less than half free, now", permits: 10, granted: 10, received: 10, held: 6, now: true, wantWindow: 10, wantRoom: 4, wantGrantedAfter: 14},
		{name: "outstanding with the broker, nothing held: nothing yet", permits: 10, granted: 6, wantWindow: 10},
		{name: "outstanding and held", permits: 10, granted: 10, received: 7, held: 4, wantWindow: 10},
		{name: "nothing free", permits: 10, granted: 10, received: 10, held: 10, now: true, wantWindow: 10},
		{name: "more held than the window", permits: 10, granted: 10, received: 12, held: 12, now: true, wantWindow: 10},
		// The broker sent a batch of 25 on 10 permits: 15 overdrawn,
		// granted on top once the batch is released.
		{name: "overdraft granted back", permits: 10, granted: 10, received: 25, wantWindow: 10, wantRoom: 25, wantGrantedAfter: 35},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &credit{permits: tt.permits, maxBytes: tt.maxBytes, msgBytes: tt.msgBytes,
				granted: tt.granted, received: tt.received, held: tt.held}
			if tt.wantGrantedAfter == 0 {
				tt.wantGrantedAfter = tt.granted
			}
			if w := c.window(); w != tt.wantWindow {
				t.Errorf("window %d, want %d", w, tt.wantWindow)
			}
			n := c.want(tt.now)
			if n != tt.wantRoom {
				t.Errorf("want(%v) %d, want %d", tt.now, n, tt.wantRoom)
			}
			c.granted += n // what grant adds of it without a Budget
			if c.granted != tt.wantGrantedAfter {
				t.Errorf("granted %d after, want %d", c.granted, tt.wantGrantedAfter)
			}
		})
	}
}

// creditRig drives a credit as a Consumer does, without a broker: one
// step a line ("sub", "recv 3 1000", ...; see step), the owner's lock
// being the rig's single goroutine.
type creditRig struct {
	t      *testing.T
	c      *credit
	b      *testBudget // nil: no budget
	epoch  uint64      // the current session's
	ready  bool        // a session is subscribed
	queue  []Entry     // received, not handed to the caller
	handed []Entry     // handed to the caller, by index
	admits []int64     // permits granted on admissions from the budget's line
	// maxBytes is what MaxBytes answers (0: no MaxBytes).
	maxBytes int64
}

func newCreditRig(t *testing.T, permits int, maxBytes int64, b *testBudget) *creditRig {
	r := &creditRig{t: t, b: b, maxBytes: maxBytes}
	r.c = &credit{permits: permits}
	if maxBytes > 0 {
		r.c.maxBytes = func() int64 { return r.maxBytes }
	}
	if b != nil {
		r.c.budget = b
	}
	r.c.onAdmit = func(w *budgetWait, got int64) {
		n, back := r.c.admitted(w, got, r.ready)
		r.admits = append(r.admits, n)
		r.c.settle(0, back)
	}
	return r
}

// step runs one step and returns the permits it granted (the FLOW a
// consumer would write):
//
//	sub          a session subscribed: the window starts again (connect)
//	recv M S     an entry of M messages and S bytes arrived (handleMessage)
//	skip M       an entry of M messages dispatched before a redelivery
//	             request arrived and was dropped (handleMessage)
//	get          the caller received the queue's head (Receive)
//	rel I        the caller released the I-th entry it received; "rel
//	             foreign" one this consumer did not deliver (Release)
//	redeliver    the queue is dropped, to come again (RedeliverUnacknowledged)
//	lost         the session was lost (handleClose)
//	close        the consumer closed (Close)
//	maxbytes N   MaxBytes answers N from now on (a budget shared by more)
func (r *creditRig) step(s string) int64 {
	f := strings.Fields(s)
	arg := func(i int) int64 {
		var n int64
		if _, err := fmt.Sscan(f[i], &n); err != nil {
			r.t.Fatalf("step %q: %v", s, err)
		}
		return n
	}
	c := r.c
	switch f[0] {
	case "sub":
		r.epoch++
		r.ready = true
		queued := r.dropQueue()
		c.resubscribed()
		n, back := c.grant(r.ready, true)
		c.settle(queued, back)
		return n
	case "recv":
		e := Entry{NumMessages: int32(arg(1)), Payload: make([]byte, arg(2)), epoch: r.epoch}
		c.arrived(e.permits())
		var back int64
		e.delivery, back = c.hold(e.permits(), e.size())
		r.queue = append(r.queue, e)
		c.settle(0, back)
	case "skip":
		c.arrived(arg(1))
		n, back := c.grant(r.ready, true)
		c.settle(0, back)
		return n
	case "get":
		r.handed = append(r.handed, r.queue[0])
		r.queue = r.queue[1:]
	case "rel":
		e := Entry{Payload: make([]byte, 1000), NumMessages: 1, epoch: r.epoch} // delivery 0: none
		if f[1] != "foreign" {
			e = r.handed[arg(1)]
		}
		size, ok := c.release(e.delivery, e.permits(), e.size(), e.epoch, r.epoch)
		if !ok {
			return 0
		}
		n, back := c.grant(r.ready, false)
		c.settle(size, back)
		return n
	case "redeliver":
		queued := r.dropQueue()
		n, back := c.grant(r.ready, true)
		c.settle(queued, back)
		return n
	case "lost":
		r.ready = false
		c.settle(0, c.lost())
	case "close":
		r.ready = false
		c.settle(c.close())
	case "maxbytes":
		r.maxBytes = arg(1)
	default:
		r.t.Fatalf("unknown step %q", s)
	}
	return 0
}

// dropQueue drops the entries received and not handed to the caller, as
// Consumer.dropQueue does, and returns their bytes.
func (r *creditRig) dropQueue() (queued int64) {
	for i := range r.queue {
		e := &r.queue[i]
		r.c.drop(e.delivery, e.permits(), e.size())
		queued += e.size()
	}
	r.queue = nil
	return queued
}

// creditState is what a credit counts, and what its budget counts.
type creditState struct {
	granted, received, held, heldBytes, stale, reserved int64
	unreleased                                          int // deliveries not released
	used, budgetHeld                                    int64
}

func (r *creditRig) state() creditState {
	s := creditState{granted: r.c.granted, received: r.c.received, held: r.c.held,
		heldBytes: r.c.heldBytes, stale: r.c.staleBytes, reserved: r.c.reserved, unreleased: len(r.c.unreleased)}
	if r.b != nil {
		s.used, _ = r.b.state()
		s.budgetHeld = r.b.heldBytes()
	}
	return s
}

// TestCredit follows a consumer's accounting step by step: the permits
// each step grants (flows) and what is counted at the end. Without a
// budget the window is permits messages; with one (MaxBytes 4000: a
// first estimate of 1000 bytes a message, a window of minPermits until
// a size is known) permits are granted against bytes reserved.
func TestCredit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		permits int
		budget  int64 // 0: none
		steps   []string
		flows   []int64 // permits granted by each step
		want    creditState
	}{
		// Permits granted and handed back.
		{name: "a full window at subscribe", permits: 10,
			steps: []string{"sub"}, flows: []int64{10},
			want: creditState{granted: 10}},
		{name: "released permits go back in batches of half the window", permits: 10,
			steps: []string{"sub", "recv 3 100", "recv 3 100", "get", "get", "rel 0", "rel 1"},
			flows: []int64{10, 0, 0, 0, 0, 0, 6},
			want:  creditState{granted: 16, received: 6}},
		{name: "an entry arrived is held until released", permits: 10,
			steps: []string{"sub", "recv 3 100", "recv 2 50", "get"},
			flows: []int64{10, 0, 0, 0},
			want:  creditState{unreleased: 2, granted: 10, received: 5, held: 5, heldBytes: 150}},
		{name: "the broker's overdraft is granted back", permits: 10,
			steps: []string{"sub", "recv 25 100", "get", "rel 0"},
			flows: []int64{10, 0, 0, 25},
			want:  creditState{granted: 35, received: 25}},
		{name: "a dropped stale dispatch is granted back at once", permits: 10,
			steps: []string{"sub", "skip 4"},
			flows: []int64{10, 4},
			want:  creditState{granted: 14, received: 4}},
		{name: "released while disconnected: nothing granted", permits: 10,
			steps: []string{"sub", "recv 5 100", "get", "lost", "rel 0"},
			flows: []int64{10, 0, 0, 0, 0},
			want:  creditState{granted: 5, received: 5}},

		// Released twice, or not delivered here: a no-op.
		{name: "double release", permits: 10,
			steps: []string{"sub", "recv 5 100", "get", "rel 0", "rel 0"},
			flows: []int64{10, 0, 0, 5, 0},
			want:  creditState{granted: 15, received: 5}},
		{name: "release of an entry not delivered here", permits: 10,
			steps: []string{"sub", "recv 5 100", "get", "rel foreign"},
			flows: []int64{10, 0, 0, 0},
			want:  creditState{unreleased: 1, granted: 10, received: 5, held: 5, heldBytes: 100}},
		{name: "double release with a budget", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "get", "rel 0", "rel 0"},
			flows: []int64{4, 0, 0, 0, 0},
			want:  creditState{granted: 4, received: 1, reserved: 3000, used: 3000}},
		{name: "double release after a reconnect", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "recv 1 1000", "get", "get", "lost", "sub", "rel 0", "rel 0"},
			flows: []int64{4, 0, 0, 0, 0, 0, 4, 0, 0},
			want:  creditState{unreleased: 1, granted: 4, stale: 1000, reserved: 4000, used: 5000, budgetHeld: 1000}},

		// Redelivery: entries queued and not received are dropped.
		{name: "redelivery drops the queue and grants its permits again", permits: 10,
			steps: []string{"sub", "recv 3 100", "recv 3 100", "get", "redeliver", "rel 0"},
			flows: []int64{10, 0, 0, 0, 3, 0},
			want:  creditState{granted: 13, received: 6}},
		{name: "redelivery hands the queue's bytes back", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "recv 1 1000", "get", "redeliver"},
			flows: []int64{4, 0, 0, 0, 1},
			want:  creditState{unreleased: 1, granted: 5, received: 2, held: 1, heldBytes: 1000, reserved: 3000, used: 4000, budgetHeld: 1000}},

		// Bytes held and released, with a budget.
		{name: "a reservation for the first window", permits: 4, budget: 1 << 20,
			steps: []string{"sub"}, flows: []int64{4},
			want: creditState{granted: 4, reserved: 4000, used: 4000}},
		{name: "an entry's bytes are held, its permit's reservation goes", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "get"}, flows: []int64{4, 0, 0},
			want: creditState{unreleased: 1, granted: 4, received: 1, held: 1, heldBytes: 1000, reserved: 3000, used: 4000, budgetHeld: 1000}},
		{name: "released bytes go back", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "get", "rel 0"}, flows: []int64{4, 0, 0, 0},
			want: creditState{granted: 4, received: 1, reserved: 3000, used: 3000}},
		{name: "an entry larger than estimated keeps the reservation", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1500", "get", "rel 0"}, flows: []int64{4, 0, 0, 0},
			want: creditState{granted: 4, received: 1, reserved: 4000, used: 4000}},
		{name: "more permits when the budget has room", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "recv 1 1000", "get", "get", "rel 0", "rel 1"},
			flows: []int64{4, 0, 0, 0, 0, 0, 2},
			want:  creditState{granted: 6, received: 2, reserved: 4000, used: 4000}},
		{name: "no more permits when the budget has no room", permits: 4, budget: 4500,
			steps: []string{"sub", "recv 1 1000", "recv 1 1000", "get", "get", "recv 1 1000", "rel 0", "rel 1"},
			flows: []int64{4, 0, 0, 0, 0, 0, 0, 0},
			want:  creditState{unreleased: 1, granted: 4, received: 3, held: 1, heldBytes: 1000, reserved: 1000, used: 2000, budgetHeld: 1000}},

		{name: "a smaller entry lowers the overdraft estimate by a 64th of the gap", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 2 1000", "recv 1 100"}, flows: []int64{4, 0, 0},
			want: creditState{granted: 4, received: 3, held: 3, heldBytes: 1100, reserved: 986, unreleased: 2, used: 2086, budgetHeld: 1100}},
		{name: "the window leaves room for a batch's overdraft", permits: 10, budget: 1 << 20,
			steps: []string{"sub", "recv 2 1000", "get", "rel 0"}, flows: []int64{4, 0, 0, 5},
			want: creditState{granted: 9, received: 2, reserved: 4000, used: 4000}},
		{name: "an overdraft beyond the window needs no reservation", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 8 800", "skip 1"}, flows: []int64{4, 0, 1},
			want: creditState{granted: 5, received: 9, held: 8, heldBytes: 800, unreleased: 1, used: 800, budgetHeld: 800}},
		{name: "a partial reservation grants what it covers", permits: 4, budget: 2500,
			steps: []string{"sub"}, flows: []int64{2},
			want: creditState{granted: 2, reserved: 2000, used: 2000}},
		{name: "a smaller MaxBytes shrinks the reservation at the next grant", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "maxbytes 2000", "skip 1"}, flows: []int64{4, 0, 1},
			want: creditState{granted: 5, received: 1, reserved: 2000, used: 2000}},
		{name: "an earlier session's bytes held: more only if they fit at once", permits: 4, budget: 4500,
			steps: []string{"sub", "recv 1 1000", "get", "lost", "sub", "rel 0"},
			flows: []int64{4, 0, 0, 0, 0, 3}, // asked before the released bytes are settled
			want:  creditState{granted: 3, reserved: 3000, used: 3000}},
		{name: "a smaller entry lowers the estimate by a 64th of the gap", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "recv 1 360"}, flows: []int64{4, 0, 0},
			want: creditState{unreleased: 2, granted: 4, received: 2, held: 2, heldBytes: 1360, reserved: 1980, used: 3340, budgetHeld: 1360}},
		{name: "a batch's overdraft is reserved", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 2 1000"}, flows: []int64{4, 0},
			want: creditState{unreleased: 1, granted: 4, received: 2, held: 2, heldBytes: 1000, reserved: 1500, used: 2500, budgetHeld: 1000}},

		// Reconnect: the window starts again, earlier entries' bytes stay
		// counted (stale) until released.
		{name: "reconnect resets the window", permits: 10,
			steps: []string{"sub", "recv 2 100", "recv 2 100", "get", "lost", "sub"},
			flows: []int64{10, 0, 0, 0, 0, 10},
			want:  creditState{unreleased: 1, granted: 10, stale: 100}},
		{name: "an earlier session's entry released after a reconnect", permits: 10,
			steps: []string{"sub", "recv 2 100", "get", "lost", "sub", "recv 1 10", "rel 0"},
			flows: []int64{10, 0, 0, 0, 10, 0, 0},
			want:  creditState{unreleased: 1, granted: 10, received: 1, held: 1, heldBytes: 10}},
		{name: "a lost session's reservation goes back", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "get", "lost"},
			flows: []int64{4, 0, 0, 0},
			want:  creditState{unreleased: 1, granted: 1, received: 1, held: 1, heldBytes: 1000, used: 1000, budgetHeld: 1000}},
		{name: "reconnect with a budget", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "get", "lost", "sub", "rel 0"},
			flows: []int64{4, 0, 0, 0, 4, 0},
			want:  creditState{granted: 4, reserved: 4000, used: 4000}},
		{name: "close hands everything back", permits: 4, budget: 1 << 20,
			steps: []string{"sub", "recv 1 1000", "recv 1 1000", "get", "lost", "sub", "recv 1 1000", "get", "close"},
			flows: []int64{4, 0, 0, 0, 0, 4, 0, 0, 0},
			want:  creditState{granted: 4, received: 1, held: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b *testBudget
			var maxBytes int64
			if tt.budget > 0 {
				b, maxBytes = newTestBudget(t, tt.budget), 4000
			}
			r := newCreditRig(t, tt.permits, maxBytes, b)
			var flows []int64
			for _, s := range tt.steps {
				flows = append(flows, r.step(s))
			}
			if fmt.Sprint(flows) != fmt.Sprint(tt.flows) {
				t.Errorf("permits granted by %q: %v, want %v", tt.steps, flows, tt.flows)
			}
			if got := r.state(); got != tt.want {
				t.Errorf("after %q:\n got %+v\nwant %+v", tt.steps, got, tt.want)
			}
			if len(r.admits) != 0 {
				t.Errorf("admissions from the line %v, want none", r.admits)
			}
		})
	}
}

// TestCreditBudgetLine: a consumer that holds nothing waits in the
// budget's line when one entry's worth does not fit; bytes another
// releases let it in, and it grants what they cover. A lost session
// leaves the line. MaxBytes 4000: 1000 bytes a message until a size is
// known, a window of 4.
func TestCreditBudgetLine(t *testing.T) {
	for _, tt := range []struct {
		name   string
		steps  []string // "a <step>" or "b <step>" (see creditRig.step)
		flows  []int64
		admits []int64 // permits b granted on admissions from the line
		want   [2]creditState
		wait   bool // b waits in line at the end
	}{
		{name: "no room: b waits",
			steps: []string{"a sub", "b sub"}, flows: []int64{4, 0},
			want: [2]creditState{{granted: 4, reserved: 4000}, {}}, wait: true},
		{name: "a's held bytes do not let b in",
			steps: []string{"a sub", "b sub", "a recv 1 1000", "a get"}, flows: []int64{4, 0, 0, 0},
			want: [2]creditState{{granted: 4, received: 1, held: 1, heldBytes: 1000, reserved: 3000, unreleased: 1}, {}}, wait: true},
		{name: "a's released bytes let b in",
			steps: []string{"a sub", "b sub", "a recv 1 1000", "a get", "a rel 0"}, flows: []int64{4, 0, 0, 0, 0},
			admits: []int64{1},
			want:   [2]creditState{{granted: 4, received: 1, reserved: 3000}, {granted: 1, reserved: 1000}}},
		{name: "a lost session leaves the line",
			steps: []string{"a sub", "b sub", "b lost", "a recv 1 1000", "a get", "a rel 0"}, flows: []int64{4, 0, 0, 0, 0, 0},
			want: [2]creditState{{granted: 4, received: 1, reserved: 3000}, {}}},
		{name: "a waiter asked again stays once in line",
			steps: []string{"a sub", "b sub", "b redeliver"}, flows: []int64{4, 0, 0},
			want: [2]creditState{{granted: 4, reserved: 4000}, {}}, wait: true},
		{name: "closed, b leaves the line",
			steps: []string{"a sub", "b sub", "b close", "a recv 1 1000", "a get", "a rel 0"}, flows: []int64{4, 0, 0, 0, 0, 0},
			want: [2]creditState{{granted: 4, received: 1, reserved: 3000}, {}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBudget(t, 4500)
			rigs := map[string]*creditRig{"a": newCreditRig(t, 4, 4000, b), "b": newCreditRig(t, 4, 4000, b)}
			var flows []int64
			for _, s := range tt.steps {
				who, step, _ := strings.Cut(s, " ")
				flows = append(flows, rigs[who].step(step))
			}
			if fmt.Sprint(flows) != fmt.Sprint(tt.flows) {
				t.Errorf("permits granted by %q: %v, want %v", tt.steps, flows, tt.flows)
			}
			if fmt.Sprint(rigs["b"].admits) != fmt.Sprint(tt.admits) || len(rigs["a"].admits) != 0 {
				t.Errorf("permits granted on admissions: a %v, b %v; want b %v", rigs["a"].admits, rigs["b"].admits, tt.admits)
			}
			for i, who := range []string{"a", "b"} {
				got := rigs[who].state()
				got.used, got.budgetHeld = 0, 0
				if got != tt.want[i] {
					t.Errorf("%s after %q:\n got %+v\nwant %+v", who, tt.steps, got, tt.want[i])
				}
			}
			if w := rigs["b"].c.wait != nil; w != tt.wait {
				t.Errorf("b waiting %v, want %v", w, tt.wait)
			}
			want := tt.want[0].reserved + tt.want[0].heldBytes + tt.want[1].reserved + tt.want[1].heldBytes
			if used, waiting := b.state(); used != want || waiting != map[bool]int{true: 1}[tt.wait] {
				t.Errorf("budget: %d bytes used, %d waiting; want %d, %d", used, waiting, want, map[bool]int{true: 1}[tt.wait])
			}
		})
	}
}

// TestCreditAdmitted: what a waiter does with the bytes the budget's
// line hands it. MaxBytes 4000: 1000 bytes a message, a window of 4.
func TestCreditAdmitted(t *testing.T) {
	for _, tt := range []struct {
		name         string
		left         bool    // the consumer left the line before it was served
		notReady     bool    // its session is gone
		debt         int64   // messages the broker sent past its permits
		msg, entry   float64 // size estimates (0: none yet, 1000 a message)
		got          int64
		wantN        int64
		wantBack     int64
		wantReserved int64
		wantWaiting  bool
	}{
		{name: "covers the window", got: 4000, wantN: 4, wantReserved: 4000},
		{name: "covers part of it", got: 2500, wantN: 2, wantBack: 500, wantReserved: 2000},
		// Entries of 2 messages of 500 bytes: 2000 bytes cover 3 permits
		// and the overdraft of the last one's entry.
		{name: "batches: the overdraft is set aside", msg: 500, entry: 1000, got: 2000, wantN: 3, wantReserved: 2000},
		{name: "left the line: all back", left: true, got: 4000, wantBack: 4000},
		{name: "session gone: all back", notReady: true, got: 4000, wantBack: 4000},
		// 500 do not cover an entry of 1000: back in line, where 4000 fit
		// at once.
		{name: "less than an entry: asks again", got: 500, wantN: 4, wantBack: 500, wantReserved: 4000},
		// The broker overdrew 3 permits: 500 bytes cover no entry, and
		// granting the debt alone would bring nothing.
		{name: "less than an entry, in debt: asks again", debt: 3, got: 500, wantN: 7, wantBack: 500, wantReserved: 4000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBudget(t, 4500)
			b.used = tt.got // the budget reserved them for the waiter
			r := newCreditRig(t, 4, 4000, b)
			r.ready = !tt.notReady
			r.c.received = tt.debt
			r.c.msgBytes, r.c.entryBytes = tt.msg, tt.entry
			w := &budgetWait{cancel: func() bool { return false }}
			if !tt.left {
				r.c.wait = w
			}
			n, back := r.c.admitted(w, tt.got, r.ready)
			if n != tt.wantN || back != tt.wantBack {
				t.Errorf("admitted: %d permits, %d bytes back; want %d, %d", n, back, tt.wantN, tt.wantBack)
			}
			if r.c.reserved != tt.wantReserved || r.c.granted != tt.wantN {
				t.Errorf("reserved %d, granted %d; want %d, %d", r.c.reserved, r.c.granted, tt.wantReserved, tt.wantN)
			}
			if w := r.c.wait != nil; w != tt.wantWaiting {
				t.Errorf("waiting %v, want %v", w, tt.wantWaiting)
			}
			r.c.settle(0, back)
			if used, _ := b.state(); used != tt.wantReserved {
				t.Errorf("budget: %d bytes used after settling, want the reservation %d", used, tt.wantReserved)
			}
		})
	}
}
