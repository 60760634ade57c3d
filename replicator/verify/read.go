package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The walk: per partition, the target's end and then the source's are
// taken (in that order, so that every copy up to the target's end names
// an entry at or before the source's end), and both are read from their
// start to those ends through non-durable readers, the target driving:
// the source is read as far as the target's proven copies name, then on
// to its end. Partitions are walked one after another; what is held at
// once is two readers' windows and one comparison window.

// Side is one cluster as verify reads it.
type Side struct {
	Name   string
	Client *wire.Client
	// Admin answers "which entry was published at this time" (--since);
	// nil without Since.
	Admin pulsaradmin.Client
}

// Options say what Run verifies.
type Options struct {
	Topic    string // persistent://tenant/namespace/topic
	From, To Side
	Keys     marker.Keys // the config's marker keys; zero: origins unauthenticated
	// Since, when not zero, starts the source at its first entry
	// published at or after it, and the target Slack earlier (publish
	// times are the producers' clocks, copied as they are).
	Since time.Time
	Slack time.Duration
	// MsgRate and ByteRate bound what is read, both sides together, per
	// second; 0: unlimited.
	MsgRate, ByteRate float64
	// ReaderPrefix starts the readers' subscription names: the sidecar's
	// cursor prefix (sidecar.cursor_prefix), which the marker entry
	// filter exempts.
	ReaderPrefix string
	Window       int // source entries compared at once (Config.Window); 0: DefaultWindow
	// Progress, when set, is called from Run's goroutine after each
	// entry read; it must return quickly.
	Progress func(Progress)
	// Copied, when set, is called from Run's goroutine for every target
	// entry read that is a proven copy of a source entry (its origin
	// parses, and its signature is valid, or there is no marker key):
	// origin is the source entry's position, at the copy's. A second copy
	// of the same origin is passed too (and counted duplicated). The
	// switchover maps the source's subscription state onto the target
	// with it (subscription/switchover).
	Copied func(partition string, origin, at marker.Position)
	// NotHeld, when set, is called from Run's goroutine for every
	// expected source entry the target holds no copy of with its bytes
	// (what Result.NotHeld counts), in source order, once per entry (see
	// Config.NotHeld). The failback reports these as the stranded tail
	// and reads them again with SourceEntries to copy them.
	NotHeld func(partition string, l Left)
	// Ends, when set (from Ends), are where Run stops on each partition,
	// instead of the ends the two sides have when it gets there.
	Ends []End
}

// End is where a walk of one partition stops: the last entry each side
// held when Ends took it.
type End struct {
	Partition      string
	Source, Target marker.Position
	// HasSource, HasTarget: that side held an entry (and the topic).
	HasSource, HasTarget bool
}

// DefaultWindow is the comparison window in source entries: about 8 MiB.
const DefaultWindow = 100_000

// Progress is how far a Run has got.
type Progress struct {
	Partition                    string
	Index, Partitions            int // this partition's number (from 0), of how many
	SourceEntries, TargetEntries int64
	Messages, Bytes              int64 // read so far, both sides, all partitions
}

// PartitionReport is one partition's verdict.
type PartitionReport struct {
	Partition string
	Result
}

// Report is what Run found.
type Report struct {
	Topic, From, To string
	Authenticated   bool
	// Keys are the ids (KeyID) of the marker keys origins were tried
	// under, the current one first; none when not Authenticated.
	Keys       []string
	Since      time.Time
	Partitions []PartitionReport
	// Messages and Bytes were read, both sides, in Elapsed.
	Messages, Bytes int64
	Elapsed         time.Duration
}

// Faults totals the partitions' faults.
func (r *Report) Faults() int64 {
	var n int64
	for i := range r.Partitions {
		n += r.Partitions[i].Faults()
	}
	return n
}

// PresentUnproven totals the partitions' copies present but unproven.
func (r *Report) PresentUnproven() int64 {
	var n int64
	for i := range r.Partitions {
		n += r.Partitions[i].PresentUnproven
	}
	return n
}

// ErrPartitions: the two sides have different partition counts.
var ErrPartitions = errors.New("source and target have different partition counts")

// Run verifies o.Topic from o.From to o.To. An error means it could not
// verify (a cluster unreachable, a read that stalled); the report then
// holds the partitions done before.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	started := time.Now()
	rep = Report{Topic: o.Topic, From: o.From.Name, To: o.To.Name, Authenticated: !o.Keys.IsZero(), Keys: KeyIDs(o.Keys), Since: o.Since}
	ends := o.Ends
	if ends == nil {
		parts, err := partitions(ctx, o)
		if err != nil {
			return rep, err
		}
		ends = make([]End, len(parts))
		for i, part := range parts {
			ends[i].Partition = part
		}
	}
	w := walker{o: o, msgs: cluster.NewLimiter(o.MsgRate), bytes: cluster.NewLimiter(o.ByteRate), parts: len(ends)}
	if w.o.Window <= 0 {
		w.o.Window = DefaultWindow
	}
	defer func() { rep.Messages, rep.Bytes, rep.Elapsed = w.prog.Messages, w.prog.Bytes, time.Since(started) }()
	for i, end := range ends {
		part := end.Partition
		if o.Ends == nil {
			// Taken now, the target's first: see the walk above.
			if end, err = partitionEnd(ctx, o, part); err != nil {
				return rep, fmt.Errorf("%s: %w", part, err)
			}
		}
		w.prog.Partition, w.prog.Index, w.prog.SourceEntries, w.prog.TargetEntries = part, i, 0, 0
		res, err := w.partition(ctx, end)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", part, err)
		}
		rep.Partitions = append(rep.Partitions, PartitionReport{Partition: part, Result: res})
	}
	return rep, nil
}

// Ends takes the end of every partition of o.Topic on both sides now,
// each partition's target before its source as Run takes them. A Run
// given them (Options.Ends) judges the copy as the target held it at this
// moment, however much later it reads: copies made since are not counted.
// The failover drill takes them at its switch, for its RPO.
func Ends(ctx context.Context, o Options) ([]End, error) {
	parts, err := partitions(ctx, o)
	if err != nil {
		return nil, err
	}
	// The partitions at once (endsAtOnce at a time), so that the moment
	// is as short as the slowest partition's two probes, not their sum.
	ends, errs := make([]End, len(parts)), make([]error, len(parts))
	turn := make(chan struct{}, endsAtOnce)
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Add(1)
		turn <- struct{}{}
		go func() {
			defer func() { <-turn; wg.Done() }()
			if ends[i], errs[i] = partitionEnd(ctx, o, part); errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", part, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ends, nil
}

// endsAtOnce bounds the partitions whose ends Ends takes at once.
const endsAtOnce = 16

// partitions names o.Topic's partitions (the topic itself when it is not
// partitioned); the two sides must have as many.
func partitions(ctx context.Context, o Options) ([]string, error) {
	n, err := o.From.Client.PartitionedMetadata(ctx, o.Topic)
	if err != nil {
		return nil, fmt.Errorf("%s: partitions of %s: %w", o.From.Name, o.Topic, err)
	}
	m, err := o.To.Client.PartitionedMetadata(ctx, o.Topic)
	if err != nil {
		return nil, fmt.Errorf("%s: partitions of %s: %w", o.To.Name, o.Topic, err)
	}
	if n != m {
		return nil, fmt.Errorf("%s: %d on %s, %d on %s: %w", o.Topic, n, o.From.Name, m, o.To.Name, ErrPartitions)
	}
	parts := []string{o.Topic}
	if n > 0 {
		parts = make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("%s-partition-%d", o.Topic, i)
		}
	}
	return parts, nil
}

// partitionEnd takes part's end on the target, then on the source.
func partitionEnd(ctx context.Context, o Options, part string) (End, error) {
	e := End{Partition: part}
	var err error
	if e.Target, e.HasTarget, err = lastEntry(ctx, o.To.Client, part, o.ReaderPrefix); err != nil {
		return e, fmt.Errorf("%s: %w", o.To.Name, err)
	}
	if e.Source, e.HasSource, err = lastEntry(ctx, o.From.Client, part, o.ReaderPrefix); err != nil {
		return e, fmt.Errorf("%s: %w", o.From.Name, err)
	}
	return e, nil
}

type walker struct {
	o           Options
	msgs, bytes *cluster.Limiter
	prog        Progress
	parts       int
}

// partition walks one partition to its end.
func (w *walker) partition(ctx context.Context, end End) (Result, error) {
	part := end.Partition
	cfg := Config{Window: w.o.Window, Deferred: 10_000, Authenticated: !w.o.Keys.IsZero(),
		FromEarliest: w.o.Since.IsZero(), MaxFindings: 10}
	if w.o.NotHeld != nil {
		cfg.NotHeld = func(l Left) { w.o.NotHeld(part, l) }
	}
	cmp := New(cfg)
	tsince := w.o.Since
	if !tsince.IsZero() {
		tsince = tsince.Add(-w.o.Slack)
	}
	tgt, err := w.open(ctx, w.o.To, part, tsince, end.Target, end.HasTarget)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", w.o.To.Name, err)
	}
	defer tgt.close()
	src, err := w.open(ctx, w.o.From, part, w.o.Since, end.Source, end.HasSource)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", w.o.From.Name, err)
	}
	defer src.close()
	// nextSource feeds the next source entry; false at the source's end.
	nextSource := func() (bool, error) {
		e, ok, err := src.next(ctx)
		if err != nil || !ok {
			return false, err
		}
		w.prog.SourceEntries++
		cmp.AddSource(SourceOf(e, w.o.To.Name))
		return true, w.took(ctx, src, e)
	}
	if src.done {
		cmp.SourceDone()
	}
	for {
		e, ok, err := tgt.next(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", w.o.To.Name, err)
		}
		if !ok {
			break
		}
		w.prog.TargetEntries++
		t := TargetOf(e, w.o.Keys, part, w.o.From.Name, w.o.To.Name)
		if w.o.Copied != nil && t.Claim == FromSource && t.OriginOK && cmp.proof(t) {
			w.o.Copied(part, t.Origin, t.Pos)
		}
		if err := w.took(ctx, tgt, e); err != nil {
			return Result{}, err
		}
		for cmp.Wants(t) {
			more, err := nextSource()
			if err != nil {
				return Result{}, fmt.Errorf("%s: %w", w.o.From.Name, err)
			}
			if !more {
				cmp.SourceDone()
			}
		}
		cmp.AddTarget(t)
	}
	for {
		more, err := nextSource()
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", w.o.From.Name, err)
		}
		if !more {
			break
		}
	}
	return cmp.Finish(), nil
}

// SourceEntries reads end.Partition on o.From from the entry at from
// through end.Source (an End from Ends or a Run's), with the walk's
// reader and o's rate limits, and passes each entry to f, which must not
// keep it past its return (it is released then). The failback reads the
// stranded tail again this way to copy it.
func SourceEntries(ctx context.Context, o Options, end End, from marker.Position, f func(wire.Entry) error) error {
	if !end.HasSource || from.Compare(end.Source) > 0 {
		return nil
	}
	w := walker{o: o, msgs: cluster.NewLimiter(o.MsgRate), bytes: cluster.NewLimiter(o.ByteRate), parts: 1}
	src, err := w.openAt(ctx, o.From, end.Partition, from, end.Source)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", o.From.Name, end.Partition, err)
	}
	defer src.close()
	for {
		e, ok, err := src.next(ctx)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", o.From.Name, end.Partition, err)
		}
		if !ok {
			return nil
		}
		if position(e.ID).Compare(from) < 0 {
			_ = src.c.Release(e)
			continue
		}
		ferr := f(e)
		if err := w.took(ctx, src, e); err != nil {
			return err
		}
		if ferr != nil {
			return ferr
		}
	}
}

// took accounts for an entry read: releases it, reports progress and
// waits as the rate limits say.
func (w *walker) took(ctx context.Context, s *stream, e wire.Entry) error {
	n, b := int64(max(e.NumMessages, 1)), int64(len(e.Metadata)+len(e.Payload))
	_ = s.c.Release(e)
	w.prog.Messages += n
	w.prog.Bytes += b
	if w.o.Progress != nil {
		p := w.prog
		p.Partitions = w.parts
		w.o.Progress(p)
	}
	if err := w.msgs.Wait(ctx, float64(n)); err != nil {
		return err
	}
	return w.bytes.Wait(ctx, float64(b))
}

// Reader tuning: what one reader holds at once.
const (
	readerPermits = 10_000
	readerBytes   = 16 << 20
	// readQuiet is how long a read waits for the next entry before it
	// asks the broker how far its reader got (see stream.next).
	readQuiet = time.Second
	// readIdle bounds the wait for an entry while the broker has not
	// passed the end.
	readIdle = 30 * time.Second
)

// entryReader is a stream's non-durable reader (a wire.Consumer), used
// from one goroutine.
type entryReader interface {
	// Receive returns an entry already queued even when ctx is done.
	Receive(ctx context.Context) (wire.Entry, error)
	Release(wire.Entry) error
	AckCumulative(wire.MessageID) error
	MarkDelete(ctx context.Context) (wire.MessageID, bool, error)
	Close() error
}

// stream reads one side's partition from a start to the end it had when
// opened.
type stream struct {
	c    entryReader
	end  marker.Position
	done bool
	last wire.MessageID
	read bool
	// drain: the broker passed the end; what is queued is the rest.
	drain bool
}

// Last returns part's last entry on side (ok false: it has none, or no
// such topic), asked as a walk asks it: the failback reads a park topic
// to its end this way (SourceEntries).
func Last(ctx context.Context, side Side, part, readerPrefix string) (marker.Position, bool, error) {
	return lastEntry(ctx, side.Client, part, readerPrefix)
}

// lastEntry returns part's last entry on c; ok is false when it has none
// or no such topic.
func lastEntry(ctx context.Context, c *wire.Client, part, prefix string) (pos marker.Position, ok bool, err error) {
	// Every probe and reader subscribes under a name of its own: the
	// broker removes a non-durable subscription after its consumer
	// closed, and a subscribe under the same name meanwhile is refused
	// ("Subscription is fenced").
	last, ok, err := lastID(ctx, c, part, prefix+".verify-"+uuid.NewString()[:8]+"-end")
	if err != nil || !ok {
		return pos, false, err
	}
	return position(last), true, nil
}

// open opens a stream of part on side from since (zero: its first entry)
// to end; has false: the side held nothing at the end's moment.
func (w *walker) open(ctx context.Context, side Side, part string, since time.Time, end marker.Position, has bool) (*stream, error) {
	if !has {
		return &stream{done: true}, nil
	}
	sub := w.o.ReaderPrefix + ".verify-" + uuid.NewString()[:8]
	s := &stream{end: end}
	opts := wire.ConsumerOptions{
		Topic: part, Subscription: sub, Name: sub, NonDurable: true, NoTopicCreation: true,
		InitialPosition: wire.Earliest, Permits: readerPermits, RecycleOnRelease: true,
		MaxBytes: func() int64 { return readerBytes },
	}
	if !since.IsZero() {
		if side.Admin == nil {
			return nil, errors.New("--since needs the admin API")
		}
		tn, err := utils.GetTopicName(part)
		if err != nil {
			return nil, err
		}
		id, err := side.Admin.Topics().GetMessageIDWithContext(ctx, *tn, since.UnixMilli())
		if err != nil {
			return nil, fmt.Errorf("entry published at %s: %w", since.Format(time.RFC3339), err)
		}
		start := marker.Position{Ledger: id.LedgerID, Entry: id.EntryID, Batch: -1}
		if start.Compare(s.end) > 0 {
			s.done = true // nothing published since
			return s, nil
		}
		// A batch index makes the start inclusive of its entry.
		opts.StartMessageID = &wire.MessageID{Ledger: uint64(id.LedgerID), Entry: uint64(id.EntryID), Partition: -1, BatchIndex: 0}
	}
	c, err := subscribe(ctx, side.Client, opts)
	if err != nil {
		return nil, fmt.Errorf("open a reader: %w", err)
	}
	s.c = c
	return s, nil
}

// openAt opens a stream of part on side from the entry at from through
// end.
func (w *walker) openAt(ctx context.Context, side Side, part string, from, end marker.Position) (*stream, error) {
	sub := w.o.ReaderPrefix + ".verify-" + uuid.NewString()[:8]
	// A batch index makes the start inclusive of its entry.
	start := wire.MessageID{Ledger: uint64(from.Ledger), Entry: uint64(max(from.Entry, 0)), Partition: -1, BatchIndex: 0}
	c, err := subscribe(ctx, side.Client, wire.ConsumerOptions{
		Topic: part, Subscription: sub, Name: sub, NonDurable: true, NoTopicCreation: true,
		InitialPosition: wire.Earliest, Permits: readerPermits, RecycleOnRelease: true,
		MaxBytes: func() int64 { return readerBytes }, StartMessageID: &start,
	})
	if err != nil {
		return nil, fmt.Errorf("open a reader: %w", err)
	}
	return &stream{c: c, end: end}, nil
}

// lastID is the id of part's last entry, asked through a probe named
// sub; ok is false when part holds none or does not exist.
func lastID(ctx context.Context, c *wire.Client, part, sub string) (wire.MessageID, bool, error) {
	probe, err := subscribe(ctx, c, wire.ConsumerOptions{
		Topic: part, Subscription: sub, Name: sub, NonDurable: true, NoTopicCreation: true,
		InitialPosition: wire.Latest, Permits: 1,
	})
	var be *wire.BrokerError
	if errors.As(err, &be) && be.Code == wire.TopicNotFound {
		return wire.MessageID{}, false, nil
	}
	if err != nil {
		return wire.MessageID{}, false, fmt.Errorf("open a reader: %w", err)
	}
	last, ok, err := probe.LastMessageID(ctx)
	_ = probe.Close()
	if err != nil {
		return wire.MessageID{}, false, fmt.Errorf("last entry: %w", err)
	}
	return last, ok, nil
}

// next returns the next entry up to the stream's end; ok is false past
// it. The caller releases the entry (walker.took). The broker never
// dispatches some entries (Pulsar's own markers, entries an entry filter
// rejects), the end among them perhaps: after readQuiet without an entry,
// the reader's mark-delete position, which the broker moves past those,
// says whether the end was passed.
func (s *stream) next(ctx context.Context) (e wire.Entry, ok bool, err error) {
	idle := time.Now()
	for !s.done {
		if s.drain {
			done, cancel := context.WithCancel(ctx)
			cancel()
			e, err := s.c.Receive(done)
			if err == nil && s.read && position(e.ID).Compare(position(s.last)) <= 0 {
				_ = s.c.Release(e)
				continue
			}
			if err == nil && position(e.ID).Compare(s.end) <= 0 {
				s.last, s.read = e.ID, true
				s.done = position(e.ID).Compare(s.end) >= 0
				return e, true, nil
			} else if err == nil {
				_ = s.c.Release(e)
			}
			s.done = true
			break
		}
		rctx, cancel := context.WithTimeout(ctx, readQuiet)
		e, err := s.c.Receive(rctx)
		cancel()
		if err == nil {
			pos := position(e.ID)
			if s.read && pos.Compare(position(s.last)) <= 0 {
				// Delivered again (a reader that reconnected resumes from
				// its start): judged once already, a second time would
				// be a duplicate that is not there.
				_ = s.c.Release(e)
				continue
			}
			if pos.Compare(s.end) > 0 { // written after the walk began
				_ = s.c.Release(e)
				s.done = true
				break
			}
			s.last, s.read = e.ID, true
			s.done = pos.Compare(s.end) >= 0
			return e, true, nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return e, false, fmt.Errorf("read: %w", err)
		}
		if s.read {
			_ = s.c.AckCumulative(s.last) // for brokers that move the position only on acknowledgements
		}
		md, mok, err := s.c.MarkDelete(ctx)
		switch {
		case err == nil && mok && position(md).Compare(s.end) >= 0:
			// The rest is queued already, or never dispatched.
			s.drain = true
		case time.Since(idle) >= readIdle:
			return e, false, fmt.Errorf("no entry for %v before the end %s: %w", readIdle, s.end.String(), context.DeadlineExceeded)
		}
	}
	return wire.Entry{}, false, nil
}

// subscribe is wire.Subscribe, tried again a few times on an error the
// broker says is passing (a topic moving between brokers, a
// subscription being removed); a topic that is not there is an answer.
func subscribe(ctx context.Context, c *wire.Client, opts wire.ConsumerOptions) (*wire.Consumer, error) {
	b := cluster.NewBackoff(200*time.Millisecond, 2*time.Second)
	for try := 1; ; try++ {
		r, err := wire.Subscribe(ctx, c, opts)
		var be *wire.BrokerError
		if err == nil || try == subscribeTries || !wire.IsRetryable(err) ||
			(errors.As(err, &be) && be.Code == wire.TopicNotFound) || !cluster.Sleep(ctx, b.Next()) {
			return r, err
		}
	}
}

// subscribeTries bounds subscribe's tries.
const subscribeTries = 5

func (s *stream) close() {
	if s.c != nil {
		_ = s.c.Close()
	}
}
