package replicator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Fakes of the endpoints a partition replicator uses. They are meant to run
// inside a testing/synctest bubble: every wait is on a channel made in the
// bubble, so synctest.Wait tells when the pipeline is idle and backoff
// sleeps cost no real time.

var (
	errFakeProducerClosed = errors.New("fake producer closed")
	errFakeConsumerClosed = errors.New("fake consumer closed")
)

// outcome is what the fake remote answers to one send.
type outcome struct {
	dup bool  // the remote's deduplication dropped it: receipt id -1:-1
	err error // the send failed
	// stored, with dup, puts the message on the remote all the same: the
	// duplicate of a copy an earlier attempt stored.
	stored bool
	// late holds the send (and every later one of its producer) until the
	// producer is closed; then the remote stores it all the same and the
	// callback reports the producer closed: the write of an abandoned
	// producer that reconnected after it was given up on.
	late bool
}

// refused reports whether the outcome is one the partition skips for good
// (the message can never be copied).
func (o outcome) refused() bool { return refusal(o.err) != "" }

// sendRec is one SendAsync call as the remote saw it.
type sendRec struct {
	name        string // "m<entry>" of the source message
	target      int    // index of the producer in fakeWorld.targets
	outstanding int    // sends of that producer not yet called back
	seq         int64  // the sequence id the producer gave it
	pm          *pulsar.ProducerMessage
}

// gate holds back the callback of one send until released.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func (g *gate) release() { g.once.Do(func() { close(g.ch) }) }

// fakeWorld is one local partition with its durable subscription and the
// remote partition. It implements endpoints. The cursors and producers it
// opens over several sessions share its state, as a Pulsar subscription
// outlives its consumers: a new cursor redelivers every unacknowledged
// message in order.
type fakeWorld struct {
	// activeMu orders the active/standby notifications as the broker's
	// connection does: the one to a new standby (sent from its own
	// goroutine) cannot overtake a later setActive.
	activeMu sync.Mutex
	mu       sync.Mutex
	msgs     []*fakeMsg
	names    map[string]string // formatID -> "m<entry>"
	changed  chan struct{}     // closed and replaced when msgs grows or a cursor rewinds

	acked      map[string]bool // by name
	ackLog     []string        // names in acknowledgement order
	answered   map[string]bool // by name: the latest send's callback ran
	sends      []sendRec
	attempts   map[string]int  // by name
	refused    map[string]bool // by name: a send the remote refuses for good
	violations []string

	sources       []*fakeSource
	targets       []*fakeTarget
	sourceOpens   int
	targetOpens   int
	onActive      func(bool)
	inactive      bool // like the broker, dispatch nothing to a standby
	remoteEntry   int64
	openSourceErr error
	openTargetErr error
	recvErr       error // every cursor's Receive fails with it
	// sourceOpenLimit, when positive, makes openSource block until ctx
	// ends once it was called that many times (stops a hot retry loop).
	sourceOpenLimit int

	outcome func(name string, attempt int) outcome // nil: all sends succeed
	holds   map[string]*gate                       // "name#attempt" -> gate
	// closeHold, when set, makes every producer's Close wait for it: a
	// producer stuck closing (reconnecting to a remote that is slow).
	closeHold *gate

	// remote is what the remote partition holds, in write order: a send
	// with a successful outcome is persisted when it is sent, whether or
	// not its callback ever reports it (the receipt may be lost).
	remote []string
	// dedup switches on the remote broker's deduplication: like Pulsar's,
	// it records the highest sequence id persisted for the producer name
	// (dedupLast), tells each new producer that id (which starts counting
	// after it, as pulsar-client-go does), and answers any send at or
	// below it as a duplicate without persisting it.
	dedup     bool
	dedupLast int64
	// copiedFunc, when set, replaces the answer copiedSince derives from
	// remote.
	copiedFunc  func(from marker.Position) (copySet, error)
	copiedCalls int
}

func newFakeWorld() *fakeWorld {
	return &fakeWorld{
		names:     map[string]string{},
		changed:   make(chan struct{}),
		acked:     map[string]bool{},
		answered:  map[string]bool{},
		attempts:  map[string]int{},
		refused:   map[string]bool{},
		holds:     map[string]*gate{},
		dedupLast: -1,
	}
}

// msg is message number i of the local partition, at position 10:i.
func msg(i int) *fakeMsg {
	return msgAt(10, int64(i), -1, fmt.Sprintf("payload-%d", i))
}

// names returns "m<i>" for each i.
func names(is ...int) []string {
	out := make([]string, len(is))
	for k, i := range is {
		out[k] = fmt.Sprintf("m%d", i)
	}
	return out
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// publish appends messages to the local partition.
func (w *fakeWorld) publish(ms ...*fakeMsg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range ms {
		if m.publishTime.IsZero() {
			m.publishTime = time.Now()
		}
		name := fmt.Sprintf("m%d", m.id.EntryID())
		if l := m.id.LedgerID(); l != 10 {
			name = fmt.Sprintf("L%d:%s", l, name)
		}
		if m.id.BatchIdx() >= 0 {
			name = fmt.Sprintf("%s.%d", name, m.id.BatchIdx())
		}
		w.names[positionOf(m.id).String()] = name
		w.msgs = append(w.msgs, m)
	}
	w.signalLocked()
}

func (w *fakeWorld) signalLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *fakeWorld) violationf(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// hold keeps the callback of the attempt-th send of message name back until
// the returned gate is released. Call it before that send happens.
func (w *fakeWorld) hold(name string, attempt int) *gate {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := &gate{ch: make(chan struct{})}
	w.holds[fmt.Sprintf("%s#%d", name, attempt)] = g
	return g
}

func (w *fakeWorld) releaseAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.holds {
		g.release()
	}
	if w.closeHold != nil {
		w.closeHold.release()
	}
}

// setActive makes the consumer the active one or a standby. Like the
// broker, a consumer made active is told before anything is dispatched to
// it, and a standby gets nothing dispatched from the moment it is one.
func (w *fakeWorld) setActive(active bool) {
	w.activeMu.Lock()
	defer w.activeMu.Unlock()
	w.mu.Lock()
	f := w.onActive
	if !active {
		w.inactive = true
		w.signalLocked()
	}
	w.mu.Unlock()
	f(active)
	if active {
		w.mu.Lock()
		w.inactive = false
		w.signalLocked()
		w.mu.Unlock()
	}
}

// Snapshots for assertions.

func (w *fakeWorld) acks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ackLog...)
}

func (w *fakeWorld) sendLog() []sendRec {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sendRec(nil), w.sends...)
}

// sent returns the names sent through producer target, or through all
// producers if target < 0.
func (w *fakeWorld) sent(target int) []string {
	var out []string
	for _, s := range w.sendLog() {
		if target < 0 || s.target == target {
			out = append(out, s.name)
		}
	}
	return out
}

func (w *fakeWorld) opens() (sources, targets int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sourceOpens, w.targetOpens
}

func (w *fakeWorld) source(i int) *fakeSource {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sources[i]
}

func (w *fakeWorld) target(i int) *fakeTarget {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.targets[i]
}

// checkClosed fails t unless every cursor and producer opened was closed.
func (w *fakeWorld) checkClosed(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range w.sources {
		if !s.isClosed {
			t.Errorf("cursor %d not closed", i)
		}
	}
	for i, tg := range w.targets {
		if !tg.closed {
			t.Errorf("producer %d not closed", i)
		}
	}
}

// checkInvariants fails t on any violation the fakes recorded: an ack
// before the remote answered, an ack repeated or on a closed cursor, a send
// on a closed producer, a sequence id set by the sidecar instead of the
// producer, an acknowledged message that should have been copied and is
// not on the remote.
func (w *fakeWorld) checkInvariants(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
	onRemote := map[string]bool{}
	for _, n := range w.remote {
		onRemote[n] = true
	}
	for _, s := range w.sends {
		if s.pm.SequenceID != nil {
			t.Errorf("send of %s sets sequence id %d: ids are the producer's (it starts after the broker's record)",
				s.name, *s.pm.SequenceID)
		}
		if w.acked[s.name] && !onRemote[s.name] && !w.refused[s.name] {
			t.Errorf("%s acknowledged but not on the remote: lost", s.name)
		}
		if got := s.pm.Properties[PropOriginCluster]; got != "east" {
			t.Errorf("send of %s: origin cluster %q, want %q", s.name, got, "east")
		}
	}
}

func (w *fakeWorld) openSource(ctx context.Context, onActive func(bool)) (source, error) {
	w.mu.Lock()
	w.sourceOpens++
	if w.sourceOpenLimit > 0 && w.sourceOpens > w.sourceOpenLimit {
		w.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	defer w.mu.Unlock()
	if w.openSourceErr != nil {
		return nil, w.openSourceErr
	}
	s := &fakeSource{w: w, closedCh: make(chan struct{}), recvErr: w.recvErr}
	w.sources = append(w.sources, s)
	w.onActive = onActive
	if w.inactive {
		// The client tells a new standby at once, from its own goroutine
		// (unless it was made active meanwhile).
		go func() {
			w.activeMu.Lock()
			defer w.activeMu.Unlock()
			w.mu.Lock()
			still := w.inactive
			w.mu.Unlock()
			if still {
				onActive(false)
			}
		}()
	}
	return s, nil
}

// copiedSince answers like the real one given an unbounded look back: the
// origin positions, from from on, of every copy on the remote.
func (w *fakeWorld) copiedSince(_ context.Context, from marker.Position) (copySet, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.copiedCalls++
	if w.copiedFunc != nil {
		return w.copiedFunc(from)
	}
	byName := map[string]marker.Position{}
	for _, m := range w.msgs {
		byName[w.names[positionOf(m.id).String()]] = positionOf(m.id)
	}
	set := copySet{}
	for _, n := range w.remote {
		p, ok := byName[n]
		if !ok {
			panic("remote holds an unknown message " + n)
		}
		if from.Compare(p) <= 0 {
			set[p] = struct{}{}
		}
	}
	return set, nil
}

// preload puts copies of the named messages on the remote, as a previous
// run would have (one sequence id each, when the remote deduplicates).
func (w *fakeWorld) preload(names ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.remote = append(w.remote, names...)
	if w.dedup {
		w.dedupLast += int64(len(names))
	}
}

func (w *fakeWorld) remoteHas() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.remote...)
}

func (w *fakeWorld) openTarget(context.Context) (target, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.targetOpens++
	if w.openTargetErr != nil {
		return nil, w.openTargetErr
	}
	t := &fakeTarget{
		w: w, idx: len(w.targets),
		nextSeq:  w.dedupLast + 1,
		queue:    make(chan *pendingSend, 4096),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		progress: make(chan struct{}),
	}
	w.targets = append(w.targets, t)
	go t.run()
	return t, nil
}

// fakeSource is a cursor: it hands out the unacknowledged messages of the
// partition in order, each once, and waits for more.
type fakeSource struct {
	w         *fakeWorld
	closedCh  chan struct{}
	closeOnce sync.Once
	recvErr   error

	// guarded by w.mu
	next     int
	received []string
	isClosed bool
}

func (s *fakeSource) Receive(ctx context.Context) (pulsar.Message, error) {
	w := s.w
	for {
		w.mu.Lock()
		if s.recvErr != nil {
			w.mu.Unlock()
			return nil, s.recvErr
		}
		for s.next < len(w.msgs) && w.acked[w.names[positionOf(w.msgs[s.next].id).String()]] {
			s.next++
		}
		if s.next < len(w.msgs) && !w.inactive {
			m := w.msgs[s.next]
			s.next++
			s.received = append(s.received, w.names[positionOf(m.id).String()])
			w.mu.Unlock()
			return m, nil
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closedCh:
			return nil, errFakeConsumerClosed
		case <-changed:
		}
	}
}

func (s *fakeSource) AckID(id pulsar.MessageID) error {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	name, ok := w.names[positionOf(id).String()]
	switch {
	case !ok:
		w.violationf("ack of unknown message %s", positionOf(id).String())
	case s.isClosed:
		w.violationf("ack of %s on a closed cursor", name)
	case w.acked[name]:
		w.violationf("%s acknowledged twice", name)
	case w.attempts[name] > 0 && !w.answered[name]:
		w.violationf("%s acknowledged before the remote answered its send", name)
	}
	w.acked[name] = true
	w.ackLog = append(w.ackLog, name)
	return nil
}

func (s *fakeSource) Close() {
	s.closeOnce.Do(func() {
		s.w.mu.Lock()
		s.isClosed = true
		s.w.mu.Unlock()
		close(s.closedCh)
	})
}

// rewind makes the cursor redeliver from the first unacknowledged message,
// as the broker does when a Failover consumer becomes active again.
func (s *fakeSource) rewind() {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.next = 0
	s.w.signalLocked()
}

func (s *fakeSource) receivedNames() []string {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return append([]string(nil), s.received...)
}

// fakeTarget is a producer on the remote partition. Like the real client,
// it calls callbacks from its own goroutine, in send order; Flush waits for
// the callbacks of every earlier send; Close fails what is still pending.
type fakeTarget struct {
	w         *fakeWorld
	idx       int
	queue     chan *pendingSend
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// guarded by w.mu
	nextSeq         int64 // the id the next send gets
	sent, delivered int
	progress        chan struct{} // closed and replaced after each callback
	closed          bool
	flushes         int
}

type pendingSend struct {
	name string
	pm   *pulsar.ProducerMessage
	cb   func(pulsar.MessageID, *pulsar.ProducerMessage, error)
	out  outcome
	hold *gate
}

func (t *fakeTarget) SendAsync(_ context.Context, pm *pulsar.ProducerMessage,
	cb func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	w := t.w
	w.mu.Lock()
	name, ok := w.names[pm.Properties[PropOriginID]]
	if !ok {
		w.violationf("send of a message with unknown origin id %q", pm.Properties[PropOriginID])
	}
	if t.closed {
		w.violationf("send of %s on closed producer %d", name, t.idx)
		w.mu.Unlock()
		cb(nil, pm, errFakeProducerClosed)
		return
	}
	w.attempts[name]++
	attempt := w.attempts[name]
	var out outcome
	if w.outcome != nil {
		out = w.outcome(name, attempt)
	}
	seq := t.nextSeq
	t.nextSeq++
	if pm.SequenceID != nil {
		seq = *pm.SequenceID
	}
	if w.dedup && seq <= w.dedupLast {
		out.dup = true
	}
	w.sends = append(w.sends, sendRec{name: name, target: t.idx, outstanding: t.sent - t.delivered, seq: seq, pm: pm})
	if out.dup && out.stored {
		w.remote = append(w.remote, name)
	}
	if out.err == nil && !out.dup && !out.late {
		w.remote = append(w.remote, name)
		if w.dedup {
			w.dedupLast = seq
		}
	}
	if out.refused() {
		w.refused[name] = true
	}
	w.answered[name] = false
	t.sent++
	p := &pendingSend{name: name, pm: pm, cb: cb, out: out, hold: w.holds[fmt.Sprintf("%s#%d", name, attempt)]}
	w.mu.Unlock()
	t.queue <- p
}

func (t *fakeTarget) run() {
	defer close(t.done)
	for {
		select {
		case p := <-t.queue:
			if p.out.late {
				<-t.quit
				t.w.mu.Lock()
				t.w.remote = append(t.w.remote, p.name)
				t.w.mu.Unlock()
				p.out = outcome{err: errFakeProducerClosed}
			}
			if p.hold != nil {
				select {
				case <-p.hold.ch:
				case <-t.quit:
					p.out = outcome{err: errFakeProducerClosed}
				}
			}
			t.complete(p)
		case <-t.quit:
			for {
				select {
				case p := <-t.queue:
					if p.out.late {
						t.w.mu.Lock()
						t.w.remote = append(t.w.remote, p.name)
						t.w.mu.Unlock()
					}
					p.out = outcome{err: errFakeProducerClosed}
					t.complete(p)
				default:
					return
				}
			}
		}
	}
}

func (t *fakeTarget) complete(p *pendingSend) {
	w := t.w
	var id pulsar.MessageID
	w.mu.Lock()
	switch {
	case p.out.err != nil:
	case p.out.dup:
		id = pulsar.NewMessageID(-1, -1, -1, 0)
	default:
		w.remoteEntry++
		id = pulsar.NewMessageID(500, w.remoteEntry, -1, 0)
	}
	w.answered[p.name] = true
	w.mu.Unlock()

	p.cb(id, p.pm, p.out.err)

	w.mu.Lock()
	t.delivered++
	close(t.progress)
	t.progress = make(chan struct{})
	w.mu.Unlock()
}

func (t *fakeTarget) Flush() error {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	t.flushes++
	until := t.sent
	for t.delivered < until && !t.closed {
		progress := t.progress
		w.mu.Unlock()
		select {
		case <-progress:
		case <-t.done:
		}
		w.mu.Lock()
	}
	return nil
}

func (t *fakeTarget) Close() {
	t.w.mu.Lock()
	hold := t.w.closeHold
	t.w.mu.Unlock()
	if hold != nil {
		<-hold.ch
	}
	t.closeOnce.Do(func() {
		t.w.mu.Lock()
		t.closed = true
		t.w.mu.Unlock()
		close(t.quit)
	})
	<-t.done
}

func (t *fakeTarget) isClosed() bool {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	return t.closed
}

func (t *fakeTarget) flushCount() int {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	return t.flushes
}

// Test harness.

func newTestPartition(t *testing.T, w *fakeWorld, maxPending int) *partition {
	return &partition{
		local: "east", remote: "west",
		ends:         w,
		maxPending:   maxPending,
		m:            NewMetrics(nil),
		log:          zaptest.NewLogger(t),
		drainTimeout: 5 * time.Second,
	}
}

// runner is a partition's Run in its own goroutine.
type runner struct {
	cancel  context.CancelFunc
	errc    chan error
	err     error
	stopped bool
}

// startRun starts p.Run; the test's cleanup stops it (releasing every held
// callback first), so a failed test does not leave the bubble deadlocked.
func startRun(t *testing.T, p *partition, w *fakeWorld) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- p.Run(ctx) }()
	t.Cleanup(func() {
		w.releaseAll()
		r.stop()
	})
	return r
}

// stop cancels Run's context and returns what Run returned.
func (r *runner) stop() error {
	if !r.stopped {
		r.cancel()
		r.err = <-r.errc
		r.stopped = true
	}
	return r.err
}

// waitFor lets the pipeline run, advancing the fake clock in small steps,
// until cond holds; it fails after a minute of fake time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1200 {
		synctest.Wait()
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gave up (after a minute of fake time) waiting for %s", what)
}

// counter and gauge read one metric. (prometheus/testutil would need a
// module go.mod does not list.)
func counter(c *prometheus.CounterVec, labels ...string) float64 {
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func gauge(g *prometheus.GaugeVec, labels ...string) float64 {
	var m dto.Metric
	if err := g.WithLabelValues(labels...).Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}
