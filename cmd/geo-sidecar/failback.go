package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription/failback"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// cmdFailback is geo-sidecar failback: flags, wiring (verify's walk and
// its hooks, the wire producer, the pair's cursor, switchover west→east)
// and printing around failback.Run. Exit status 0: the stranded tail
// dealt with as chosen and every subscription named in step; 1:
// something was changed but not everything is done (a copy or a move
// failed, a subscription refused or not in step); 2: nothing was changed
// (flags, config, clusters, the pair running, no choice made while
// entries are stranded, or the subscriptions' preconditions before any
// change).
func cmdFailback(args []string, stdout, stderr io.Writer) int {
	c := newFlags("failback", "After an unplanned failover from --from to --to, with --from back: reports the entries\n"+
		"--from holds that never reached --to (the stranded tail: the RPO, per partition, with positions and publish\n"+
		"times), deals with them as chosen (--replay: copied to --to late, each flagged "+marker.PropReplayedLate+"=true;\n"+
		"--park TOPIC: copied to TOPIC; --leave: left on --from), moves the sidecar's pair --from→--to past them, and with\n"+
		"--subscription brings those subscriptions on --from to their exact state on --to (as switchover, the other way\n"+
		"round) once the pair --to→--from is proven drained. Without a choice it reports the tail and exits 2.\n"+
		"Exit status 0: done; 1: changed something, not all done; 2: nothing changed.", stderr)
	var (
		topic, from, to, subs, park, parkOn string
		replay, leave, asJSON, dry          bool
		quiet                               time.Duration
		msgRate, byteRate                   float64
	)
	c.fs.StringVar(&topic, "topic", "", "replicated topic, tenant/namespace/topic or persistent://... (required)")
	c.fs.StringVar(&from, "from", "", "the cluster that failed and is back (east) (required)")
	c.fs.StringVar(&to, "to", "", "the cluster that took over (west) (required)")
	c.fs.StringVar(&subs, "subscription", "", "subscriptions to bring home, comma-separated; no other is touched (none: the stranded tail only)")
	c.fs.BoolVar(&replay, "replay", false, "copy the stranded tail to --to's same partitions, late, each copy flagged "+marker.PropReplayedLate+"=true")
	c.fs.StringVar(&park, "park", "", "copy the stranded tail to this topic (tenant/namespace/topic, not partitioned) on --park-on")
	c.fs.StringVar(&parkOn, "park-on", "", "the cluster of --park's topic: --from (the default: where the tail was written and the consumers come home) or --to")
	c.fs.BoolVar(&leave, "leave", false, "leave the stranded tail on --from as it is: --from's consumers receive it when they come back")
	c.fs.DurationVar(&quiet, "quiet", 5*time.Second, "with --subscription: how long --to must stay without application producers before its proof")
	c.fs.Float64Var(&msgRate, "max-messages-per-second", 0, "the walks read at most this many messages a second, both sides together (0: unlimited)")
	c.fs.Float64Var(&byteRate, "max-bytes-per-second", 0, "the walks read at most this many bytes a second, both sides together (0: unlimited)")
	c.fs.BoolVar(&dry, "dry-run", false, "report the stranded tail and plan, change nothing")
	c.fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		if code == exitFailed {
			return exitUnverified
		}
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "geo-sidecar failback: "+format+"\n", a...)
		return exitUnverified
	}
	var names []string
	for _, s := range strings.Split(subs, ",") {
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	if topic == "" || from == "" || to == "" || from == to {
		return usageErr("--topic, --from and --to are required, and --from and --to differ")
	}
	choice, chosen := "", 0
	for _, ch := range []struct {
		set  bool
		name string
	}{{replay, failback.Replay}, {park != "", failback.Park}, {leave, failback.Leave}} {
		if ch.set {
			choice = ch.name
			chosen++
		}
	}
	if chosen > 1 {
		return usageErr("--replay, --park and --leave: choose one")
	}
	if parkOn == "" {
		parkOn = from
	}
	if parkOn != from && parkOn != to {
		return usageErr("--park-on %q: --from (%s) or --to (%s)", parkOn, from, to)
	}
	if quiet < 0 || msgRate < 0 || byteRate < 0 {
		return usageErr("--quiet and the rates must not be negative")
	}
	full, short, parts, _, err := verifyTopicAndSince(topic, "")
	if err != nil {
		return usageErr("%v", err)
	}
	var parkFull string
	if park != "" {
		if parkFull, _, _, _, err = verifyTopicAndSince(park, ""); err != nil {
			return usageErr("--park: %v", err)
		}
		if parkFull == full {
			return usageErr("--park %s: the topic itself; to copy the tail to it, --replay", park)
		}
	}
	fc, tc, keys, err := copyEnds(cfg, from, to, short, parts)
	if err != nil {
		return usageErr("%v", err)
	}
	if len(names) > 0 {
		if _, _, _, err := copyEnds(cfg, to, from, short, parts); err != nil {
			return usageErr("--subscription: %v (the pair %s→%s copies what was produced on %s while %s was away)", err, to, from, to, from)
		}
	}
	for _, n := range names {
		if cfg.Sidecar.IsOwnCursor(n) || config.IsPulsarCursor(n) {
			return usageErr("--subscription %q: the sidecar's own or Pulsar's cursor, not an application's", n)
		}
	}

	ctx, stop := signalContext(zap.NewNop())
	defer stop()
	eastEnd, westEnd, partitions, closeEnds, err := dialEnds(ctx, fc, tc, from, full)
	if err != nil {
		return usageErr("%v", err)
	}
	defer closeEnds()
	east, west, eastWire, westWire := eastEnd.Clients, westEnd.Clients, eastEnd.Wire, westEnd.Wire
	eastMoves, err := east.MoveClient()
	if err != nil {
		return usageErr("%v", err)
	}
	eastSide := verify.Side{Name: from, Client: eastWire, Admin: east.Admin}
	westSide := verify.Side{Name: to, Client: westWire, Admin: west.Admin}
	out := verify.Options{Topic: full, Keys: keys, MsgRate: msgRate, ByteRate: byteRate, ReaderPrefix: cfg.Sidecar.CursorPrefix,
		From: eastSide, To: westSide}
	back := out
	back.From, back.To = westSide, eastSide
	mover := wireMover{c: eastMoves, control: east.Control, name: cfg.Sidecar.CursorPrefix + ".failback"}

	o := failback.Options{Topic: full, From: from, To: to, Partitions: partitions, Choice: choice, DryRun: dry,
		Finder: verifyFinder{o: out},
		Pair:   pairCursor{admin: switchover.Admin(east.Admin), mover: mover, sub: cfg.Sidecar.CursorName(to)},
	}
	if choice == failback.Park {
		o.ParkTopic, o.ParkOn = parkFull, parkOn
	}
	switch choice {
	case failback.Replay:
		o.Copier = &lateCopier{src: out, keys: keys, from: from, to: to, client: westWire,
			schemas:  lateSchemas{src: eastWire, srcName: from, dst: westWire, dstName: to},
			producer: marker.SidecarProducers + "failback." + from + "-->" + to}
	case failback.Park:
		pc, pside := eastWire, eastSide
		if parkOn == to {
			pc, pside = westWire, westSide
		}
		o.Copier = &lateCopier{src: out, keys: keys, from: from, to: parkOn, client: pc, park: parkFull, parkSide: pside,
			schemas:      lateSchemas{src: eastWire, srcName: from, dst: pc, dstName: parkOn},
			readerPrefix: cfg.Sidecar.CursorPrefix, producer: marker.SidecarProducers + "failback." + from + "-->park"}
	}
	if len(names) > 0 {
		o.Switchover = switchover.Options{Topic: full, From: to, To: from, Partitions: partitions, Subscriptions: names,
			Source: switchover.Admin(west.Admin), Target: switchover.Admin(east.Admin), Quiet: quiet, Mover: mover,
			Prover: failbackProof{back: back, out: out}}
	}
	rep, err := failback.Run(ctx, o, stderr)
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printFailback(stdout, rep)
	}
	var changed *failback.Changed
	switch {
	case errors.As(err, &changed):
		fmt.Fprintf(stderr, "geo-sidecar failback: %v\n", err)
		return exitFailed
	case err != nil:
		fmt.Fprintf(stderr, "geo-sidecar failback: nothing changed: %v\n", err)
		return exitUnverified
	case !rep.OK():
		return exitFailed
	}
	return exitOK
}

// verifyFinder is failback.Finder over verify.Run east→west: the ends of
// every partition taken when it starts, the entries not held on west
// passed on as the walk lets them go (verify.Options.NotHeld).
type verifyFinder struct{ o verify.Options }

func (f verifyFinder) Find(ctx context.Context, add func(string, failback.Entry)) ([]failback.End, error) {
	ends, err := verify.Ends(ctx, f.o)
	if err != nil {
		return nil, err
	}
	o := f.o
	o.Ends = ends
	o.NotHeld = func(part string, l verify.Left) {
		add(part, failback.Entry{Pos: l.Pos, PublishTime: l.PublishTime, Messages: l.Messages})
	}
	if _, err := verify.Run(ctx, o); err != nil {
		return nil, err
	}
	out := make([]failback.End, len(ends))
	for i, e := range ends {
		out[i] = failback.End{Partition: e.Partition, Source: e.Source, HasSource: e.HasSource}
	}
	return out, nil
}

// lateCopier is failback.Copier over verify.SourceEntries (the walk's
// reader, from the first entry to copy) and a wire producer: each entry
// copied whole as the entry pipe copies it, with the late flags
// (entryrule.LateMetadata), to the same partition on the target
// (replay) or to the park topic, an entry with a schema version under
// the target's number for its schema (lateSchemas). Sequence ids go on from the broker's
// record for the producer's name, so a target with deduplication takes
// every copy. A parked copy is not made twice: the park topic is read
// first for the entries parked already (geo-sidecar.parked-from and the
// origin id).
type lateCopier struct {
	src          verify.Options // east→west: From is the cluster read
	keys         marker.Keys
	from, to     string // the copies' origin cluster and the cluster written
	client       *wire.Client
	producer     string
	park         string // the park topic, or "" to replay
	parkSide     verify.Side
	readerPrefix string
	schemas      lateSchemas // the source's schema versions → the target's
	parkedOnce   sync.Once
	parked       map[string]bool // "partition origin-id" already in the park topic
	parkedErr    error
}

func (l *lateCopier) Copy(ctx context.Context, partition string, end marker.Position, entries []marker.Position) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	want := make(map[marker.Position]bool, len(entries))
	for _, p := range entries {
		want[p] = true
	}
	topic, signed := partition, partition
	var extra []wire.KeyValue
	if l.park != "" {
		l.parkedOnce.Do(func() { l.parked, l.parkedErr = l.readParked(ctx) })
		if l.parkedErr != nil {
			return 0, fmt.Errorf("read %s for the entries parked already: %w", l.park, l.parkedErr)
		}
		topic = l.park
		extra = []wire.KeyValue{{Key: marker.PropParkedFrom, Value: partition}}
	}
	p, err := wire.CreateProducer(ctx, l.client, wire.ProducerOptions{Topic: topic, Name: l.producer, Encrypted: true})
	if err != nil {
		return 0, fmt.Errorf("%s: producer on %s: %w", l.to, topic, err)
	}
	defer p.Close()
	seq := uint64(max(p.LastSequenceID()+1, 0))
	var (
		mu       sync.Mutex
		copied   int
		sendErr  error
		already  int
		sentSome bool
	)
	err = verify.SourceEntries(ctx, l.src, verify.End{Partition: partition, Source: end, HasSource: true}, entries[0], func(e wire.Entry) error {
		pos := marker.Position{Ledger: int64(e.ID.Ledger), Entry: int64(e.ID.Entry), Batch: -1}
		if !want[pos] {
			return nil
		}
		delete(want, pos)
		if l.parked[partition+" "+pos.String()] {
			already++
			return nil
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			return fmt.Errorf("entry %s: metadata: %w", pos, err)
		}
		var schema []byte
		if len(md.SchemaVersion) > 0 {
			// Schema numbers are per cluster and topic: the copy carries
			// the target's number for the same schema (registered there
			// if need be), or is not made.
			if schema, err = l.schemas.target(ctx, partition, topic, md.SchemaVersion); err != nil {
				return fmt.Errorf("entry %d:%d: %w", pos.Ledger, pos.Entry, err)
			}
		}
		lmd, err := entryrule.LateMetadata(l.keys, signed, l.from, l.to, e, &md, schema, extra...)
		if err != nil {
			return fmt.Errorf("entry %s: metadata of its copy: %w", pos, err)
		}
		out := wire.Outgoing{Metadata: lmd, Payload: bytes.Clone(e.Payload), NumMessages: max(e.NumMessages, 1),
			SequenceID: seq, PayloadCRC: e.PayloadCRC}
		seq++
		sentSome = true
		return p.Send(ctx, out, func(r wire.Receipt, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if sendErr == nil {
					sendErr = fmt.Errorf("entry %s: %w", pos, err)
				}
			case r.MessageID.Ledger == ^uint64(0):
				// Dropped by the target's deduplication: not stored.
				if sendErr == nil {
					sendErr = fmt.Errorf("entry %s: dropped by %s's deduplication as a duplicate", pos, l.to)
				}
			default:
				copied++
			}
		})
	})
	if sentSome {
		if ferr := p.Flush(ctx); err == nil {
			err = ferr
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if err == nil {
		err = sendErr
	}
	if err == nil && len(want) > 0 {
		err = fmt.Errorf("%d entries to copy not found on %s", len(want), l.src.From.Name)
	}
	return copied + already, err
}

// readParked reads the park topic to its end for the copies parked
// already, named "partition origin-id".
func (l *lateCopier) readParked(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	last, ok, err := verify.Last(ctx, l.parkSide, l.park, l.readerPrefix)
	if err != nil || !ok {
		return out, err
	}
	o := verify.Options{From: l.parkSide, ReaderPrefix: l.readerPrefix}
	err = verify.SourceEntries(ctx, o, verify.End{Partition: l.park, Source: last, HasSource: true}, marker.Position{Batch: -1},
		func(e wire.Entry) error {
			md, err := wire.ParseMetadata(e.Metadata)
			if err != nil {
				return nil
			}
			from, _ := md.Property(marker.PropParkedFrom)
			id, _ := md.Property(marker.PropOriginID)
			cl, _ := md.Property(marker.PropOriginCluster)
			if from != "" && id != "" && cl == l.from {
				out[from+" "+id] = true
			}
			return nil
		})
	return out, err
}

// pairCursor is failback.Pair over the admin API (the cursor's
// consumers and state) and the move client of the cluster that came
// back (forward only).
type pairCursor struct {
	admin switchover.Cluster
	mover wireMover
	sub   string
}

func (p pairCursor) Attached(ctx context.Context, partition string) (int, error) {
	s, err := p.admin.Subscription(ctx, partition, p.sub)
	return s.Consumers, err
}

func (p pairCursor) Advance(ctx context.Context, partition string, to marker.Position) (bool, error) {
	s, err := p.admin.Subscription(ctx, partition, p.sub)
	if err != nil {
		return false, err
	}
	if s.Consumers > 0 {
		return false, fmt.Errorf("%w: %d consumers on %s", failback.ErrPairRunning, s.Consumers, p.sub)
	}
	to.Batch = -1
	if s.Exists && s.State.MarkDelete.Compare(to) >= 0 {
		return false, nil
	}
	return true, p.mover.Move(ctx, partition, p.sub, to, nil)
}

// failbackProof is switchover.Prover for the failback's subscriptions
// (switchover west→east): the pair west→east proven drained (verify,
// as switchover's proof), its copies passed on as they are, and the walk
// east→west's copies passed on the other way round (a copy on west of
// east's entry maps west's position to east's), so that west's state maps
// onto east over both.
type failbackProof struct{ back, out verify.Options }

func (p failbackProof) Prove(ctx context.Context, copied func(partition string, origin, at marker.Position)) (switchover.Proof, error) {
	proof, err := verifyProof{o: p.back}.Prove(ctx, copied)
	if err != nil || !proof.Complete {
		if err == nil {
			proof.Detail = fmt.Sprintf("the pair %s→%s is not drained: %s", p.back.From.Name, p.back.To.Name, proof.Detail)
		}
		return proof, err
	}
	ends, err := verify.Ends(ctx, p.out)
	if err != nil {
		return switchover.Proof{}, err
	}
	o := p.out
	o.Ends = ends
	o.Copied = func(part string, origin, at marker.Position) { copied(part, at, origin) }
	if _, err := verify.Run(ctx, o); err != nil {
		return switchover.Proof{}, err
	}
	return proof, nil
}

func printFailback(w io.Writer, r failback.Report) {
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing changed)"
	}
	fmt.Fprintf(w, "failback of %s: %s is back after a failover to %s%s\n", r.Topic, r.From, r.To, mode)
	fmt.Fprintf(w, "\nstranded on %s (never reached %s): %d entries, %d messages", r.From, r.To, r.RPO.Entries, r.RPO.Messages)
	if r.RPO.Entries > 0 {
		fmt.Fprintf(w, ", published %s .. %s (%.3f s of traffic)", r.RPO.FirstPublishTime, r.RPO.LastPublishTime, r.RPO.Seconds)
	}
	fmt.Fprintln(w)
	for _, s := range r.Stranded {
		if s.Entries == 0 {
			fmt.Fprintf(w, "  %s  none\n", s.Partition)
			continue
		}
		fmt.Fprintf(w, "  %s  %d entries (%d messages) %s .. %s, published %s .. %s", s.Partition, s.Entries, s.Messages,
			s.First, s.Last, s.FirstPublishTime, s.LastPublishTime)
		if s.Copied > 0 {
			fmt.Fprintf(w, ", %d copied", s.Copied)
		}
		fmt.Fprintln(w)
	}
	if r.Tail != "" {
		fmt.Fprintf(w, "tail: %s\n", r.Tail)
	}
	if r.Subscriptions != nil {
		fmt.Fprintln(w)
		printSwitchover(w, *r.Subscriptions)
	}
	fmt.Fprintln(w, "\nsteps:")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  %-14s %6.1f s  %s\n", s.Name, s.Seconds, s.Outcome)
	}
	fmt.Fprintf(w, "total %.1f s\n", r.Seconds)
	if r.Next != "" {
		fmt.Fprintf(w, "next: %s\n", r.Next)
	}
}
