package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
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
		"One --topic, several (--topic repeated), or every topic of --namespace the config copies --from→--to\n"+
		"(--topic-pattern narrows it), --parallel at once.\n"+
		"Exit status 0: done; 1: changed something, not all done; 2: nothing changed.", stderr)
	var (
		topics                       []string
		namespace, pattern           string
		from, to, subs, park, parkOn string
		replay, leave, asJSON, dry   bool
		quiet                        time.Duration
		msgRate, byteRate            float64
		parallel, window             int
	)
	c.fs.Func("topic", "replicated topic, tenant/namespace/topic or persistent://...; repeat it (or separate by commas) for several", func(v string) error {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				topics = append(topics, t)
			}
		}
		return nil
	})
	c.fs.StringVar(&namespace, "namespace", "", "instead of --topic: every topic of this namespace (tenant/namespace) that --from holds and the config copies --from→--to")
	c.fs.StringVar(&pattern, "topic-pattern", "", "with --namespace: only the topics whose short name matches this regular expression, anchored as the config's topic_patterns")
	c.fs.IntVar(&parallel, "parallel", 4, "with several topics: how many to fail back at once")
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
	c.fs.IntVar(&window, "window", verify.DefaultWindow, "source entries the walks compare at once (about 80 bytes each): bounds memory; the stranded tail is exact whatever it is (an entry that leaves it without a copy is remembered, about 40 bytes, until a copy of it is found, however far out of place)")
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
	if (len(topics) == 0) == (namespace == "") || from == "" || to == "" || from == to {
		return usageErr("--topic (or --namespace), --from and --to are required, and --from and --to differ")
	}
	if pattern != "" && namespace == "" {
		return usageErr("--topic-pattern narrows --namespace")
	}
	if parallel < 1 {
		return usageErr("--parallel must be at least 1")
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
	if window < 1 {
		return usageErr("--window must be at least 1")
	}
	var parkFull string
	if park != "" {
		var err error
		if parkFull, _, _, _, err = verifyTopicAndSince(park, ""); err != nil {
			return usageErr("--park: %v", err)
		}
	}
	var re *regexp.Regexp
	if pattern != "" {
		var err error
		if re, err = regexp.Compile(`^(?:` + pattern + `)$`); err != nil {
			return usageErr("--topic-pattern %q: %v", pattern, err)
		}
	}
	if namespace != "" {
		if p := strings.Split(namespace, "/"); len(p) != 2 || p[0] == "" || p[1] == "" {
			return usageErr("--namespace %q: want tenant/namespace", namespace)
		}
	}
	// Every topic named must be one the config copies both ways needed.
	var fulls []string
	for _, topic := range topics {
		full, short, parts, _, err := verifyTopicAndSince(topic, "")
		if err != nil {
			return usageErr("%v", err)
		}
		if full == parkFull {
			return usageErr("--park %s: the topic itself; to copy the tail to it, --replay", park)
		}
		if err := copiesBoth(cfg, from, to, short, parts, len(names) > 0); err != nil {
			return usageErr("%v", err)
		}
		if !slices.Contains(fulls, full) {
			fulls = append(fulls, full)
		}
	}
	fc, ok := cfg.Cluster(from)
	if !ok {
		return usageErr("--from %q: no such cluster in the config", from)
	}
	tc, ok := cfg.Cluster(to)
	if !ok {
		return usageErr("--to %q: no such cluster in the config", to)
	}
	keys, err := markerKeys(cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	for _, n := range names {
		if cfg.Sidecar.IsOwnCursor(n) || config.IsPulsarCursor(n) {
			return usageErr("--subscription %q: the sidecar's own or Pulsar's cursor, not an application's", n)
		}
	}

	ctx, stop := signalContext(zap.NewNop())
	defer stop()
	eastEnd, westEnd, closeEnds, err := dialPair(fc, tc)
	if err != nil {
		return usageErr("%v", err)
	}
	defer closeEnds()
	eastMoves, err := eastEnd.MoveClient()
	if err != nil {
		return usageErr("%v", err)
	}
	var skipped []string // with --namespace: topics the config does not copy both ways needed
	if namespace != "" {
		fulls, skipped, err = namespaceTopics(ctx, eastEnd.Control, cfg, namespace, re, from, to, parkFull, len(names) > 0)
		if err != nil {
			return usageErr("%s: topics of %s: %v", from, namespace, err)
		}
		if len(fulls) == 0 {
			return usageErr("--namespace %s: %s holds no topic the config copies %s→%s%s", namespace, from, from, to, patternNote(pattern))
		}
	}
	fb := failbackWiring{cfg: cfg, from: from, to: to, choice: choice, dry: dry, parkFull: parkFull, parkOn: parkOn,
		names: names, quiet: quiet, msgRate: msgRate, byteRate: byteRate, keys: keys, window: window,
		east: eastEnd, west: westEnd, eastMoves: eastMoves}

	if namespace == "" && len(fulls) == 1 {
		o, err := fb.options(ctx, fulls[0])
		if err != nil {
			return usageErr("%v", err)
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

	// Several topics: each as one alone, --parallel at once.
	ts := make([]failback.Topic, len(fulls))
	for i, full := range fulls {
		o, err := fb.options(ctx, full)
		if err != nil {
			o.Topic = full
		}
		ts[i] = failback.Topic{Options: o, Err: err}
	}
	for _, s := range skipped {
		fmt.Fprintf(stderr, "geo-sidecar failback: %s left out: %s\n", namespace, s)
	}
	rep := failback.RunMany(ctx, from, to, choice, dry, ts, parallel, stderr)
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printFailbackMany(stdout, rep)
	}
	for _, t := range rep.Topics {
		if t.Error != "" {
			fmt.Fprintf(stderr, "geo-sidecar failback: %s: %s: %s\n", t.Topic, t.Outcome, t.Error)
		}
	}
	return rep.Exit()
}

// copiesBoth checks that the config copies the topic from→to (the pair
// whose tail is failed back) and, with subscriptions, to→from (the pair
// that copied the other side's traffic home).
func copiesBoth(cfg *config.Config, from, to, short string, parts []string, subs bool) error {
	if _, _, _, err := copyEnds(cfg, from, to, short, parts); err != nil {
		return err
	}
	if subs {
		if _, _, _, err := copyEnds(cfg, to, from, short, parts); err != nil {
			return fmt.Errorf("--subscription: %w (the pair %s→%s copies what was produced on %s while %s was away)", err, to, from, to, from)
		}
	}
	return nil
}

// namespaceTopics lists the topics of namespace that from holds (a
// partitioned topic once, by its name), keeps those re matches (nil:
// all) and the config copies as copiesBoth asks, and leaves out the park
// topic; skipped says which matching topics the config does not copy
// both ways needed, and why.
func namespaceTopics(ctx context.Context, cp cluster.ControlPlane, cfg *config.Config, namespace string, re *regexp.Regexp,
	from, to, parkFull string, subs bool) (fulls, skipped []string, err error) {
	partitioned, plain, err := cp.Topics(ctx, namespace)
	if err != nil {
		return nil, nil, err
	}
	isPartitioned := map[string]bool{}
	for _, t := range partitioned {
		isPartitioned[t] = true
	}
	all := slices.Clone(partitioned)
	for _, t := range plain {
		if i := strings.LastIndex(t, "-partition-"); i > 0 && isPartitioned[t[:i]] {
			continue
		}
		all = append(all, t)
	}
	slices.Sort(all)
	for _, t := range slices.Compact(all) {
		full, short, parts, _, err := verifyTopicAndSince(t, "")
		if err != nil || full == parkFull || re != nil && !re.MatchString(parts[2]) {
			continue
		}
		if !cfg.Copies(parts[0]+"/"+parts[1], parts[2], from, to) {
			continue // not replicated from→to: not ours to fail back
		}
		if err := copiesBoth(cfg, from, to, short, parts, subs); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", full, err))
			continue
		}
		fulls = append(fulls, full)
	}
	return fulls, skipped, nil
}

func patternNote(p string) string {
	if p == "" {
		return ""
	}
	return " matching --topic-pattern " + p
}

// failbackWiring builds one topic's failback.Options from the flags and
// the two clusters' clients, shared by every topic of a run.
type failbackWiring struct {
	cfg               *config.Config
	from, to, choice  string
	dry               bool
	parkFull, parkOn  string
	names             []string
	quiet             time.Duration
	msgRate, byteRate float64
	window            int
	keys              marker.Keys
	east, west        end
	eastMoves         *wire.Client
}

func (w failbackWiring) options(ctx context.Context, full string) (failback.Options, error) {
	partitions, err := partitionsOf(ctx, w.east.Wire, w.from, full)
	if err != nil {
		return failback.Options{}, err
	}
	from, to, cfg := w.from, w.to, w.cfg
	east, west, eastWire, westWire := w.east.Clients, w.west.Clients, w.east.Wire, w.west.Wire
	eastSide := verify.Side{Name: from, Client: eastWire, Admin: east.Admin}
	westSide := verify.Side{Name: to, Client: westWire, Admin: west.Admin}
	out := verify.Options{Topic: full, Keys: w.keys, MsgRate: w.msgRate, ByteRate: w.byteRate, ReaderPrefix: cfg.Sidecar.CursorPrefix, Window: w.window,
		From: eastSide, To: westSide}
	back := out
	back.From, back.To = westSide, eastSide
	mover := wireMover{c: w.eastMoves, control: east.Control, name: cfg.Sidecar.CursorPrefix + ".failback"}

	o := failback.Options{Topic: full, From: from, To: to, Partitions: partitions, Choice: w.choice, DryRun: w.dry,
		Finder: verifyFinder{o: out},
		Pair:   pairCursor{admin: switchover.Admin(east.Admin), mover: mover, sub: cfg.Sidecar.CursorName(to)},
	}
	if w.choice == failback.Park {
		o.ParkTopic, o.ParkOn = w.parkFull, w.parkOn
	}
	switch w.choice {
	case failback.Replay:
		o.Copier = &lateCopier{src: out, keys: w.keys, from: from, to: to, client: westWire,
			schemas:  lateSchemas{src: eastWire, srcName: from, dst: westWire, dstName: to},
			producer: marker.SidecarProducers + "failback." + from + "-->" + to}
	case failback.Park:
		pc, pside := eastWire, eastSide
		if w.parkOn == to {
			pc, pside = westWire, westSide
		}
		// One producer name per topic parked: several topics may park
		// into one park topic at once, and a name is one producer.
		o.Copier = &lateCopier{src: out, keys: w.keys, from: from, to: w.parkOn, client: pc, park: w.parkFull, parkSide: pside,
			schemas:      lateSchemas{src: eastWire, srcName: from, dst: pc, dstName: w.parkOn},
			readerPrefix: cfg.Sidecar.CursorPrefix, producer: marker.SidecarProducers + "failback." + from + "-->park." + strings.TrimPrefix(full, "persistent://")}
	}
	if len(w.names) > 0 {
		o.Switchover = switchover.Options{Topic: full, From: to, To: from, Partitions: partitions, Subscriptions: w.names,
			Source: switchover.Admin(west.Admin), Target: switchover.Admin(east.Admin), Quiet: w.quiet, Mover: mover,
			Prover: failbackProof{back: back, out: out}}
	}
	return o, nil
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
		add(part, failback.Entry{Pos: l.Pos, PublishTime: l.PublishTime, Messages: l.Messages, Sealed: l.Sealed})
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
// (entryrule.LateCopy: on every message of a batch), to the same partition on the target
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
		content, _ := verify.Content(e)
		lmd, payload, rewritten, err := entryrule.LateCopy(l.keys, signed, l.from, l.to, e, &md, schema, content[:], extra...)
		switch {
		case errors.Is(err, entryrule.ErrSealed) && l.park != "":
			// Parked: the park topic says the copy is late; the flags
			// go on the entry only (the report says how many).
			lmd, err = entryrule.LateMetadata(l.keys, signed, l.from, l.to, e, &md, schema, extra...)
			payload = e.Payload
		case errors.Is(err, entryrule.ErrSealed):
			// Refused before any copy (failback.ErrSealed); here only if
			// the entry changed since the walk.
			return fmt.Errorf("entry %s: %w: not replayed", pos, err)
		}
		if err != nil {
			return fmt.Errorf("entry %s: its late copy: %w", pos, err)
		}
		out := wire.Outgoing{Metadata: lmd, Payload: bytes.Clone(payload), NumMessages: max(e.NumMessages, 1),
			SequenceID: seq, PayloadCRC: e.PayloadCRC}
		if rewritten {
			out.Payload, out.PayloadCRC = payload, wire.PayloadCRC{} // new bytes, the CRC computed on sending
		}
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
		if s.Sealed > 0 {
			fmt.Fprintf(w, "; %d encrypted batches from %s", s.Sealed, s.FirstSealed)
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

// printFailbackMany prints a run over several topics: a line per topic,
// then the totals (each topic's full report is in --json).
func printFailbackMany(w io.Writer, r failback.ManyReport) {
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing changed)"
	}
	fmt.Fprintf(w, "failback of %d topics: %s is back after a failover to %s, %d at once%s\n\n", r.Total.Topics, r.From, r.To, r.Parallel, mode)
	for _, t := range r.Topics {
		fmt.Fprintf(w, "%s  %s  stranded %d entries, copied %d", t.Topic, t.Outcome, t.Report.RPO.Entries, t.Report.Copied)
		if s := t.Report.Subscriptions; s != nil {
			fmt.Fprintf(w, "; again %d, missed %d, refused %d", s.Again, s.Missed, s.Refused)
		}
		fmt.Fprintf(w, " (%.1f s)\n", t.Report.Seconds)
		if t.Error != "" {
			fmt.Fprintf(w, "    %s\n", t.Error)
		} else if t.Outcome != failback.TopicDone && t.Report.Next != "" {
			fmt.Fprintf(w, "    next: %s\n", t.Report.Next)
		}
	}
	tt := r.Total
	fmt.Fprintf(w, "\n%d topics: %d done, %d not done, %d unchanged\n", tt.Topics, tt.Done, tt.NotDone, tt.Unchanged)
	fmt.Fprintf(w, "stranded on %s (never reached %s): %d entries, %d messages", r.From, r.To, tt.Stranded.Entries, tt.Stranded.Messages)
	if tt.Stranded.Entries > 0 {
		fmt.Fprintf(w, ", published %s .. %s (%.3f s of traffic)", tt.Stranded.FirstPublishTime, tt.Stranded.LastPublishTime, tt.Stranded.Seconds)
	}
	fmt.Fprintf(w, "; %d copied\n", tt.Copied)
	fmt.Fprintf(w, "subscriptions: again %d, missed %d, refused %d\n", tt.Again, tt.Missed, tt.Refused)
	fmt.Fprintf(w, "total %.1f s\n", r.Seconds)
	if r.Next != "" {
		fmt.Fprintf(w, "next: %s\n", r.Next)
	}
}
