package entrypath

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Fakes of the entry pipe's endpoints: one local partition of entries with
// a durable cursor, and the remote partition. They are meant to run inside
// a testing/synctest bubble: every wait is on a channel made in the
// bubble, so synctest.Wait tells when the pipeline is idle and backoff
// sleeps cost no real time. Entries are named "e<entry>" and sit in
// ledger 10, unless ledger says another one ("L<ledger>:e<entry>" then).

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

type fakeEntryWorld struct {
	mu      sync.Mutex
	entries []wire.Entry
	changed chan struct{}
	// ledger is where add appends (0: ledger 10), entries counted from 0
	// in each ledger.
	ledger uint64

	acked    map[string]bool // by entry name
	ackLog   []string
	released int // messages whose permits came back
	remote   []string
	sent     [][]string // per producer: entry names in send order
	seqs     []uint64   // every SEND's sequence id, in order
	sendLog  []sentEntry
	// lastSeq is the remote's record for the producer name of epoch 0
	// (see entrySeq), records those of later epochs' names.
	lastSeq    int64
	records    map[uint64]int64
	epochs     []uint64 // per producer: the epoch it was opened for
	reaches    []int64  // the reach of every read-back, in order
	opens      int
	violations []string
	// ackedAtOpen is, per producer, how many entries were acknowledged
	// when it opened.
	ackedAtOpen []int
	// sendErr, when set, fails Send for the named entry (synchronously,
	// like the wire producer's size check).
	sendErr map[string]error
	// sendErrOnce: each sendErr fails one send only.
	sendErrOnce bool
	// settle makes Send return only once its receipt was delivered (a
	// fast link: the callback may run before Send returns).
	settle bool
	// receipt, when set, decides the receipt of the named entry.
	receipt func(name string) (dup bool, err error)
	// schemaErr, when set, is targetSchema's answer for every version;
	// schemaAsks counts targetSchema's calls.
	schemaErr  error
	schemaAsks int
	// copied is what copiedSince finds on the remote.
	copied copySet
	// readBack, when set, bounds copiedSince like the real read-back:
	// of what the remote holds, only the last max(readBack, reach) +
	// lookBack entries are read (0: all of it).
	readBack int64
	// repeat makes the cursor deliver the entry at index repeat-1 twice
	// in a row, once (a redelivery of the entry just received).
	repeat int
	// recvErr, when set, fails the next Receive (once).
	recvErr error
	// aheadFirst, when set, makes the next cursor opened deliver that
	// entry (by index) before the first unacknowledged one, as a Failover
	// subscription does when its active consumer changes during a read.
	aheadFirst int
	// undelivered names an entry (by index + 1) the cursor never
	// delivers nor acknowledges (an entry filter's RESCHEDULE).
	undelivered int
	// noMarkDelete: the broker does not say its mark-delete position.
	noMarkDelete bool
	sources      []*fakeEntrySource
	onActive     func(bool)
	hold         chan struct{} // when set, receipts wait for it to close
	// closeFails makes a producer's Close fail the sends whose receipts
	// still wait for hold (wire.ErrClosed), as the wire producer's Close
	// fails what is unconfirmed; without it Close waits for them.
	closeFails bool
	schemas    map[string][]byte
	schemaSent [][]byte          // schema_version of every SEND
	mdSent     map[string][]byte // metadata of the latest SEND of each entry
	// window, when set, makes Send wait while that many entries are
	// unconfirmed, as the wire producer's MaxPending does.
	window int
	// The link to the remote. unreachable, when set, fails openProducer
	// and reachTarget (probes counts the latter). cut strands what is
	// sent: no receipt until the producer closes, then ErrClosed; with
	// cutStores the remote keeps it all the same (the receipt was lost).
	unreachable error
	// openErr, when set, fails openProducer alone: the broker answers,
	// and refuses the producer (reachTarget succeeds).
	openErr   error
	probes    int
	cut       bool
	cutStores bool
	onLink    func(bool) // the latest producer's
	latest    *fakeEntryTarget
	// dedup makes the remote deduplicate as a broker does: a send whose
	// sequence id is not above lastSeq (its record for the producer
	// name, shared by every producer) is answered as a duplicate and not
	// stored; a stored one raises the record.
	dedup bool
	// inLink are sends of a producer given up on (abandon) still on
	// their way: land delivers them. beforeReadBack, when set, runs as
	// copiedSince starts (without w.mu).
	inLink         []linkedSend
	beforeReadBack func()
	// readBackErrs fail the next read-backs, one each, in order.
	readBackErrs []error
}

// sentEntry is one SEND: the entry, its id, its producer's epoch.
type sentEntry struct {
	name  string
	seq   uint64
	epoch uint64
}

type linkedSend struct {
	name  string
	seq   uint64
	epoch uint64
}

// store is the remote receiving a send under the producer name of epoch
// (w.mu held): whether it was taken for a duplicate.
func (w *fakeEntryWorld) store(epoch uint64, name string, seq uint64) (dup bool) {
	if w.dedup {
		if int64(seq) <= w.record(epoch) {
			return true
		}
		w.setRecord(epoch, int64(seq))
	}
	w.remote = append(w.remote, name)
	return false
}

// record is the remote's record for the producer name of epoch (w.mu
// held).
func (w *fakeEntryWorld) record(epoch uint64) int64 {
	if epoch == 0 {
		return w.lastSeq
	}
	if r, ok := w.records[epoch]; ok {
		return r
	}
	return -1
}

func (w *fakeEntryWorld) setRecord(epoch uint64, r int64) {
	if epoch == 0 {
		w.lastSeq = r
		return
	}
	if w.records == nil {
		w.records = map[uint64]int64{}
	}
	w.records[epoch] = r
}

// abandon gives the latest producer's link up while what it sent into the
// cut is still on its way (inLink): its sends fail, as when a connection
// is closed, and the cut ends for the next producer.
func (w *fakeEntryWorld) abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cut = false
	t := w.latest
	stranded := t.stranded
	t.stranded = nil
	for _, st := range stranded {
		w.inLink = append(w.inLink, linkedSend{st.name, st.seq, t.epoch})
		t.pending.Add(1)
		t.queue <- func() { st.done(wire.Receipt{}, errors.New("connection given up")) }
	}
}

// land delivers the first n sends still in the link (all when n < 0).
func (w *fakeEntryWorld) land(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n < 0 || n > len(w.inLink) {
		n = len(w.inLink)
	}
	for _, ls := range w.inLink[:n] {
		w.store(ls.epoch, ls.name, ls.seq)
	}
	w.inLink = w.inLink[n:]
}

// Raw MessageMetadata fields the builder does not write.
func replicateTo(clusters ...string) []byte {
	var b []byte
	for _, c := range clusters {
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendString(b, c)
	}
	return b
}

func markerType(t uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 20, protowire.VarintType), t)
}

func schemaVersion(v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, 16, protowire.BytesType), v)
}

func newFakeEntryWorld() *fakeEntryWorld {
	return &fakeEntryWorld{changed: make(chan struct{}), acked: map[string]bool{}, lastSeq: -1}
}

func entryName(id wire.MessageID) string {
	if id.Ledger == 10 {
		return fmt.Sprintf("e%d", id.Entry)
	}
	return fmt.Sprintf("L%d:e%d", id.Ledger, id.Entry)
}

// namePos is the position of the entry named n (entryName).
func namePos(n string) marker.Position {
	p := marker.Position{Ledger: 10, Batch: -1}
	if _, err := fmt.Sscanf(n, "L%d:e%d", &p.Ledger, &p.Entry); err != nil {
		fmt.Sscanf(n, "e%d", &p.Entry)
	}
	return p
}

// add appends n entries with the metadata built by md (nil: a plain
// one), followed by the raw protobuf fields extra.
func (w *fakeEntryWorld) add(n int, md func(*wire.MetadataBuilder), extra ...[]byte) {
	for range n {
		w.addPayload([]byte("payload"), md, extra...)
	}
}

// addPayload appends one entry with payload, like add.
func (w *fakeEntryWorld) addPayload(payload []byte, md func(*wire.MetadataBuilder), extra ...[]byte) {
	w.addEntry(payload, md, func(raw []byte) []byte {
		for _, x := range extra {
			raw = append(raw, x...)
		}
		return raw
	})
}

// addEntry appends one entry with payload and the metadata built by md,
// then passed through finish (nil: as built).
func (w *fakeEntryWorld) addEntry(payload []byte, md func(*wire.MetadataBuilder), finish func([]byte) []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	{
		b := wire.MetadataBuilder{ProducerName: "app", PublishTime: 1_700_000_000_000, NumMessagesInBatch: 2}
		if md != nil {
			md(&b)
		}
		raw := b.Append(nil)
		if finish != nil {
			raw = finish(raw)
		}
		ledger := cmp.Or(w.ledger, 10)
		var entry uint64
		for _, e := range w.entries {
			if e.ID.Ledger == ledger {
				entry++
			}
		}
		id := wire.EntryID(ledger, entry)
		n := max(b.NumMessagesInBatch, 1)
		w.entries = append(w.entries, wire.Entry{ID: id, Metadata: raw, Payload: payload, NumMessages: n})
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *fakeEntryWorld) violationf(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

func (w *fakeEntryWorld) openCursor(ctx context.Context, onActive func(bool)) (entrySource, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	src := &fakeEntrySource{w: w, closed: make(chan struct{}), ahead: w.aheadFirst - 1}
	w.aheadFirst = 0
	w.sources = append(w.sources, src)
	w.onActive = onActive
	return src, nil
}

// rewind makes the latest cursor deliver again from the first
// unacknowledged entry, as the broker does after the client reconnected.
func (w *fakeEntryWorld) rewind() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sources[len(w.sources)-1].next = 0
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *fakeEntryWorld) openProducer(_ context.Context, epoch uint64, onLink func(bool)) (entryTarget, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unreachable != nil {
		return nil, w.unreachable
	}
	if w.openErr != nil {
		return nil, w.openErr
	}
	w.onLink = onLink
	onLink(true) // as the wire producer does once created
	w.opens++
	w.sent = append(w.sent, nil)
	w.epochs = append(w.epochs, epoch)
	w.ackedAtOpen = append(w.ackedAtOpen, len(w.ackLog))
	t := &fakeEntryTarget{w: w, idx: len(w.sent) - 1, epoch: epoch, last: w.record(epoch), queue: make(chan func(), 4096)}
	w.latest = t
	if w.window > 0 {
		t.slots = make(chan struct{}, w.window)
	}
	if w.closeFails {
		t.closing = make(chan struct{})
	}
	go func() { // receipts in send order, from the producer's own goroutine
		for f := range t.queue {
			f()
			t.pending.Done()
		}
	}()
	return t, nil
}

func (w *fakeEntryWorld) reachTarget(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probes++
	return w.unreachable
}

// heal ends the link's faults. The latest producer, if still open,
// resends what it sent into the cut, in order, and has it confirmed, as
// the wire producer does once reconnected.
func (w *fakeEntryWorld) heal() {
	w.mu.Lock()
	w.cut, w.unreachable = false, nil
	t := w.latest
	var stranded []strandedSend
	if t != nil && !t.shut {
		stranded, t.stranded = t.stranded, nil
	}
	for _, st := range stranded {
		w.remote = append(w.remote, st.name)
		r := wire.Receipt{MessageID: wire.EntryID(500, uint64(len(w.remote)))}
		t.pending.Add(1)
		t.queue <- func() { st.done(r, nil) }
	}
	w.mu.Unlock()
}

// link tells the latest producer's onLink, as its link goes down or up.
func (w *fakeEntryWorld) link(up bool) {
	w.mu.Lock()
	f := w.onLink
	w.mu.Unlock()
	f(up)
}

func (w *fakeEntryWorld) copiedSince(_ context.Context, from marker.Position, reach int64) (copySet, error) {
	w.mu.Lock()
	hook := w.beforeReadBack
	w.mu.Unlock()
	if hook != nil {
		hook()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.readBackErrs) > 0 {
		err := w.readBackErrs[0]
		w.readBackErrs = w.readBackErrs[1:]
		return nil, err
	}
	w.reaches = append(w.reaches, reach)
	out := copySet{}
	all := copySet{}
	maps.Copy(all, w.copied)
	remote := w.remote
	if w.readBack > 0 {
		remote = remote[len(remote)-int(min(int64(len(remote)), max(w.readBack, reach)+lookBack)):]
	}
	for _, n := range remote {
		all[namePos(n)] = struct{}{}
	}
	for p := range all {
		if from.Compare(p) <= 0 {
			out[p] = struct{}{}
		}
	}
	return out, nil
}

func (w *fakeEntryWorld) targetSchema(_ context.Context, v []byte) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.schemaAsks++
	if w.schemaErr != nil {
		return nil, w.schemaErr
	}
	t, ok := w.schemas[string(v)]
	if !ok {
		return nil, errors.New("unknown schema version")
	}
	return t, nil
}

func (w *fakeEntryWorld) snapshot() (acks, remote []string, released int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ackLog), slices.Clone(w.remote), w.released
}

// fakeEntrySource hands out unacknowledged entries in order, each once
// (after the entry at index ahead, when ahead >= 0).
type fakeEntrySource struct {
	w      *fakeEntryWorld
	next   int
	ahead  int
	closed chan struct{}
	once   sync.Once
}

func (s *fakeEntrySource) Receive(ctx context.Context) (wire.Entry, error) {
	for {
		s.w.mu.Lock()
		if err := s.w.recvErr; err != nil {
			s.w.recvErr = nil
			s.w.mu.Unlock()
			return wire.Entry{}, err
		}
		if s.ahead >= 0 && s.ahead < len(s.w.entries) {
			e := s.w.entries[s.ahead]
			s.ahead = -1
			s.w.mu.Unlock()
			return e, nil
		}
		if s.w.repeat > 0 && s.next == s.w.repeat {
			e := s.w.entries[s.next-1]
			s.w.repeat = 0
			s.w.mu.Unlock()
			return e, nil
		}
		for s.next < len(s.w.entries) && (s.w.acked[entryName(s.w.entries[s.next].ID)] || s.next == s.w.undelivered-1) {
			s.next++
		}
		if s.next < len(s.w.entries) {
			e := s.w.entries[s.next]
			s.next++
			s.w.mu.Unlock()
			return e, nil
		}
		ch := s.w.changed
		s.w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return wire.Entry{}, ctx.Err()
		case <-s.closed:
			return wire.Entry{}, wire.ErrClosed
		}
	}
}

// isClosed reports whether Close was called: the real cursor then drops
// acknowledgements and releases, so the session must not count on them.
func (s *fakeEntrySource) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *fakeEntrySource) Ack(id wire.MessageID) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.isClosed() {
		s.w.violationf("%s acknowledged on a closed cursor", entryName(id))
		return wire.ErrClosed
	}
	if s.w.acked[entryName(id)] {
		s.w.violationf("%s acknowledged twice", entryName(id))
	}
	s.w.acked[entryName(id)] = true
	s.w.ackLog = append(s.w.ackLog, entryName(id))
	return nil
}

// MarkDelete is the entry before the first unacknowledged one.
func (s *fakeEntrySource) MarkDelete(context.Context) (wire.MessageID, bool, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.noMarkDelete {
		return wire.MessageID{}, false, nil
	}
	i := 0
	for i < len(s.w.entries) && s.w.acked[entryName(s.w.entries[i].ID)] {
		i++
	}
	switch {
	case i > 0:
		return s.w.entries[i-1].ID, true, nil
	case len(s.w.entries) > 0:
		first := s.w.entries[0].ID
		return wire.EntryID(first.Ledger, first.Entry-1), true, nil
	}
	return wire.EntryID(10, math.MaxUint64), true, nil
}

func (s *fakeEntrySource) Release(e wire.Entry) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.isClosed() {
		s.w.violationf("%s released on a closed cursor", entryName(e.ID))
		return nil
	}
	s.w.released += int(e.NumMessages)
	return nil
}

func (s *fakeEntrySource) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// fakeEntryTarget stores what it is sent at once and answers from its own
// goroutine, in order, like the wire producer.
type fakeEntryTarget struct {
	w       *fakeEntryWorld
	idx     int
	epoch   uint64 // of its producer name
	last    int64
	pending sync.WaitGroup
	queue   chan func()
	closed  sync.Once
	slots   chan struct{} // the window; nil: none
	// closing is closed by Close when the world's closeFails is set.
	closing   chan struct{}
	closeOnce sync.Once
	// stranded are the sends into a cut link, in order (w.mu).
	stranded []strandedSend
	shut     bool // Close was called (w.mu)
	// gaveUp, when set, is the error the producer gave up on for good
	// (w.mu): its reconnect was refused, as by a terminated topic.
	gaveUp error
}

type strandedSend struct {
	name string
	seq  uint64
	done func(wire.Receipt, error)
}

func (t *fakeEntryTarget) Send(ctx context.Context, out wire.Outgoing, done func(wire.Receipt, error)) error {
	if t.slots != nil {
		select {
		case t.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		inner := done
		done = func(r wire.Receipt, err error) { inner(r, err); <-t.slots }
	}
	md, err := wire.ParseMetadata(out.Metadata)
	w := t.w
	w.mu.Lock()
	if err != nil {
		w.violationf("send of unparsable metadata: %v", err)
	}
	var pos marker.Position
	name := "?"
	for _, kv := range md.Properties {
		if kv.Key == marker.PropOriginID {
			pos, _ = marker.ParsePosition(kv.Value)
			name = entryName(wire.EntryID(uint64(pos.Ledger), uint64(pos.Entry)))
		}
	}
	if t.gaveUp != nil {
		w.mu.Unlock()
		return t.gaveUp
	}
	if err := w.sendErr[name]; err != nil {
		if w.sendErrOnce {
			delete(w.sendErr, name)
		}
		w.mu.Unlock()
		return err
	}
	if e := uint64(pos.Ledger) >> 31; e != t.epoch && name != "?" {
		w.violationf("%s (epoch %d) sent under the producer name of epoch %d", name, e, t.epoch)
	}
	if md.ReplicatedFrom != "east" {
		w.violationf("%s sent with replicated_from %q", name, md.ReplicatedFrom)
	}
	if int64(out.SequenceID) <= t.last {
		w.violationf("%s sent with sequence id %d, not above %d", name, out.SequenceID, t.last)
	}
	t.last = int64(out.SequenceID)
	w.seqs = append(w.seqs, out.SequenceID)
	w.sendLog = append(w.sendLog, sentEntry{name, out.SequenceID, t.epoch})
	w.schemaSent = append(w.schemaSent, md.SchemaVersion)
	if md.HasTxnID {
		// A transaction is the origin's: it means nothing on the remote.
		w.violationf("%s sent with a transaction id (%d:%d)", name, md.TxnIDMostBits, md.TxnIDLeastBits)
	}
	if w.mdSent == nil {
		w.mdSent = map[string][]byte{}
	}
	w.mdSent[name] = slices.Clone(out.Metadata)
	w.sent[t.idx] = append(w.sent[t.idx], name)
	if w.cut {
		if w.cutStores {
			w.store(t.epoch, name, out.SequenceID)
		}
		t.stranded = append(t.stranded, strandedSend{name, out.SequenceID, done})
		w.mu.Unlock()
		return nil
	}
	var dup bool
	var rerr error
	if w.receipt != nil {
		dup, rerr = w.receipt(name)
	}
	if !dup && rerr == nil {
		dup = w.store(t.epoch, name, out.SequenceID)
	}
	r := wire.Receipt{SequenceID: out.SequenceID, MessageID: wire.EntryID(500, uint64(len(w.remote)))}
	if dup {
		r.MessageID = wire.EntryID(math.MaxUint64, math.MaxUint64)
	}
	hold, settle := w.hold, w.settle
	w.mu.Unlock()
	t.pending.Add(1)
	settled := make(chan struct{})
	t.queue <- func() {
		if hold != nil {
			select {
			case <-hold:
			case <-t.closing: // nil unless closeFails
				r, rerr = wire.Receipt{}, wire.ErrClosed
			}
		}
		done(r, rerr)
		close(settled)
	}
	if settle {
		<-settled
	}
	return nil
}

func (t *fakeEntryTarget) LastSequenceID() int64 { return t.last }

// Flush waits for what was sent, as the wire producer's: it returns at
// once the error the producer gave up on (gaveUp), and ctx's error when
// ctx is done before it waits.
func (t *fakeEntryTarget) Flush(ctx context.Context) error {
	t.w.mu.Lock()
	err := t.gaveUp
	t.w.mu.Unlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.pending.Wait()
	return nil
}
func (t *fakeEntryTarget) Close() error {
	t.w.mu.Lock()
	stranded := t.stranded
	t.stranded, t.shut = nil, true
	t.w.mu.Unlock()
	for _, st := range stranded {
		t.pending.Add(1)
		t.queue <- func() { st.done(wire.Receipt{}, wire.ErrClosed) }
	}
	if t.closing != nil {
		t.closeOnce.Do(func() { close(t.closing) })
	}
	t.pending.Wait()
	t.closed.Do(func() { close(t.queue) })
	return nil
}

func newTestEntryPartition(t *testing.T, w *fakeEntryWorld) *Partition {
	return &Partition{
		local: "east", remote: "west", topic: "persistent://t/ns/x", keys: marker.NewKeys([]byte("0123456789abcdef")),
		ends: w, budget: newByteBudget(1<<20, nil), maxPending: 100,
		m: metrics.New(nil), log: zaptest.NewLogger(t), drainTimeout: 5 * time.Second,
	}
}

func runEntryPartition(t *testing.T, p *Partition) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run() = %v", err)
		}
	}()
	return func() { cancel(); <-done }
}

func TestEntryPipeForwardsAndSkips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(2, nil)                                                          // e0 e1
		w.add(1, func(b *wire.MetadataBuilder) { b.ReplicatedFrom = "north" }) // e2: a copy
		w.add(1, nil, replicateTo("east"))                                     // e3: local only
		w.add(1, nil, replicateTo("east", "west"))                             // e4
		w.add(1, func(b *wire.MetadataBuilder) { b.ProducerName = "geo-sidecar.north-->east" })
		w.add(1, func(b *wire.MetadataBuilder) { b.ProducerName = "geo-sidecar.markers.east-->west" })
		w.add(1, nil, markerType(1)) // e7: one of Pulsar's markers
		w.add(1, nil)                // e8
		w.lastSeq = 41
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 9 })
		stop()
		acks, remote, released := w.snapshot()
		if want := []string{"e0", "e1", "e4", "e8"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v", remote, want)
		}
		if released != 18 {
			t.Errorf("permits released for %d messages, want 18 (every entry, 2 messages each)", released)
		}
		slices.Sort(acks)
		if want := []string{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8"}; !slices.Equal(acks, want) {
			t.Errorf("acknowledged %v, want every entry", acks)
		}
		if want := []uint64{10<<32 | 0, 10<<32 | 1, 10<<32 | 4, 10<<32 | 8}; !slices.Equal(w.seqs, want) {
			t.Errorf("sequence ids %v, want %v (the positions, ledger 10)", w.seqs, want)
		}
		for reason, n := range map[string]float64{entryrule.SkipRemoteOrigin: 4, entryrule.SkipReplicateTo: 2, entryrule.SkipMarker: 4} {
			if got := metricstest.Counter(p.m.Skipped, "east", "west", reason); got != n {
				t.Errorf("skipped{reason=%q} = %v messages, want %v", reason, got, n)
			}
		}
		if got := metricstest.Counter(p.m.Messages, "east", "west"); got != 8 {
			t.Errorf("replicated messages = %v, want 8", got)
		}
		if got := p.budget.held(); got != 0 {
			t.Errorf("budget holds %d bytes after the stop, want 0", got)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// The read-back's proof (copiedSince) is the only ground for skipping an
// entry as copied; a duplicate receipt is not.
func TestEntryPipeProof(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(6, nil)
		w.copied = copySet{{Ledger: 10, Entry: 1, Batch: -1}: {}, {Ledger: 10, Entry: 3, Batch: -1}: {}} // e2 is missing: a gap
		first := true
		w.receipt = func(name string) (bool, error) {
			if name == "e4" && first {
				first = false
				return true, nil // answered as a duplicate, and not on the remote
			}
			return false, nil
		}
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 6 })
		stop()
		_, remote, _ := w.snapshot()
		slices.Sort(remote)
		if want := []string{"e0", "e2", "e4", "e5"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v (e1, e3 were there; e4 sent again after the unproven duplicate)", remote, want)
		}
		if got := metricstest.Counter(p.m.DupsUnproven, "east", "west"); got != 1 {
			t.Errorf("unproven duplicates = %v, want 1", got)
		}
		// e1 and e3 were there before; e5, when it went out behind e4 in
		// the first session before the duplicate receipt halted it, is
		// found there by the second.
		w.mu.Lock()
		want := 4.0
		if slices.Contains(w.sent[0], "e5") {
			want = 6
		}
		w.mu.Unlock()
		if got := metricstest.Counter(p.m.Skipped, "east", "west", entryrule.SkipAlreadyCopied); got != want {
			t.Errorf("skipped as already copied = %v messages, want %v (e1, e3, and e5 if the first session sent it)", got, want)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// A read-back of the remote that fails on a link error ends the session,
// and the next one reads back again before it sends: what the remote holds
// is not sent again (with deduplication on, such copies went out under
// counted ids and were stored twice, after later entries). A read-back
// that keeps failing is given up on after maxReadBackRetries sessions:
// on a remote without deduplication, duplicates, not a partition that
// never moves (with deduplication: TestEntryPipeReadBackFailsWithDedup).
func TestEntryPipeReadBackRetried(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fails      int
		wantRemote []string
	}{
		{"fails twice", 2, []string{"e0", "e1", "e2", "e3"}},
		{"fails for good", maxReadBackRetries + 1, []string{"e0", "e0", "e1", "e1", "e2", "e3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(4, nil)
				w.remote = []string{"e0", "e1"} // copied by an earlier session
				for range tc.fails {
					w.readBackErrs = append(w.readBackErrs, &wire.ConnError{Addr: "west:6650", Err: io.ErrUnexpectedEOF})
				}
				p := newTestEntryPartition(t, w)
				stop := runEntryPartition(t, p)
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })
				stop()
				_, remote, _ := w.snapshot()
				slices.Sort(remote)
				if !slices.Equal(remote, tc.wantRemote) {
					t.Errorf("remote holds %v, want %v", remote, tc.wantRemote)
				}
				// Each entry holds 2 messages; e0 and e1 are proven copies
				// only when a read-back went through.
				want := 4.0
				if tc.fails > maxReadBackRetries {
					want = 0
				}
				if got := metricstest.Counter(p.m.Skipped, "east", "west", entryrule.SkipAlreadyCopied); got != want {
					t.Errorf("skipped as already copied = %v messages, want %v", got, want)
				}
			})
		})
	}
}

// A read-back that fails for good (past maxReadBackRetries, or refused
// for good) while the remote deduplicates and its record covers entries
// the cursor still holds (copied by an earlier session whose receipts
// were lost): the partition sends nothing and acknowledges nothing, and
// waits (partitions_awaiting_readback) until a read-back goes through;
// then every entry is on the remote once and in order. Before, the
// session sent them under counted sequence ids, which the remote took as
// new: e0 and e1 stored twice, after e1. A record behind the cursor
// needs no proof: the entries go out under their own ids at once.
//
// Fails for: the awaitReadBack check removed from session.send.
func TestEntryPipeReadBackFailsWithDedup(t *testing.T) {
	linkErr := func() error { return &wire.ConnError{Addr: "west:6650", Err: io.ErrUnexpectedEOF} }
	refused := func() error {
		return &wire.BrokerError{Code: wire.AuthorizationError, Message: "not authorized to consume"}
	}
	for _, tc := range []struct {
		name   string
		copied []string // on the remote, its record at the last of them
		fails  []error  // the read-backs that fail, in order
		waits  bool
	}{
		{"link errors past the retries, record covers the cursor", []string{"e0", "e1"}, repeatErr(linkErr, maxReadBackRetries+1), true},
		{"refused, record covers the cursor", []string{"e0", "e1"}, repeatErr(refused, 3), true},
		{"link errors past the retries, no record", nil, repeatErr(linkErr, maxReadBackRetries+1), false},
		{"refused, no record", nil, repeatErr(refused, 3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.dedup = true
				w.add(4, nil)
				w.remote = slices.Clone(tc.copied)
				if n := len(tc.copied); n > 0 {
					last, _ := entrySeq(namePos(tc.copied[n-1]), 0)
					w.lastSeq = int64(last)
				}
				w.readBackErrs = tc.fails
				p := newTestEntryPartition(t, w)
				// As the first read-back that goes through starts: what
				// went out and was acknowledged without the proof.
				var waited float64
				var sentBefore, ackedBefore []string
				w.beforeReadBack = func() {
					w.mu.Lock()
					defer w.mu.Unlock()
					if len(w.readBackErrs) == 0 && sentBefore == nil {
						waited = metricstest.Gauge(p.m.PartitionsAwaitingReadBack, "east", "west")
						sentBefore = []string{}
						for _, se := range w.sendLog {
							sentBefore = append(sentBefore, se.name)
						}
						ackedBefore = slices.Clone(w.ackLog)
					}
				}
				stop := runEntryPartition(t, p)
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })
				stop()
				_, remote, _ := w.snapshot()
				if want := []string{"e0", "e1", "e2", "e3"}; !slices.Equal(remote, want) {
					t.Errorf("remote holds %v, want %v: each once, in order", remote, want)
				}
				if tc.waits {
					if sentBefore == nil {
						t.Fatal("no read-back went through")
					}
					if len(sentBefore) != 0 || len(ackedBefore) != 0 {
						t.Errorf("before a read-back went through: sent %v, acknowledged %v; want nothing", sentBefore, ackedBefore)
					}
					if waited != 1 {
						t.Errorf("partitions_awaiting_readback = %v while waiting, want 1", waited)
					}
				} else if len(sentBefore) != 0 {
					// Every entry went out before the failures ran out.
					t.Errorf("a read-back went through after %v were sent; want them sent without waiting", sentBefore)
				}
				if got := metricstest.Gauge(p.m.PartitionsAwaitingReadBack, "east", "west"); got != 0 {
					t.Errorf("partitions_awaiting_readback = %v at the end, want 0", got)
				}
				for _, v := range w.violations {
					t.Error(v)
				}
			})
		})
	}
}

func repeatErr(f func() error, n int) []error {
	var out []error
	for range n {
		out = append(out, f())
	}
	return out
}

// A read-back that goes through starts the count of failed ones again:
// after two failed read-backs and a good one, a later run of
// maxReadBackRetries failures (a target restarting) still ends each of
// those sessions, and the next one reads back before it sends, so the
// copies the remote holds of unacknowledged entries are not sent again.
// Counted on from two, the session after the third failure of the run
// gave up and sent them again: duplicates.
//
// Fails for: `p.readBackFails = 0` removed from session.target.
func TestEntryPipeReadBackFailsReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		linkErr := func() error { return &wire.ConnError{Addr: "west:6650", Err: io.ErrUnexpectedEOF} }
		w := newFakeEntryWorld()
		w.add(4, nil)
		w.remote = []string{"e0", "e1"} // copied by an earlier session
		w.readBackErrs = []error{linkErr(), linkErr()}
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "e0..e3 acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })

		// The cursor's link breaks; e4 and e5 were copied by a session
		// whose receipts were lost; the target restarts: the next
		// maxReadBackRetries read-backs fail.
		w.mu.Lock()
		w.recvErr = linkErr()
		w.remote = append(w.remote, "e4", "e5")
		for range maxReadBackRetries {
			w.readBackErrs = append(w.readBackErrs, linkErr())
		}
		w.mu.Unlock()
		w.add(4, nil)
		waitFor(t, "e0..e7 acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 8 })
		stop()
		_, remote, _ := w.snapshot()
		slices.Sort(remote)
		if want := []string{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v (each once: a read-back went through before e4 was sent)", remote, want)
		}
		if got := metricstest.Counter(p.m.Skipped, "east", "west", entryrule.SkipAlreadyCopied); got != 8 {
			t.Errorf("skipped as already copied = %v messages, want 8 (e0, e1, e4, e5)", got)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.readBackErrs) != 0 {
			t.Errorf("%d failing read-backs never tried, want all tried", len(w.readBackErrs))
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

func TestEntryPipeRefusedEntry(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("skip=%v", skip), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(4, nil)
				w.sendErr = map[string]error{"e2": fmt.Errorf("x: %w", wire.ErrTooLarge)}
				p := newTestEntryPartition(t, w)
				p.skipRefused = skip
				stop := runEntryPartition(t, p)
				if skip {
					waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })
				} else {
					waitFor(t, "the partition stopped", func() bool {
						return metricstest.Gauge(p.m.PartitionsStopped, "east", "west", entryrule.SkipRejectedTooBig) == 1
					})
					time.Sleep(time.Minute)
					synctest.Wait()
				}
				acks, remote, _ := w.snapshot()
				stop()
				wantAcks, wantRemote := []string{"e0", "e1"}, []string{"e0", "e1"}
				if skip {
					wantAcks, wantRemote = []string{"e0", "e1", "e2", "e3"}, []string{"e0", "e1", "e3"}
				}
				slices.Sort(acks)
				if !slices.Equal(acks, wantAcks) || !slices.Equal(remote, wantRemote) {
					t.Errorf("acknowledged %v and remote holds %v, want %v and %v", acks, remote, wantAcks, wantRemote)
				}
				if w.opens != 1 {
					t.Errorf("opened %d producers, want 1 (a refused entry is not retried)", w.opens)
				}
			})
		})
	}
}

// The target broker's permanent refusals (issue 21, item 4): NotAllowed
// on a send and IncompatibleSchema when registering the schema, and a
// schema version the source no longer serves, take the on_refused route
// like an entry too large: the partition stops at the entry, or with skip
// the entry is skipped and counted and what follows is copied. Before, both ended the session with an ordinary error, retried
// every 10 s for ever with partitions_stopped at 0 and skip without effect.
// refuseE2 is a fake receipt: entry e2 refused with err, the rest stored.
func refuseE2(err error) func(name string) (bool, error) {
	return func(name string) (bool, error) {
		if name == "e2" {
			return false, err
		}
		return false, nil
	}
}

func TestEntryPipeBrokerRefusals(t *testing.T) {
	v3 := []byte("\x00\x00\x00\x00\x00\x00\x00\x03")
	tests := []struct {
		name   string
		reason string
		setup  func(w *fakeEntryWorld)
	}{
		{"NotAllowed on send", entryrule.SkipRejectedNotAllowed, func(w *fakeEntryWorld) {
			w.add(2, nil)
			w.add(1, nil)
			w.add(1, nil)
			w.receipt = refuseE2(&wire.BrokerError{Op: "send", Code: wire.NotAllowedError, Message: "maxMessageSize"})
		}},
		{"encryption required (MetadataError on send)", entryrule.SkipRejectedNotAllowed, func(w *fakeEntryWorld) {
			w.add(2, nil)
			w.add(1, nil)
			w.add(1, nil)
			w.receipt = refuseE2(&wire.BrokerError{Op: "send to t", Code: wire.MetadataError, Message: "Messages must be encrypted"})
		}},
		{"IncompatibleSchema on the target", entryrule.SkipRejectedSchema, func(w *fakeEntryWorld) {
			w.add(2, nil)
			w.add(1, nil, schemaVersion(v3))
			w.add(1, nil)
			w.schemaErr = &wire.BrokerError{Op: "get or create schema", Code: wire.IncompatibleSchema, Message: "incompatible"}
		}},
		{"a schema version the source no longer serves", entryrule.SkipSourceSchemaMissing, func(w *fakeEntryWorld) {
			w.add(2, nil)
			w.add(1, nil, schemaVersion(v3))
			w.add(1, nil)
			w.schemaErr = fetchSchemaError("east", schemaNotFound)
		}},
	}
	for _, tt := range tests {
		for _, skip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/skip=%v", tt.name, skip), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newFakeEntryWorld()
					tt.setup(w)
					p := newTestEntryPartition(t, w)
					p.skipRefused = skip
					stop := runEntryPartition(t, p)
					defer stop() // also when waitFor gives up
					if skip {
						waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })
					} else {
						waitFor(t, "the partition stopped", func() bool {
							return metricstest.Gauge(p.m.PartitionsStopped, "east", "west", tt.reason) == 1
						})
						time.Sleep(time.Minute)
						synctest.Wait()
					}
					acks, remote, _ := w.snapshot()
					stop()
					slices.Sort(acks)
					if !skip {
						if !slices.Equal(acks, []string{"e0", "e1"}) {
							t.Errorf("acknowledged %v, want e0 e1 (stopped at e2)", acks)
						}
						return
					}
					if got := metricstest.Counter(p.m.Skipped, "east", "west", tt.reason); got != 2 {
						t.Errorf("skipped{reason=%s} = %v messages, want e2's 2", tt.reason, got)
					}
					if slices.Contains(remote, "e2") || !slices.Contains(remote, "e3") {
						t.Errorf("remote holds %v, want e3 and not e2", remote)
					}
					for _, v := range w.violations {
						t.Error(v)
					}
				})
			})
		}
	}
}

func TestEntryPipeSchemaVersions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.schemas = map[string][]byte{"\x00\x00\x00\x00\x00\x00\x00\x03": []byte("\x00\x00\x00\x00\x00\x00\x00\x07")}
		w.add(1, nil, schemaVersion([]byte("\x00\x00\x00\x00\x00\x00\x00\x03")))
		w.add(1, nil)
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "the entries acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 2 })
		stop()
		if len(w.schemaSent) != 2 || string(w.schemaSent[0]) != "\x00\x00\x00\x00\x00\x00\x00\x07" || w.schemaSent[1] != nil {
			t.Errorf("schema versions sent %q, want the remote's version 7 for the first entry and none for the second", w.schemaSent)
		}
	})
}

// Entries written in a transaction reach the cursor only once it has
// committed (the broker holds back open transactions and filters aborted
// ones), with the transaction id in their metadata. The copy is sent
// without it, as Pulsar's replicator does (the id names a transaction of
// the origin's coordinator; on the remote it would be looked up there),
// and with every other byte of the metadata as the origin wrote it.
func TestEntryPipeDropsTransactionID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		batch := func(b *wire.MetadataBuilder) {
			b.Properties = []wire.KeyValue{{Key: "app", Value: "a"}}
			b.PartitionKey, b.EventTime, b.NullValue = "k", 1_700_000_000_123, true
		}
		w.add(1, nil) // e0: plain
		// e1: a batch in transaction 1:5 (the id sits between other fields).
		w.add(1, func(b *wire.MetadataBuilder) { batch(b); b.TxnIDMostBits, b.TxnIDLeastBits = 1, 5 })
		// e2: a single message in transaction 0:7 of coordinator 0, whose
		// most significant bits are present and zero.
		txn07 := protowire.AppendVarint(protowire.AppendTag(nil, 22, protowire.VarintType), 7)
		txn07 = protowire.AppendVarint(protowire.AppendTag(txn07, 23, protowire.VarintType), 0)
		w.add(1, func(b *wire.MetadataBuilder) { b.NumMessagesInBatch = 0 }, txn07)
		w.add(1, nil) // e3: plain
		// What each copy's metadata must begin with: the origin's, minus
		// the transaction id.
		want := map[string][]byte{
			"e0": wire.MetadataBuilder{ProducerName: "app", PublishTime: 1_700_000_000_000, NumMessagesInBatch: 2}.Append(nil),
			"e1": func() []byte {
				b := wire.MetadataBuilder{ProducerName: "app", PublishTime: 1_700_000_000_000, NumMessagesInBatch: 2}
				batch(&b)
				return b.Append(nil)
			}(),
			"e2": wire.MetadataBuilder{ProducerName: "app", PublishTime: 1_700_000_000_000}.Append(nil),
		}
		want["e3"] = want["e0"]
		for i, name := range []string{"e1", "e2"} {
			md, err := wire.ParseMetadata(w.entries[i+1].Metadata)
			if err != nil || !md.HasTxnID {
				t.Fatalf("%s: the test's entry has no transaction id (%v)", name, err)
			}
		}
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })
		stop()
		_, remote, _ := w.snapshot()
		if want := []string{"e0", "e1", "e2", "e3"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v", remote, want)
		}
		for name, prefix := range want {
			sent := w.mdSent[name]
			if !bytes.HasPrefix(sent, prefix) {
				t.Errorf("%s: metadata sent %x, want it to begin with the origin's without the transaction id, %x", name, sent, prefix)
			}
			md, err := wire.ParseMetadata(sent)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if md.HasTxnID || md.ReplicatedFrom != "east" {
				t.Errorf("%s: sent with a transaction id: %v, replicated_from %q", name, md.HasTxnID, md.ReplicatedFrom)
			}
		}
		if got := metricstest.Counter(p.m.Messages, "east", "west"); got != 7 {
			t.Errorf("replicated messages = %v, want 7", got)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

func TestByteBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gauge float64
		b := newByteBudget(100, func(v float64) { gauge = v })
		ctx := context.Background()
		if err := b.acquire(ctx, 60); err != nil {
			t.Fatal(err)
		}
		if err := b.acquire(ctx, 40); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.acquire(ctx, 10) }()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("acquired past the limit")
		default:
		}
		b.release(60)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if gauge != 50 {
			t.Errorf("gauge = %v, want 50", gauge)
		}
		b.release(50)
		// An entry larger than the whole budget passes alone.
		if err := b.acquire(ctx, 500); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		go func() { got <- b.acquire(cctx, 1) }()
		synctest.Wait()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Errorf("acquire after cancel = %v, want context.Canceled", err)
		}
	})
}

// The cursor's client reconnects while entries are in flight: the broker
// delivers them again. None is sent or acknowledged twice: the session
// starts over and the read-back finds what the remote has.
func TestEntryPipeCursorRedelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(6, nil)
		w.hold = make(chan struct{})
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		synctest.Wait() // all six sent, no receipt yet
		w.rewind()
		synctest.Wait()
		close(w.hold)
		w.mu.Lock()
		w.hold = nil
		w.mu.Unlock()
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 6 })
		stop()
		_, remote, _ := w.snapshot()
		if want := []string{"e0", "e1", "e2", "e3", "e4", "e5"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v once each", remote, want)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// A Failover cursor whose active consumer changed during a read hands the
// new consumer a later entry before the first unacknowledged one; sent,
// it would land before the earlier ones (issue 20, item 3: 96 entries
// after a later one in an HA kill chain). The session checks its first
// entry against the mark-delete position and starts again instead. An
// entry that keeps coming first is taken as the start after
// maxStartAhead sessions, and a broker that does not say its mark-delete
// position gets the old behaviour.
func TestEntryPipeStartsAtCursor(t *testing.T) {
	in := []string{"e0", "e1", "e2", "e3", "e4", "e5"}
	tests := []struct {
		name        string
		ahead       int // 1 + the entry delivered first by the first cursor
		undelivered int // 1 + the entry never delivered
		noMD        bool
		want        []string
		acks        int
	}{
		{"later entry first", 5, 0, false, in, 6},
		{"first entry never delivered", 0, 1, false, in[1:], 5},
		{"no mark-delete position", 5, 0, true, []string{"e4", "e0", "e1", "e2", "e3", "e5"}, 6}, // the reordering this check prevents
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(6, nil)
				w.aheadFirst, w.undelivered, w.noMarkDelete = tt.ahead, tt.undelivered, tt.noMD
				p := newTestEntryPartition(t, w)
				stop := runEntryPartition(t, p)
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == tt.acks })
				stop()
				_, remote, _ := w.snapshot()
				if !slices.Equal(remote, tt.want) {
					t.Errorf("remote holds %v, want %v", remote, tt.want)
				}
			})
		})
	}
}

// A cursor that becomes a standby closes its producer (the active
// instance elsewhere opens one under the same name) and sends nothing;
// Config.Active (what the continuous verifier goes by) follows the
// cursor, and is false once the partition stops.
func TestEntryPipeStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(2, nil)
		p := newTestEntryPartition(t, w)
		var active atomic.Bool
		p.activeOut = &active
		told := &activeTold{active: &active}
		p.sync = told
		stop := runEntryPartition(t, p)
		waitFor(t, "two entries acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 2 })
		told.want(t, "active", true)
		if got := metricstest.Gauge(p.m.Connected, "east", "west"); got != 1 {
			t.Fatalf("connected = %v while active, want 1", got)
		}
		if !active.Load() {
			t.Error("Active false while the cursor is active")
		}
		w.mu.Lock()
		f := w.onActive
		w.mu.Unlock()
		f(false)
		synctest.Wait()
		if got := metricstest.Gauge(p.m.Connected, "east", "west"); got != 0 {
			t.Errorf("connected = %v as a standby, want 0 (producer released)", got)
		}
		// The next session's cursor starts as a standby too.
		w.mu.Lock()
		f = w.onActive
		w.mu.Unlock()
		f(false)
		synctest.Wait()
		if active.Load() {
			t.Error("Active true as a standby")
		}
		told.want(t, "standby", false)
		f(true)
		synctest.Wait()
		if !active.Load() {
			t.Error("Active false once the cursor is active again")
		}
		told.want(t, "active again", true)
		stop()
		if active.Load() {
			t.Error("Active true after the partition stopped")
		}
		told.want(t, "stopped", false)
	})
}

// activeTold is a SyncFeed that records Config.Active at each
// ActiveChanged (the sync's loop may sleep for minutes otherwise) and
// takes nothing else.
type activeTold struct {
	active *atomic.Bool
	mu     sync.Mutex
	seen   []bool
}

func (a *activeTold) ActiveChanged() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, a.active.Load())
}

// want fails unless the sync was last told of a change to active.
func (a *activeTold) want(t *testing.T, when string, active bool) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.seen); n == 0 || a.seen[n-1] != active {
		t.Errorf("%s: the sync was told %v, want the last change to %v", when, a.seen, active)
	}
}

func (*activeTold) DataAt(context.Context, marker.Position, string, marker.Position) {}
func (*activeTold) MarkerAt(context.Context, marker.Position, []byte, marker.Origin, string) bool {
	return true
}
func (*activeTold) BatchedMarker(marker.Position)          {}
func (*activeTold) Takeover()                              {}
func (*activeTold) StartsAt(marker.Position) bool          { return true }
func (*activeTold) Run(ctx context.Context, _ func() bool) { <-ctx.Done() }

// A byte rate alone throttles the entry pipe (no message rate set).
func TestEntryPipeByteRateAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(20, nil) // 7 payload bytes each: 140 bytes
		p := newTestEntryPartition(t, w)
		p.byteRate = cluster.NewLimiter(14) // 2 entries a second
		start := time.Now()
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 20 })
		took := time.Since(start)
		stop()
		if took < 8*time.Second {
			t.Errorf("140 bytes at 14 bytes/s took %v, want about 10 s", took)
		}
	})
}

// The entry pipe keeps subscriptions in step: its own markers for the
// remote are forwarded (snapshots stay), copies of the remote's markers
// feed the machine or the update queue, and nothing that only looks like
// a marker is trusted or lost.
func TestEntryPipeSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		rig := newSyncRig(t, rigConfig{fresh: true})
		mk := func(m marker.Marker) marker.Marker { m.Topic = syncTopic; return m }
		enc := func(m marker.Marker, key []byte) []byte {
			b, err := marker.Encode(mk(m), key)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		single := func(producer, from string, kind marker.Kind) func(*wire.MetadataBuilder) {
			return func(b *wire.MetadataBuilder) {
				b.ProducerName, b.ReplicatedFrom, b.NumMessagesInBatch = producer, from, 0
				b.Properties = []wire.KeyValue{{Key: marker.Property, Value: fmt.Sprint(int(kind))}}
			}
		}
		own, theirs := "geo-sidecar.markers.east-->west", "geo-sidecar.markers.west-->east"
		// signedCopy adds west's marker body as the entry pipe copies it
		// from west (originID) to target, signed over what it sends;
		// signedOver, when set, is the body the signature was made for.
		signedCopy := func(body []byte, kind marker.Kind, originID, target string, signedOver []byte) {
			if signedOver == nil {
				signedOver = body
			}
			w.addEntry(body, single(theirs, "west", kind), func(raw []byte) []byte {
				return signedCopyMD(raw, signedOver, syncKey, syncTopic, "west", target, originID)
			})
		}
		req := marker.Marker{Kind: marker.KindSnapshotRequest, From: "east", To: "west", SnapshotID: "r1", Time: 5}
		rig.s.Wrote(mk(req)) // written by this process
		up := marker.Marker{Kind: marker.KindUpdate, From: "west", To: "east", Subscription: "billing",
			Remote: subsynctest.Pos(7, 3), Time: time.Now().UnixMilli()}
		w.add(1, nil)                                                                // e0: data
		w.addPayload(enc(req, syncKey), single(own, "", marker.KindSnapshotRequest)) // e1: ours, forwarded
		w.addPayload(enc(marker.Marker{Kind: marker.KindSnapshot, From: "east", To: "west", SnapshotID: "s1", Local: subsynctest.Pos(9, 1), Remote: subsynctest.Pos(8, 1)}, syncKey),
			single(own, "", marker.KindSnapshot)) // e2: stays
		signedCopy(enc(up, syncKey), marker.KindUpdate, "60:3:-1", "east", nil) // e3: applied here
		w.addPayload(enc(marker.Marker{Kind: marker.KindUpdate, From: "east", To: "west", Subscription: "billing",
			Remote: subsynctest.Pos(1, 1)}, []byte("not-the-key-0123456789")), single("mallory", "", marker.KindUpdate)) // e4: forged
		w.add(1, func(b *wire.MetadataBuilder) { // e5: an application's batch whose first message looks like a marker
			b.Properties = []wire.KeyValue{{Key: marker.Property, Value: "13"}}
		})
		w.addPayload(enc(marker.Marker{Kind: marker.KindSnapshotRequest, From: "east", To: "west", SnapshotID: "r2"}, syncKey),
			func(b *wire.MetadataBuilder) { b.ProducerName, b.NumMessagesInBatch = own, 3 }) // e6: a batch of markers (older writers)
		w.addPayload(enc(req, syncKey), single("mallory", "", marker.KindSnapshotRequest)) // e7: ours, published again
		up2 := up
		up2.Remote, up2.Time = subsynctest.Pos(9, 9), up.Time+1
		w.addPayload(enc(up2, syncKey), single(theirs, "west", marker.KindUpdate)) // e8: a copy without a signed origin
		signedCopy(enc(up, syncKey), marker.KindUpdate, "60:3:-1", "east", nil)    // e9: e3 published again: a replay
		// e10: a genuine marker body (up2, as north or west holds it)
		// under the origin of a newer copy made for another body: the
		// issue 20 transplant, which the signature's digest refuses.
		signedCopy(enc(up2, syncKey), marker.KindUpdate, "60:4:-1", "east", enc(up, syncKey))
		// e11: up2 as copied to north, origin and all, republished here.
		signedCopy(enc(up2, syncKey), marker.KindUpdate, "60:5:-1", "north", nil)
		w.add(1, nil) // e12: data

		p := newTestEntryPartition(t, w)
		p.topic, p.keys, p.sync = syncTopic, marker.NewKeys(syncKey), rig.s
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 13 })
		stop()
		_, remote, _ := w.snapshot()
		if want := []string{"e0", "e1", "e5", "e12"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v", remote, want)
		}
		// The signed update is queued, or already applied by run's loop;
		// neither the unsigned copy, the replay nor the transplants moved
		// it on.
		queued, calls := rig.pending(), rig.subs.TakeCalls()
		if at, ok := queued["billing"]; (ok && at != subsynctest.Pos(7, 3)) || (!ok && len(calls) == 0) {
			t.Errorf("queued %v, applied %v; want billing at 7:3 (not the replay's 9:9)", queued, calls)
		}
		for _, c := range calls {
			if strings.Contains(c, "9:9") {
				t.Errorf("applied %q: the replay moved the subscription", c)
			}
		}
		for reason, n := range map[string]float64{"signature": 1, "batched": 1, "not-written-here": 1, "unsigned-copy": 3, "replayed": 1} {
			if got := metricstest.Counter(rig.m.MarkersInvalid, "east", reason); got != n {
				t.Errorf("invalid markers{reason=%q} = %v, want %v", reason, got, n)
			}
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// Receipts that arrive after the session stopped (the producer drains
// after the drain timed out) never block the producer's goroutine, nor
// touch the closed cursor.
func TestEntryPipeLateReceiptsNeverBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.window = 3
		w.hold = make(chan struct{})
		w.add(10, nil)
		p := newTestEntryPartition(t, w)
		p.maxPending = w.window
		stop := runEntryPartition(t, p)
		waitFor(t, "a full window sent", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.sent) > 0 && len(w.sent[0]) == w.window
		})
		stop() // the drain times out: the receipts are still held
		close(w.hold)
		synctest.Wait() // every receipt delivered: none blocked
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.remote) != w.window {
			t.Errorf("remote holds %d entries, want the window of %d", len(w.remote), w.window)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// A sync that resumes past entries it did not see (another instance of
// the sidecar processed them) drops the third origins' watermarks and
// learns them again from the history; one that reads on without a gap
// does not.
func TestEntryPipeTakeoverRelearns(t *testing.T) {
	tests := []struct {
		name    string
		fresh   bool
		writing int64 // the ledger being written at start (the entries are in ledger 10)
		skipped int   // entries acknowledged by another instance before the start
		relearn bool
	}{
		{name: "fresh, from the first entry", fresh: true, writing: 10, skipped: 0, relearn: false},
		{name: "fresh, resumed mid-ledger (two instances started together)", fresh: true, writing: 10, skipped: 5, relearn: true},
		// Another instance read ledger 9 to its end, the topic was loaded
		// again, and this one takes over at the new ledger's first entry.
		{name: "fresh, resumed at a later ledger's first entry", fresh: true, writing: 9, skipped: 0, relearn: true},
		{name: "not fresh: learned at start already", fresh: false, writing: 10, skipped: 5, relearn: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(10, nil)
				for i := range tt.skipped {
					w.acked[fmt.Sprintf("e%d", i)] = true
				}
				rig := newSyncRig(t, rigConfig{third: []string{"north"}, fresh: tt.fresh})
				rig.s.LayoutAtStart = &cluster.Layout{Writing: tt.writing}
				if !tt.fresh {
					rig.s.Machine.Learn("north", subsynctest.Pos(4, 4))
				}
				p := newTestEntryPartition(t, w)
				p.topic, p.keys, p.sync = syncTopic, marker.NewKeys(syncKey), rig.s
				stop := runEntryPartition(t, p)
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 10-tt.skipped })
				synctest.Wait()
				relearned := rig.hist.Opens() > 0
				stop()
				if relearned != tt.relearn {
					t.Errorf("history re-read = %v, want %v", relearned, tt.relearn)
				}
				if unknown := len(rig.s.Machine.Unknown()) > 0; unknown != tt.relearn {
					t.Errorf("watermarks unknown = %v, want %v", unknown, tt.relearn)
				}
			})
		})
	}
}

// continues after entries were seen: the next entry of the same ledger or
// one seen already follows; the first entry of a later ledger does not
// (the ledger before may hold entries another instance read).
func TestEntryContinues(t *testing.T) {
	last := subsynctest.Pos(10, 4)
	tests := []struct {
		name string
		next marker.Position
		want bool
	}{
		{"next entry", subsynctest.Pos(10, 5), true},
		{"delivered again", subsynctest.Pos(10, 3), true},
		{"gap in the ledger", subsynctest.Pos(10, 7), false},
		{"first entry of a later ledger", subsynctest.Pos(11, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rig := newSyncRig(t, rigConfig{third: []string{"north"}, fresh: true})
			p := &Partition{sync: rig.s, lastSeen: last, hasSeen: true}
			if got := p.continues(tt.next); got != tt.want {
				t.Errorf("continues(%v) after %v = %v, want %v", tt.next, last, got, tt.want)
			}
		})
	}
}

// An active instance whose remote has no working link for the bound
// steps down: it closes its cursor (the broker makes another instance's
// active), does not subscribe again while the remote does not answer,
// and subscribes again once it does. Alone, it loses nothing: the
// entries wait on the cursor, and what reached the remote unconfirmed is
// read back, not sent twice. A link back within the bound moves nothing.
func TestEntryPipeStepsDown(t *testing.T) {
	const bound = 20 * time.Second
	refused := &wire.ConnError{Addr: "west:6650", Err: errors.New("connection refused")}
	tests := []struct {
		name string
		// fromStart: the remote is unreachable before the producer
		// opens (it cannot be opened); else its link goes down after
		// e0..e2 were copied and e3..e5 are sent into the cut.
		fromStart bool
		cutStores bool // e3..e5 reach the remote, their receipts do not
		// answers: the producer cannot be opened (no answer in time), yet
		// the remote answers a lookup from here (a broker slow to load
		// the topic, or the open waiting its turn): nothing to step down
		// from, however long it lasts.
		answers   bool
		downFor   time.Duration // the fault lasts this long
		stepsDown bool
	}{
		{name: "link down past the bound", downFor: 10 * time.Minute, stepsDown: true},
		{name: "link down past the bound, sends landed unconfirmed", cutStores: true, downFor: 10 * time.Minute, stepsDown: true},
		{name: "producer cannot be opened past the bound", fromStart: true, downFor: 10 * time.Minute, stepsDown: true},
		// Back at half the bound: the next attempt (the backoff reaches
		// 5 s, ±20 %) still comes well before it.
		{name: "link back within the bound", downFor: bound / 2, stepsDown: false},
		{name: "producer opens within the bound", fromStart: true, downFor: bound / 2, stepsDown: false},
		{name: "producer cannot be opened past the bound, the remote answers", fromStart: true, answers: true, downFor: 10 * time.Minute, stepsDown: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(3, nil)
				switch {
				case tt.answers:
					w.openErr = fmt.Errorf("create producer: %w", context.DeadlineExceeded)
				case tt.fromStart:
					w.unreachable = refused
				}
				p := newTestEntryPartition(t, w)
				p.stepDownAfter = bound
				stop := runEntryPartition(t, p)
				defer stop()
				if !tt.fromStart {
					waitFor(t, "e0..e2 acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 3 })
					w.mu.Lock()
					w.cut, w.cutStores, w.unreachable = true, tt.cutStores, refused
					w.mu.Unlock()
					w.link(false)
				}
				start := time.Now()
				w.add(3, nil) // e3..e5
				sources := func() (n int, firstClosed bool, probes int) {
					w.mu.Lock()
					defer w.mu.Unlock()
					select {
					case <-w.sources[0].closed:
						firstClosed = true
					default:
					}
					return len(w.sources), firstClosed, w.probes
				}
				steps := func() float64 { return metricstest.Counter(p.m.Links.StepDowns, "west") }

				// Just inside the bound, or at the fault's end if sooner:
				// still active, still subscribed.
				time.Sleep(min(bound-time.Second, tt.downFor))
				synctest.Wait()
				if n, closed, _ := sources(); n != 1 || closed || steps() != 0 {
					t.Fatalf("%s into the fault: %d cursors opened, the first closed = %v, step-downs %v; want the one cursor kept",
						time.Since(start), n, closed, steps())
				}
				if tt.stepsDown {
					time.Sleep(2 * time.Second)
					synctest.Wait()
					if n, closed, _ := sources(); n != 1 || !closed || steps() != 1 {
						t.Fatalf("past the bound: %d cursors opened, the first closed = %v, step-downs %v; want the cursor closed, once",
							n, closed, steps())
					}
				}
				time.Sleep(time.Until(start.Add(tt.downFor)))
				synctest.Wait()
				n, _, probes := sources()
				if n != 1 {
					t.Errorf("%d cursors opened while the remote was unreachable, want 1 (no resubscribe before it answers)", n)
				}
				if (tt.stepsDown || tt.answers) && probes < 2 {
					t.Errorf("the remote was asked %d times in %s whether it answers, want it asked again and again", probes, tt.downFor)
				}
				w.heal()
				w.mu.Lock()
				w.openErr = nil
				w.mu.Unlock()
				if !tt.fromStart && !tt.stepsDown {
					w.link(true)
				}
				if !tt.stepsDown {
					time.Sleep(10 * time.Minute) // long past the bound
				}
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 6 })
				n, _, _ = sources()
				if want := map[bool]int{true: 2, false: 1}[tt.stepsDown]; n != want {
					t.Errorf("%d cursors opened in all, want %d", n, want)
				}
				if got, want := steps(), map[bool]float64{true: 1, false: 0}[tt.stepsDown]; got != want {
					t.Errorf("step-downs = %v, want %v", got, want)
				}
				_, remote, _ := w.snapshot()
				if want := []string{"e0", "e1", "e2", "e3", "e4", "e5"}; !slices.Equal(remote, want) {
					t.Errorf("remote holds %v, want %v: each once, in order", remote, want)
				}
				for _, v := range w.violations {
					t.Error(v)
				}
			})
		})
	}
}

// A session given up on can leave sends in the link that land after the
// next session opened its producer, and after it sent the same entries
// (the slow link of e2e TestWANSlowLink). With deduplication on the
// remote, each entry is stored once and in order whichever copy lands
// first. With ids counted per session this stored e6..e9 under ids the
// first session had used for e3..e6, then e3..e5 after them; before
// epochs (entrySeq) it still did from ledger 2^31 on.
func TestEntryPipeLateSendsOfAbandonedSession(t *testing.T) {
	for _, ledger := range []uint64{10, 1<<31 - 1, 1 << 31, 1<<31 + 9, 1 << 32, 1<<40 + 3} {
		t.Run(fmt.Sprint("ledger ", ledger), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.dedup = true
				w.ledger = ledger
				w.add(10, nil) // e0..e9
				w.cut = true
				p := newTestEntryPartition(t, w)
				stop := runEntryPartition(t, p)
				hold := make(chan struct{})
				var once sync.Once
				release := func() { once.Do(func() { close(hold) }) }
				// Stop also after a failure: nothing left blocked in the bubble.
				t.Cleanup(func() { release(); stop() })
				synctest.Wait() // session 1 sent all ten into the cut
				w.mu.Lock()
				// Session 2's producer opens before anything landed; e0..e2 land
				// while it reads the remote back, the rest after it sent e3..e9
				// (its receipts wait, so it sends all before hearing of any).
				w.beforeReadBack = func() {
					w.mu.Lock()
					w.beforeReadBack = nil
					w.mu.Unlock()
					w.land(3)
				}
				w.hold = hold
				w.mu.Unlock()
				w.abandon()
				waitFor(t, "session 2 sent e3..e9", func() bool {
					w.mu.Lock()
					defer w.mu.Unlock()
					return w.opens == 2 && len(w.sent[1]) == 7
				})
				w.land(-1)
				release()
				waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 10 })
				stop()
				_, remote, _ := w.snapshot()
				var want []string
				for e := range uint64(10) {
					want = append(want, entryName(wire.EntryID(ledger, e)))
				}
				if !slices.Equal(remote, want) {
					t.Errorf("remote holds %v, want %v: each entry once, in order", remote, want)
				}
				for _, v := range w.violations {
					t.Error(v)
				}
			})
		})
	}
}

// Ledger ids reach 2^31 and beyond on long-lived clusters (BookKeeper
// counts them across the cluster). Every entry still gets its packed id:
// each epoch of 2^31 ledger ids goes under a producer name of its own,
// the session switching names once what it sent under the old one is
// confirmed, and sessions that start again within an epoch read back and
// carry on under its name. With deduplication on the remote, each entry
// is stored once and in order. Before epochs, the entries from ledger
// 2^31 on went under counted ids (the floor), which a slow link stored
// twice and out of order (see TestEntryPipeLateSendsOfAbandonedSession).
func TestEntryPipeEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			l0 = 1<<31 - 1 // the last ledger of epoch 0
			l1 = 1 << 31   // the first of epoch 1
			l2 = 1<<31 + 1
			l3 = 1 << 32   // epoch 2
			l4 = 1<<40 + 5 // epoch 512
		)
		w := newFakeEntryWorld()
		w.dedup, w.closeFails = true, true
		w.lastSeq = 9<<32 | 70 // the record of an earlier ledger
		var all []string
		publish := func(ledger uint64, n int) {
			w.ledger = ledger
			w.add(n, nil)
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, e := range w.entries[len(w.entries)-n:] {
				all = append(all, entryName(e.ID))
			}
		}
		acked := func() int { a, _, _ := w.snapshot(); return len(a) }
		hold := func() chan struct{} {
			h := make(chan struct{})
			w.mu.Lock()
			w.hold = h
			w.mu.Unlock()
			return h
		}
		release := func(h chan struct{}) {
			close(h)
			w.mu.Lock()
			w.hold = nil
			w.mu.Unlock()
		}
		// cut makes the next sends reach the remote without receipts;
		// restart then gives their link up (the sends fail, the session
		// starts over and reads back), and the link delivers them once
		// more, which the remote's deduplication drops.
		cut := func() {
			w.mu.Lock()
			w.cut, w.cutStores = true, true
			w.mu.Unlock()
		}
		restart := func() {
			synctest.Wait()
			w.abandon()
			w.land(-1)
		}
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		t.Cleanup(stop) // also after a failure: nothing left blocked in the bubble

		// Epoch 0, one session starting over.
		cut()
		publish(l0, 6)
		restart()
		waitFor(t, "ledger 2^31-1 acknowledged", func() bool { return acked() == 6 })

		// The crossing, with entries of epoch 0 in flight: the session
		// waits for their receipts before it ends.
		h := hold()
		publish(l0, 3)
		publish(l1, 3)
		synctest.Wait()
		w.mu.Lock()
		opens, inFlight := w.opens, slices.Clone(w.sent[len(w.sent)-1])
		w.mu.Unlock()
		if want := all[6:9]; opens != 2 || !slices.Equal(inFlight, want) {
			t.Errorf("at the crossing: %d producers opened, the latest sent %v; want 2, the latest sending %v and waiting", opens, inFlight, want)
		}
		release(h)
		waitFor(t, "the crossing acknowledged", func() bool { return acked() == 12 })

		// Epoch 1, one session starting over: its read-back reaches as
		// far as the epoch's record says.
		cut()
		publish(l1, 3)
		restart()
		waitFor(t, "ledger 2^31 acknowledged", func() bool { return acked() == 15 })

		// Another ledger of epoch 1, then epochs 2 and 512.
		publish(l2, 2)
		publish(l3, 2)
		publish(l4, 2)
		waitFor(t, "every entry acknowledged", func() bool { return acked() == len(all) })
		stop()

		w.mu.Lock()
		defer w.mu.Unlock()
		if !slices.Equal(w.remote, all) {
			t.Errorf("remote holds %v, want %v: each entry once, in order", w.remote, all)
		}
		last := map[uint64]uint64{}
		for _, s := range w.sendLog {
			pos := namePos(s.name)
			want := uint64(pos.Ledger)%(1<<31)<<32 | uint64(pos.Entry)
			if s.seq != want {
				t.Errorf("%s sent under id %d, want %d (its packed position)", s.name, s.seq, want)
			}
			if e := uint64(pos.Ledger) / (1 << 31); s.epoch != e {
				t.Errorf("%s sent under the producer name of epoch %d, want %d", s.name, s.epoch, e)
			}
			if l, ok := last[s.epoch]; ok && s.seq <= l {
				t.Errorf("%s sent under id %d after %d under the same producer name", s.name, s.seq, l)
			}
			last[s.epoch] = s.seq
		}
		// Producers: epoch 0 twice (the restart), the crossing, epoch 1
		// again (the restart), epochs 2 and 512.
		if want := []uint64{0, 0, 1, 1, 2, 512}; !slices.Equal(w.epochs, want) {
			t.Errorf("producers opened for epochs %v, want %v", w.epochs, want)
		}
		if want := []int{0, 0, 9, 12, 17, 19}; !slices.Equal(w.ackedAtOpen, want) {
			t.Errorf("entries acknowledged as each producer opened: %v, want %v (each switch after every earlier entry was confirmed)", w.ackedAtOpen, want)
		}
		// The read-backs: no record in the ledger; the 6 entries epoch 0's
		// record names; none in epoch 1 yet; the 3 its record then names.
		if want := []int64{0, 6, 0, 3, 0, 0}; !slices.Equal(w.reaches, want) {
			t.Errorf("read-backs reached %v entries by the records, want %v", w.reaches, want)
		}
		if got := metricstest.Counter(p.m.DupsUnproven, "east", "west"); got != 0 {
			t.Errorf("duplicates_unproven = %v, want 0", got)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}

// After a duplicate receipt the session sends nothing more: the window the
// receipts free must not carry entries past what the next session's
// read-back reaches (on a slow link a run of duplicate receipts let 135
// more out and the read-back missed the oldest copies).
func TestEntryPipeHaltsOnDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(40, nil) // e0..e39
		w.window = 4
		hold := make(chan struct{})
		w.hold = hold
		w.receipt = func(name string) (bool, error) {
			return name == "e0", nil // the first one answered as a duplicate
		}
		p := newTestEntryPartition(t, w)
		stop := runEntryPartition(t, p)
		synctest.Wait() // e0..e3 fill the window; e4 waits for a slot
		w.mu.Lock()
		w.hold, w.receipt = nil, nil // the next session's go through
		w.mu.Unlock()
		close(hold)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 40 })
		stop()
		w.mu.Lock()
		first := len(w.sent[0])
		w.mu.Unlock()
		if first > 5 {
			t.Errorf("the session sent %d entries, want at most 5 (its window of 4, and the one waiting for a slot when the duplicate receipt came)", first)
		}
	})
}

// A producer whose reconnect found the remote's deduplication record gone
// back fails what was in flight with wire.ErrInDoubt (e2 and e3 here,
// stored on the remote, their receipts lost with its broker). Neither is
// acknowledged on the cursor by that session; the next one starts at
// once (no backoff, no warning), reads the remote back, finds e2 and e3
// (and e4, e5 if the first session sent them) and skips them: every entry
// is on the remote once, in order, and acknowledged.
//
// Fails for: wire.ErrInDoubt taken as an ordinary send error (a backoff
// and a warning), or the in-doubt entries acknowledged.
func TestEntryPipeInDoubt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeEntryWorld()
		w.add(6, nil)
		w.receipt = func(name string) (bool, error) {
			if name == "e2" || name == "e3" {
				w.store(0, name, 0) // stored; the receipt lost
				return false, fmt.Errorf("wire: %w", wire.ErrInDoubt)
			}
			return false, nil
		}
		w.beforeReadBack = func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.opens == 2 { // the second session's go through
				w.receipt = nil
			}
		}
		core, logs := observer.New(zap.WarnLevel)
		p := newTestEntryPartition(t, w)
		p.log = zap.New(core)
		stop := runEntryPartition(t, p)
		waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 6 })
		stop()
		w.mu.Lock()
		atOpen := slices.Clone(w.ackedAtOpen)
		w.mu.Unlock()
		if len(atOpen) < 2 || atOpen[1] != 2 {
			t.Errorf("acknowledged when each producer opened: %v, want [0 2] (e0, e1; nothing from e2 on)", atOpen)
		}
		_, remote, _ := w.snapshot()
		if want := []string{"e0", "e1", "e2", "e3", "e4", "e5"}; !slices.Equal(remote, want) {
			t.Errorf("remote holds %v, want %v (once each, in order)", remote, want)
		}
		w.mu.Lock()
		opens := w.opens
		w.mu.Unlock()
		if opens != 2 {
			t.Errorf("%d producers opened, want 2 (the in-doubt session and the next)", opens)
		}
		for _, e := range logs.All() {
			t.Errorf("logged %s %q: want none (a restart at once, no failure)", e.Level, e.Message)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}
