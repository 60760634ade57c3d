package verify

// The continuous verifier (sidecar.verify): the comparison of compare.go
// kept per partition across rounds, so that verified-through keeps
// moving as the copy is made. Each round, every interval, takes the
// target's end and then the source's (as the command does, so that
// every copy up to the target's end names an entry at or before the
// source's end), opens readers on both sides from the entry after the
// last one read, and walks on to those ends; the source is read beyond
// what the copies name only while the comparison has room (Room), so an
// expected entry that leaves its window without a copy is one a later
// copy passed (missing), and a target that lags grows no memory.
//
// A partition's walk starts, on this instance, a little before the
// target's end at that moment (AnchorBack entries): at the first proven
// copy from the source there, the source is read from the entry after the
// one it copies and the target after it (Through, as TestResume shows);
// with none, from both ends. What was copied before is the command's
// business (geo-sidecar verify); nothing is stored, so a restart or a
// takeover starts the same way, and the copies the pipe made meanwhile
// (it starts at once, the verifier a round later) are verified too.
//
// It reads with non-durable readers of its own, named under the
// sidecar's cursor prefix, on both sides; it never touches a
// replication cursor and acknowledges nothing on one.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Reader is what the continuous verifier needs of one cluster: where a
// partition ends, and a non-durable reader of it. WireReader is the real
// one; tests use fakes. Used by one goroutine.
type Reader interface {
	// End returns the position of part's last entry; ok is false when
	// part holds none or does not exist.
	End(ctx context.Context, part string) (pos marker.Position, ok bool, err error)
	// Read opens a non-durable reader of part from the entry at start
	// (included), or from its first entry when start is nil.
	Read(ctx context.Context, part string, start *marker.Position) (entryReader, error)
}

// Assigned is a partition for the verifier, as its pair runs it.
type Assigned struct {
	Partition string // persistent://tenant/namespace/topic[-partition-N]
	// Active, when set, says whether this instance's replication cursor
	// is the partition's active consumer: only the active instance
	// verifies it (its standbys would read the same for nothing).
	Active *atomic.Bool
}

// ContinuousConfig is what a continuous verifier of one pair is built
// from.
type ContinuousConfig struct {
	Source, Target string // cluster names
	From, To       Reader
	Keys           marker.Keys // the config's marker keys; zero: origins unauthenticated
	// Partitions lists the pair's partitions as they are now; called
	// once per round, from the verifier's goroutine.
	Partitions func() []Assigned
	// Interval is how often a round starts (sidecar.verify.interval).
	Interval time.Duration
	// Limiter bounds what is read, in messages, both sides: shared by
	// every pair's verifier of the process; nil: unlimited.
	Limiter *cluster.Limiter
	// Window is the comparison window per partition, in source entries
	// (0: ContinuousWindow).
	Window int
	// Grace is how long a partition may go without this instance's
	// cursor being active on it before its walk is forgotten (0:
	// InactiveGrace; never less than two intervals).
	Grace   time.Duration
	Metrics *metrics.Metrics
	Log     *zap.Logger
}

// ContinuousWindow is the comparison window of each partition a
// continuous verifier walks: at most about 100 KiB each, allocated as
// it fills. A copy landing more than this many entries out of place is
// judged by its signature alone (see Partition.judge), and the source is
// read at most half of it ahead of the target's copies.
const ContinuousWindow = 1024

// ContinuousKept is how much of the source's content a continuous
// verifier holds while it walks a partition (Config.KeptBytes): the
// source is read as its copies ask for it, so a copy is usually judged
// while its source entry's content is held, and compared with it byte
// for byte instead of both being hashed (SHA-256 of every byte read,
// both sides, was most of the verifier's CPU). One partition is walked
// at a time per pair, and Release lets go of it all at a walk's end.
const ContinuousKept = 8 << 20

// Reader tuning of the continuous verifier: a round's reader holds at
// most this much at once (the rate limit, not the window, sets the pace).
const (
	walkPermits = 1000
	walkBytes   = 4 << 20
)

// AnchorBack is how far before the target's end a partition's walk looks
// for its first proven copy when it starts (see Continuous.anchor): the
// copies the pipe made before the verifier came up (a restart, a
// takeover) are verified too, up to this many entries.
const AnchorBack = 100

// InactiveGrace is how long the continuous verifier keeps a partition's
// walk (its comparison, where it read to, its verified-through age)
// while this instance's cursor is not the partition's active consumer.
// A session that restarts (a failed send, a cursor reconnect, a standby
// flip) leaves the cursor inactive for its backoff, 0.2 to 10 s: exactly
// around such a restart copies may be written twice or out of order, so
// the walk must go on from where it stopped, not start again AnchorBack
// entries before the target's end (where a copy of an earlier entry
// falls before the range and is not counted). A partition inactive for
// longer is taken to be another instance's (which verifies it and
// exports its own series); one no longer run by the pair is dropped at
// once.
const InactiveGrace = time.Minute

// foundKinds are the kinds verify_found_total counts: the faults (a copy
// present but unproven among them: signed under a key not configured, or
// forged), and target-only (a copy of an entry the source never had, or
// a second copy nothing proves: forged, or written by something other
// than the pipe).
var foundKinds = []Kind{Missing, Duplicated, Divergent, OutOfOrder, PresentUnproven, TargetOnly}

// Continuous verifies one pair's copies continuously; see the top of
// this file.
type Continuous struct {
	cfg   ContinuousConfig
	parts map[string]*walked
	// lastErr is each partition's last round error, logged when it
	// changes.
	lastErr map[string]string
}

// walked is one partition's walk, kept across rounds.
type walked struct {
	cmp *Partition
	// src and tgt are the last entries read on each side (hasSrc,
	// hasTgt): the next round's readers start after them.
	src, tgt       marker.Position
	hasSrc, hasTgt bool
	// asOf: every entry published before it is verified (zero: no round
	// has ended yet).
	asOf time.Time
	// counted is what the counters have of cmp's counts, by kind; logged
	// how many of its findings of each kind were logged.
	counted map[Kind]int64
	logged  map[Kind]int
	// idleSince is when this instance's cursor was first seen inactive
	// on the partition since it last walked it (zero: active).
	idleSince time.Time
}

// NewContinuous builds the verifier of one pair; nothing is read until
// Run.
func NewContinuous(cfg ContinuousConfig) *Continuous {
	if cfg.Window <= 0 {
		cfg.Window = ContinuousWindow
	}
	if cfg.Interval <= 0 { // a config built in code, not validated
		cfg.Interval = config.DefaultVerifyInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = InactiveGrace
	}
	cfg.Grace = max(cfg.Grace, 2*cfg.Interval)
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	return &Continuous{cfg: cfg, parts: map[string]*walked{}, lastErr: map[string]string{}}
}

// Run verifies, a round every Interval, until ctx is done; then it
// forgets its partitions' ages and returns nil.
func (v *Continuous) Run(ctx context.Context) error {
	for _, k := range foundKinds { // every series from 0, so that the first fault is an increase
		v.cfg.Metrics.Verify.Found.WithLabelValues(v.cfg.Source, v.cfg.Target, string(k))
	}
	tick := time.NewTicker(v.cfg.Interval)
	defer tick.Stop()
	defer func() {
		for part := range v.parts {
			v.drop(part)
		}
	}()
	for {
		v.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// round walks each partition this instance is active on, one after
// another. A partition it is not active on keeps its walk for
// Config.Grace (not read meanwhile: its age grows), then is forgotten;
// one the pair no longer runs is forgotten at once.
func (v *Continuous) round(ctx context.Context) {
	now := time.Now()
	keep := map[string]bool{}
	for _, a := range v.cfg.Partitions() {
		if ctx.Err() != nil {
			return
		}
		f := v.parts[a.Partition]
		if a.Active != nil && !a.Active.Load() {
			if f == nil {
				continue
			}
			if f.idleSince.IsZero() {
				f.idleSince = now
			}
			if now.Sub(f.idleSince) < v.cfg.Grace {
				keep[a.Partition] = true
			}
			continue
		}
		keep[a.Partition] = true
		if f == nil {
			f = &walked{counted: map[Kind]int64{}, logged: map[Kind]int{}}
			v.parts[a.Partition] = f
		}
		f.idleSince = time.Time{}
		err := v.walk(ctx, a.Partition, f)
		v.report(a.Partition, f)
		v.noteErr(ctx, a.Partition, err)
	}
	for part := range v.parts {
		if !keep[part] {
			v.drop(part)
		}
	}
}

// drop forgets a partition: stopped, or verified by another instance
// (inactive here for Config.Grace).
func (v *Continuous) drop(part string) {
	delete(v.parts, part)
	delete(v.lastErr, part)
	v.cfg.Metrics.Verify.DropVerified(v.cfg.Source, v.cfg.Target, part)
}

// noteErr logs a round's error when it differs from the partition's
// last one.
func (v *Continuous) noteErr(ctx context.Context, part string, err error) {
	switch {
	case err == nil:
		if _, failed := v.lastErr[part]; failed {
			v.cfg.Log.Info("verifier reads again", zap.String("partition", part))
			delete(v.lastErr, part)
		}
	case ctx.Err() != nil:
		v.cfg.Log.Debug("verifier round stopped", zap.String("partition", part), zap.Error(err))
	case v.lastErr[part] != err.Error():
		v.cfg.Log.Warn("verifier round failed; trying again next round", zap.String("partition", part), zap.Error(err))
		v.lastErr[part] = err.Error()
	}
}

// walk is one round of one partition.
func (v *Continuous) walk(ctx context.Context, part string, f *walked) error {
	t0 := time.Now()
	tend, tok, err := v.cfg.To.End(ctx, part)
	if err != nil {
		return fmt.Errorf("%s: end: %w", v.cfg.Target, err)
	}
	send, sok, err := v.cfg.From.End(ctx, part)
	if err != nil {
		return fmt.Errorf("%s: end: %w", v.cfg.Source, err)
	}
	if ce := v.cfg.Log.Check(zap.DebugLevel, "verifier round"); ce != nil { // how long a round takes, and where it read to
		defer func() {
			ce.Write(zap.String("partition", part), zap.Duration("took", time.Since(t0)),
				zap.Stringer("target_end", tend), zap.Stringer("source_end", send),
				zap.Stringer("target_read_to", f.tgt), zap.Stringer("source_read_to", f.src))
		}()
	}
	if f.cmp == nil {
		if err := v.anchor(ctx, part, f, tend, tok, send, sok); err != nil {
			return fmt.Errorf("%s: start: %w", v.cfg.Target, err)
		}
	}
	defer f.cmp.Release() // what it holds is this walk's only
	tgtNew := tok && (!f.hasTgt || tend.Compare(f.tgt) > 0)
	srcNew := sok && (!f.hasSrc || send.Compare(f.src) > 0)

	var src *stream
	defer func() {
		if src != nil {
			src.close()
		}
	}()
	// nextSource feeds the next source entry; false at the source's end.
	nextSource := func() (bool, error) {
		if !srcNew {
			return false, nil
		}
		if src == nil {
			s, err := v.open(ctx, v.cfg.From, part, f.src, f.hasSrc, send)
			if err != nil {
				return false, fmt.Errorf("%s: %w", v.cfg.Source, err)
			}
			src = s
		}
		e, ok, err := src.next(ctx)
		if err != nil || !ok {
			return false, err
		}
		f.cmp.AddSource(sourceOf(e, v.cfg.Target, true))
		f.src, f.hasSrc = position(e.ID), true
		return true, v.took(ctx, src, e)
	}
	if tgtNew {
		tgt, err := v.open(ctx, v.cfg.To, part, f.tgt, f.hasTgt, tend)
		if err != nil {
			return fmt.Errorf("%s: %w", v.cfg.Target, err)
		}
		defer tgt.close()
		for {
			e, ok, err := tgt.next(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", v.cfg.Target, err)
			}
			if !ok {
				break
			}
			// t refers to e's bytes until it is fed: e is released after.
			t := targetOf(e, v.cfg.Keys, part, v.cfg.Source, v.cfg.Target, true)
			past := false
			for !past && f.cmp.Wants(t) {
				more, err := nextSource()
				if err != nil {
					return err
				}
				past = !more
			}
			if past {
				f.cmp.AddTargetPastEnd(t)
			} else {
				f.cmp.AddTarget(t)
			}
			// Only now: an error above reads t again next round.
			f.tgt, f.hasTgt = t.Pos, true
			if err := v.took(ctx, tgt, e); err != nil {
				return err
			}
		}
	}
	for f.cmp.Room() {
		more, err := nextSource()
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	caughtUp := !srcNew || (src != nil && src.done)
	f.cmp.Round(caughtUp)

	// What is verified now: everything published before the round
	// began when the source was read to its end and every entry read is
	// settled; else everything before the first entry still waiting for
	// its copy (publish times are the producers' clocks: never later than
	// t0, never back).
	switch pub, pending := f.cmp.Pending(); {
	case pending:
		f.asOf = later(f.asOf, earlier(t0, time.UnixMilli(pub)))
	case caughtUp:
		f.asOf = t0
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// anchor starts a partition's walk (see the top of this file): at the
// first proven copy from the source among the target's last AnchorBack
// entries (of its last ledger) before its end tend, the source from the
// entry after the one it copies; with no such copy, at both ends (send
// on the source).
func (v *Continuous) anchor(ctx context.Context, part string, f *walked, tend marker.Position, tok bool, send marker.Position, sok bool) error {
	cmp := New(Config{Window: v.cfg.Window, Deferred: v.cfg.Window, Authenticated: !v.cfg.Keys.IsZero(),
		MaxFindings: 10, Continuous: true, KeptBytes: ContinuousKept})
	f.src, f.hasSrc = send, sok
	fromCopy := false
	if tok {
		from := marker.Position{Ledger: tend.Ledger, Entry: max(0, tend.Entry-AnchorBack), Batch: -1}
		s, err := v.open(ctx, v.cfg.To, part, from, false, tend)
		if err != nil {
			return err
		}
		defer s.close()
		for !fromCopy {
			e, ok, err := s.next(ctx)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			t := TargetOf(e, v.cfg.Keys, part, v.cfg.Source, v.cfg.Target)
			if err := v.took(ctx, s, e); err != nil {
				return err
			}
			if t.Claim == FromSource && t.OriginOK && (t.Signed || v.cfg.Keys.IsZero()) && (!sok || t.Origin.Compare(send) <= 0) {
				f.src, f.hasSrc, f.tgt, f.hasTgt, fromCopy = t.Origin, true, t.Pos, true, true
			}
		}
		if !fromCopy {
			f.tgt, f.hasTgt = tend, true
		}
	}
	f.cmp = cmp
	v.cfg.Log.Info("verifying partition", zap.String("partition", part), zap.Bool("from_a_copy", fromCopy),
		zap.Stringer("source_after", f.src), zap.Stringer("target_after", f.tgt))
	return nil
}

// open opens a stream of part on r to end: from the entry after last
// when has, else from the entry at last (from the first entry when last
// is zero).
func (v *Continuous) open(ctx context.Context, r Reader, part string, last marker.Position, has bool, end marker.Position) (*stream, error) {
	var start *marker.Position
	if has || last != (marker.Position{}) {
		start = &last // included; when has, passed over below as delivered again
	}
	c, err := r.Read(ctx, part, start)
	if err != nil {
		return nil, fmt.Errorf("open a reader: %w", err)
	}
	s := &stream{c: c, end: end}
	if has {
		s.last, s.read = wire.MessageID{Ledger: uint64(last.Ledger), Entry: uint64(last.Entry)}, true
	}
	return s, nil
}

// took accounts for an entry read: releases it, counts it, and waits as
// the rate limit says.
func (v *Continuous) took(ctx context.Context, s *stream, e wire.Entry) error {
	n := float64(max(e.NumMessages, 1))
	_ = s.c.Release(e)
	v.cfg.Metrics.Verify.Read.WithLabelValues(v.cfg.Source, v.cfg.Target).Add(n)
	return v.cfg.Limiter.Wait(ctx, n)
}

// report moves the counters by what the partition's comparison found
// since the last report, logs the new findings it names, and sets the
// partition's verified-through age.
func (v *Continuous) report(part string, f *walked) {
	if f.cmp == nil {
		return
	}
	snap := f.cmp.Snapshot()
	counts := map[Kind]int64{Missing: snap.Missing, Duplicated: snap.Duplicated, Divergent: snap.Divergent,
		OutOfOrder: snap.OutOfOrder, PresentUnproven: snap.PresentUnproven, TargetOnly: snap.TargetOnly}
	for _, k := range foundKinds {
		if d := counts[k] - f.counted[k]; d > 0 {
			v.cfg.Metrics.Verify.Found.WithLabelValues(v.cfg.Source, v.cfg.Target, string(k)).Add(float64(d))
			f.counted[k] = counts[k]
		}
	}
	seen := map[Kind]int{}
	for _, fd := range snap.Findings {
		seen[fd.Kind]++
		if seen[fd.Kind] <= f.logged[fd.Kind] || fd.Kind == SourceGone {
			continue
		}
		f.logged[fd.Kind] = seen[fd.Kind]
		fields := []zap.Field{zap.String("partition", part), zap.String("kind", string(fd.Kind)), zap.Stringer("origin", fd.Origin)}
		if fd.Target != nil {
			fields = append(fields, zap.Stringer("target_position", *fd.Target))
		}
		if fd.Detail != "" {
			fields = append(fields, zap.String("detail", fd.Detail))
		}
		if fd.Kind == PresentUnproven { // which keys failed, by id (never the key)
			fields = append(fields, zap.Strings("keys_tried", KeyIDs(v.cfg.Keys)))
		}
		if seen[fd.Kind] == 10 {
			fields = append(fields, zap.String("note", "the first 10 of this kind are logged; later ones are counted only"))
		}
		v.cfg.Log.Warn("copy fault found", fields...)
	}
	if !f.asOf.IsZero() {
		v.cfg.Metrics.Verify.SetVerified(v.cfg.Source, v.cfg.Target, part, f.asOf)
	}
}

// WireReader is Reader over the sidecar's wire client of one cluster,
// its readers named under prefix (sidecar.cursor_prefix, which the
// marker entry filter exempts, so that markers are seen as they are).
func WireReader(c *wire.Client, prefix string) Reader { return wireReader{c: c, prefix: prefix} }

type wireReader struct {
	c      *wire.Client
	prefix string
}

func (w wireReader) name() string { return w.prefix + ".verify-" + uuid.NewString()[:8] }

func (w wireReader) End(ctx context.Context, part string) (marker.Position, bool, error) {
	last, ok, err := lastID(ctx, w.c, part, w.name()+"-end")
	if err != nil || !ok {
		return marker.Position{}, false, err
	}
	return position(last), true, nil
}

func (w wireReader) Read(ctx context.Context, part string, start *marker.Position) (entryReader, error) {
	sub := w.name()
	opts := wire.ConsumerOptions{
		Topic: part, Subscription: sub, Name: sub, NonDurable: true, NoTopicCreation: true,
		InitialPosition: wire.Earliest, Permits: walkPermits, RecycleOnRelease: true,
		MaxBytes: func() int64 { return walkBytes },
	}
	if start != nil {
		// A batch index makes the start inclusive of its entry.
		opts.StartMessageID = &wire.MessageID{Ledger: uint64(start.Ledger), Entry: uint64(start.Entry), Partition: -1, BatchIndex: 0}
	}
	c, err := subscribe(ctx, w.c, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}
