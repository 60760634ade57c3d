package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// cmdSwitchover is geo-sidecar switchover: flags, wiring (verify's proof,
// the wire client's move, the admin API) and printing around
// switchover.Run. Exit status 0: every subscription in step, nothing
// would be received again or missed; 1: something would be, or a
// subscription was refused; 2: it could not switch over (flags, config,
// clusters, preconditions: nothing was moved).
func cmdSwitchover(args []string, stdout, stderr io.Writer) int {
	c := newFlags("switchover", "Planned move of consumers from --from to --to: once the source's producers and the\n"+
		"subscriptions' consumers stopped and the copy is proven complete (verify), brings each --subscription\n"+
		"on --to to exactly its state on --from: the mark-delete position and every message acknowledged past\n"+
		"it (the ack holes), over the binary protocol, forward only. Then compares the two sides and reports,\n"+
		"per partition and subscription, what a consumer switching now would receive again (goal 0) and miss\n"+
		"(must be 0). Exit status 0: in step, nothing again or missed; 1: something would be, or a subscription\n"+
		"was refused; 2: it could not switch over (nothing was moved).", stderr)
	var (
		topic, from, to, subs string
		asJSON, dry           bool
		quiet                 time.Duration
		msgRate, byteRate     float64
	)
	c.fs.StringVar(&topic, "topic", "", "replicated topic, tenant/namespace/topic or persistent://... (required)")
	c.fs.StringVar(&from, "from", "", "cluster the consumers leave (required)")
	c.fs.StringVar(&to, "to", "", "cluster the consumers go to (required)")
	c.fs.StringVar(&subs, "subscription", "", "subscriptions to switch over, comma-separated (required); no other is touched")
	c.fs.DurationVar(&quiet, "quiet", 5*time.Second, "how long --from must stay without application producers before the proof")
	c.fs.Float64Var(&msgRate, "max-messages-per-second", 0, "the proof reads at most this many messages a second, both sides together (0: unlimited)")
	c.fs.Float64Var(&byteRate, "max-bytes-per-second", 0, "the proof reads at most this many bytes a second, both sides together (0: unlimited)")
	c.fs.BoolVar(&dry, "dry-run", false, "prove, plan and compare, move nothing")
	c.fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		if code == exitFailed {
			return exitUnverified
		}
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "geo-sidecar switchover: "+format+"\n", a...)
		return exitUnverified
	}
	var names []string
	for _, s := range strings.Split(subs, ",") {
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	if topic == "" || from == "" || to == "" || from == to || len(names) == 0 {
		return usageErr("--topic, --from, --to and --subscription are required, and --from and --to differ")
	}
	if quiet < 0 || msgRate < 0 || byteRate < 0 {
		return usageErr("--quiet and the rates must not be negative")
	}
	full, short, parts, _, err := verifyTopicAndSince(topic, "")
	if err != nil {
		return usageErr("%v", err)
	}
	fc, tc, keys, err := copyEnds(cfg, from, to, short, parts)
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
	srcEnd, tgtEnd, partitions, closeEnds, err := dialEnds(ctx, fc, tc, from, full)
	if err != nil {
		return usageErr("%v", err)
	}
	defer closeEnds()
	src, tgt, srcWire, tgtWire := srcEnd.Clients, tgtEnd.Clients, srcEnd.Wire, tgtEnd.Wire
	moves, err := tgt.MoveClient()
	if err != nil {
		return usageErr("%v", err)
	}
	o := switchover.Options{Topic: full, From: from, To: to, Partitions: partitions, Subscriptions: names,
		Source: switchover.Admin(src.Admin), Target: switchover.Admin(tgt.Admin), Quiet: quiet, DryRun: dry,
		Mover: wireMover{c: moves, control: tgt.Control, name: cfg.Sidecar.CursorPrefix + ".switchover"},
		Prover: verifyProof{o: verify.Options{Topic: full, Keys: keys, MsgRate: msgRate, ByteRate: byteRate,
			ReaderPrefix: cfg.Sidecar.CursorPrefix,
			From:         verify.Side{Name: from, Client: srcWire, Admin: src.Admin},
			To:           verify.Side{Name: to, Client: tgtWire, Admin: tgt.Admin}}},
	}
	rep, err := switchover.Run(ctx, o, stderr)
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printSwitchover(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar switchover: nothing moved: %v\n", err)
		return exitUnverified
	}
	if !rep.OK() {
		return exitFailed
	}
	return exitOK
}

// verifyProof is switchover.Prover over verify.Run: the ends of every
// partition taken when the proof starts, the copies passed on as the walk
// reads them.
type verifyProof struct{ o verify.Options }

func (p verifyProof) Prove(ctx context.Context, copied func(partition string, origin, at marker.Position)) (switchover.Proof, error) {
	ends, err := verify.Ends(ctx, p.o)
	if err != nil {
		return switchover.Proof{}, err
	}
	o := p.o
	passed := map[string]int64{}
	o.Ends = ends
	o.Copied = func(part string, origin, at marker.Position) {
		passed[part]++
		copied(part, origin, at)
	}
	rep, err := verify.Run(ctx, o)
	if err != nil {
		return switchover.Proof{}, err
	}
	faults, behind := rep.Faults(), notYetCopied(rep)
	if faults > 0 || behind > 0 {
		return switchover.Proof{Detail: fmt.Sprintf("%d faults (missing, duplicated, divergent, out of order, unproven), %d entries not yet copied: run geo-sidecar verify for the positions", faults, behind)}, nil
	}
	// Every entry proven present was passed on as a copy: else the map
	// from source to target positions is short, and the comparison would
	// find nothing to compare (an empty map compares as in step).
	for _, pr := range rep.Partitions {
		if passed[pr.Partition] < pr.Present {
			return switchover.Proof{Detail: fmt.Sprintf("%s: %d entries proven present, %d copies mapped", pr.Partition, pr.Present, passed[pr.Partition])}, nil
		}
	}
	return switchover.Proof{Complete: true}, nil
}

// wireMover is switchover.Mover over the target's move client: a Shared
// move (the target's subscription has no consumer, so the broker admits
// it whatever the applications' type), its ledgers read first from the
// admin API so that acknowledgements cross ledgers.
type wireMover struct {
	c       *wire.Client
	control cluster.ControlPlane
	name    string
}

func (m wireMover) Move(ctx context.Context, partition, sub string, md marker.Position, individually []marker.Position) error {
	l, err := m.control.Layout(ctx, partition)
	if err != nil {
		return fmt.Errorf("ledgers of %s: %w", partition, err)
	}
	mv := wire.Move{Topic: partition, Subscription: sub, Type: wire.Shared, ConsumerName: m.name, To: switchoverTo(md),
		MaxAcks: 1 << 30}
	for _, s := range l.Ledgers {
		mv.Ledgers = append(mv.Ledgers, wire.Ledger{ID: uint64(s.ID), Entries: s.Entries})
	}
	for _, p := range individually {
		mv.Individually = append(mv.Individually, wire.EntryID(uint64(p.Ledger), uint64(p.Entry)))
	}
	res, err := m.c.MoveSubscription(ctx, mv)
	if err != nil {
		return err
	}
	if !res.Reached() {
		return fmt.Errorf("the mark-delete position of %s on %s stopped at %v, short of %v", sub, partition, res.MarkDelete, res.Target)
	}
	return nil
}

// switchoverTo is the wire.Move.To whose target is the entry p (entry -1:
// the one before its ledger's first).
func switchoverTo(p marker.Position) wire.MessageID {
	if p.Entry < 0 {
		id := wire.EntryID(uint64(p.Ledger), 0)
		id.BatchIndex = 0 // inside entry 0: the target is entry -1
		return id
	}
	return wire.EntryID(uint64(p.Ledger), uint64(p.Entry))
}

func printSwitchover(w io.Writer, r switchover.Report) {
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing moved)"
	}
	fmt.Fprintf(w, "switchover %s -> %s on %s%s\n", r.From, r.To, r.Topic, mode)
	if r.Proven {
		fmt.Fprintf(w, "  copy proven complete\n")
	} else if r.ProofDetail != "" {
		fmt.Fprintf(w, "  copy NOT proven: %s\n", r.ProofDetail)
	}
	for _, x := range r.Results {
		fmt.Fprintf(w, "\n%s  %s (%s): %s\n", x.Partition, x.Subscription, x.Type, x.Outcome)
		if x.Detail != "" {
			fmt.Fprintf(w, "  %s\n", x.Detail)
		}
		fmt.Fprintf(w, "  source            %s\n", x.Source)
		fmt.Fprintf(w, "  target before     %s (again %d, missed %d)\n", x.TargetBefore, x.Before.Again, x.Before.Missed)
		if x.MovedMarkDelete != "" || x.Individually > 0 {
			fmt.Fprintf(w, "  moved             mark-delete to %s, %d entries acknowledged individually\n", orNone(x.MovedMarkDelete), x.Individually)
		}
		fmt.Fprintf(w, "  target after      %s\n", x.TargetAfter)
		fmt.Fprintf(w, "  would receive again %d, would miss %d\n", x.After.Again, x.After.Missed)
		if x.After.FirstAgain != "" {
			fmt.Fprintf(w, "    first again at target %s\n", x.After.FirstAgain)
		}
		if x.After.FirstMissed != "" {
			fmt.Fprintf(w, "    first missed at target %s\n", x.After.FirstMissed)
		}
	}
	fmt.Fprintf(w, "\nwould receive again %d, would miss %d, refused %d (%.1f s)\n", r.Again, r.Missed, r.Refused, r.Seconds)
	if r.Next != "" {
		fmt.Fprintf(w, "next: %s\n", r.Next)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(unchanged)"
	}
	return s
}
