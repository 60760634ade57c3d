package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
	"github.com/geo-sidecar/geo-sidecar/subscription/drill"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// cmdDrill is geo-sidecar drill: flags, signals, printing and exit codes
// around drill.Run.
func cmdDrill(args []string, stdout, stderr io.Writer) int {
	c := newFlags("drill", "Runs a failover drill against live clusters on a subscription of its own: creates it in --from,\n"+
		"publishes tagged messages in both regions, consumes and acknowledges part of them in --from,\n"+
		"stops, waits until the subscription is in step, resumes in --to on the same subscription,\n"+
		"reports lost (must be 0) and duplicated messages, the RPO and RTO of a failover at the switch\n"+
		"(measured: what --to did not hold, proven entry by entry as geo-sidecar verify does, and how long\n"+
		"until the subscription there was in step), and deletes the subscription on both clusters.\n"+
		"It never touches a subscription it did not create, and refuses a topic others subscribe to unless\n"+
		"--allow-other-subscriptions. The sidecars must be running and keep the subscription in step\n"+
		"(subscription_patterns: [\""+drill.Pattern+"\"]). Exit code 1 when anything was lost or the\n"+
		"subscription could not be deleted.", stderr)
	o := drill.Options{Dial: dialDrill}
	var (
		asJSON, exact     bool
		msgRate, byteRate float64
	)
	c.fs.StringVar(&o.Topic, "topic", "", "replicated topic, tenant/namespace/topic (required); best one of its own, e.g. tenant/ns/geo-sidecar-drill")
	c.fs.StringVar(&o.Subscription, "subscription", "", "name of the subscription the drill creates; must not exist (default "+drill.Prefix+"<random>)")
	c.fs.StringVar(&o.From, "from", "", "cluster to fail over from (required)")
	c.fs.StringVar(&o.To, "to", "", "cluster to fail over to (required)")
	c.fs.StringVar(&o.Type, "type", "exclusive", "subscription type: exclusive, failover, shared or key_shared")
	c.fs.IntVar(&o.Messages, "messages", 1000, "messages to publish (split between the regions)")
	c.fs.Float64Var(&o.ConsumeFraction, "consume", 0.5, "fraction of the messages to consume in --from before the switch")
	c.fs.BoolVar(&o.Keep, "keep", false, "keep the drill's subscription on both clusters afterwards (it holds back retention until deleted)")
	c.fs.BoolVar(&o.AllowOtherSubscriptions, "allow-other-subscriptions", false, "publish even though the topic has other subscriptions: they receive the drill's messages")
	c.fs.DurationVar(&o.PublishOver, "publish-over", 5*time.Second, "spread publishing over this long, like live traffic")
	c.fs.DurationVar(&o.InStepWait, "in-step-wait", 60*time.Second, "wait at most this long after the switch for the subscription in --to to be in step (the RTO is 'not reached' past it)")
	c.fs.DurationVar(&o.Lookback, "rpo-lookback", time.Minute, "the RPO reads --from from this long before the drill began: what --to lacked of earlier traffic counts too")
	c.fs.Float64Var(&msgRate, "rpo-max-messages-per-second", 20000, "the RPO reads at most this many messages a second, both clusters together (0: unlimited)")
	c.fs.Float64Var(&byteRate, "rpo-max-bytes-per-second", 20<<20, "the RPO reads at most this many bytes a second, both clusters together (0: unlimited)")
	c.fs.BoolVar(&exact, "exact", false, "at the switch, move the subscription to --to with switchover's exact plan (the mark-delete position and every\n"+
		"acknowledgement past it, once the copy is proven complete) instead of waiting for the sidecars to follow it; the\n"+
		"report says what that delivered again and missed")
	c.fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		return code
	}
	if o.Topic == "" || o.From == "" || o.To == "" || o.From == o.To || o.Messages < 2 ||
		o.ConsumeFraction <= 0 || o.ConsumeFraction >= 1 || o.InStepWait <= 0 || o.Lookback < 0 || msgRate < 0 || byteRate < 0 {
		fmt.Fprintln(stderr, "geo-sidecar drill: --topic, --from and --to are required, --from and --to differ; --messages >= 2; 0 < --consume < 1;"+
			" --in-step-wait positive; --rpo-lookback and the rates not negative")
		return exitUsage
	}
	o.Prover = newProver(cfg, msgRate, byteRate)
	if exact {
		o.Exact = newSwitcher(cfg, msgRate, byteRate)
	}
	// SIGINT or SIGTERM stops the drill; its subscription is still deleted.
	sctx, sstop := signalContext(zap.NewNop())
	defer sstop()
	ctx, stop := context.WithTimeout(sctx, 10*time.Minute)
	defer stop()
	progress := stderr
	if !asJSON {
		progress = stdout
	}
	rep, err := drill.Run(ctx, cfg, o, progress)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar drill: %v\n", err)
		if !rep.Complete() {
			return exitFailed
		}
		// Complete, but the subscription could not be deleted: the
		// report is printed all the same.
	}
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printDrill(stdout, rep)
	}
	if rep.Lost > 0 || err != nil {
		return exitFailed
	}
	return exitOK
}

func printDrill(w io.Writer, r drill.Report) {
	fmt.Fprintf(w, "\nfailover drill %s -> %s on %s, subscription %s (%s)\n", r.From, r.To, r.Topic, r.Subscription, r.Type)
	if r.Mode == drill.ModeExact {
		fmt.Fprintf(w, "  moved                exactly, with switchover's plan (--exact)\n")
	}
	fmt.Fprintf(w, "  published            %d\n", r.Published)
	fmt.Fprintf(w, "  consumed before      %d (in %s)\n", r.ConsumedBefore, r.From)
	fmt.Fprintf(w, "  consumed after       %d (in %s)\n", r.ConsumedAfter, r.To)
	fmt.Fprintf(w, "  lost                 %d\n", r.Lost)
	fmt.Fprintf(w, "  duplicates           %d\n", r.Duplicates)
	printRPO(w, r)
	if s := r.Switchover; s != nil && !r.GaveUp {
		fmt.Fprintf(w, "  switchover           would receive again %d, would miss %d, refused %d (entries)\n", s.Again, s.Missed, s.Refused)
	}
	switch {
	case r.Mode == drill.ModeExact && r.GaveUp:
		detail := ""
		if r.Switchover != nil {
			detail = ": " + r.Switchover.Next
		}
		fmt.Fprintf(w, "  in step              no: the exact move did not run within %.0fs%s (resumed all the same)\n", r.WaitedSeconds, detail)
	case r.InStep:
		fmt.Fprintf(w, "  in step after        %.1fs\n", r.InStepSeconds)
	case r.GaveUp:
		fmt.Fprintf(w, "  in step              no: gave up waiting after %.0fs, the subscription on %s trailing by %d backlog entries (resumed all the same)\n",
			r.WaitedSeconds, r.To, r.Trailing)
	default:
		fmt.Fprintf(w, "  in step              no: trailing by %d backlog entries on %s after %.1fs, as close as the newest snapshot allows (a switch delivers them again)\n",
			r.Trailing, r.To, r.InStepSeconds)
	}
	if r.RTO.Reached {
		fmt.Fprintf(w, "  RTO                  %.1fs from the switch until the subscription in %s was ready to resume on\n", r.RTO.Seconds, r.To)
	} else {
		fmt.Fprintf(w, "  RTO                  not reached: the drill gave up waiting for the subscription in %s %.0fs after the switch\n", r.To, r.RTO.Seconds)
	}
	if r.Kept {
		fmt.Fprintf(w, "  subscription         kept on %s and %s (--keep); delete it with pulsar-admin topics unsubscribe %s --subscription %s\n",
			r.From, r.To, r.Topic, r.Subscription)
	}
}

// dialDrill connects the drill with the sidecar's own clients: the same
// TLS checks and credentials (a token file is read again when it changes).
func dialDrill(cc config.Cluster) (pulsar.Client, pulsaradmin.Client, error) {
	conn, err := cluster.Dial(cc, zap.NewNop(), cluster.SecurityEvents{})
	if err != nil {
		return nil, nil, err
	}
	return conn.Client, conn.Admin, nil
}

// printRPO prints the RPO line: what a failover at the switch would have
// left behind.
func printRPO(w io.Writer, r drill.Report) {
	p := r.RPO
	switch {
	case !p.Measured:
		fmt.Fprintf(w, "  RPO                  not measured: %s\n", p.Error)
		return
	case p.Messages == 0 && p.Unproven > 0:
		fmt.Fprintf(w, "  RPO                  0 messages, 0s: %s held a copy of everything %s held at the switch, %d entries of it unproven (ends taken %.1fs after it; read from %s)\n",
			r.To, r.From, p.Unproven, p.MarkedAfter, p.Since)
	case p.Messages == 0:
		fmt.Fprintf(w, "  RPO                  0 messages, 0s: %s held a proven copy of everything %s held at the switch (ends taken %.1fs after it; read from %s)\n",
			r.To, r.From, p.MarkedAfter, p.Since)
	default:
		least := ""
		if p.AtLeast {
			least = "at least "
		}
		fmt.Fprintf(w, "  RPO                  %s%d messages (%d entries), %.1fs of traffic: what %s held at the switch and %s did not (ends taken %.1fs after it; read from %s)\n",
			least, p.Messages, p.Entries, p.Seconds, r.From, r.To, p.MarkedAfter, p.Since)
	}
	if p.Faults > 0 {
		fmt.Fprintf(w, "  copy faults          %d missing, duplicated, divergent or out of order: run geo-sidecar verify --topic %s --from %s --to %s\n",
			p.Faults, r.Topic, r.From, r.To)
	}
	if p.Unproven > 0 {
		fmt.Fprintf(w, "  unproven copies      %d entries: %s holds their bytes, but under origin signatures no configured marker key verifies (another key, or forged); held, so not in the RPO: run geo-sidecar verify --topic %s --from %s --to %s\n",
			p.Unproven, r.To, r.Topic, r.From, r.To)
	}
}

// verifyProver is the drill's RPO over the verify core: Mark takes every
// partition's ends (verify.Ends), Prove walks to them (verify.Run with
// Options.Ends), bounded by the rates given.
type verifyProver struct {
	o     verify.Options
	ends  []verify.End
	close []func()
}

// newProver connects verifyProvers with the config's clusters, marker
// keys and cursor prefix, and the rates given.
func newProver(cfg *config.Config, msgRate, byteRate float64) drill.NewProver {
	return func(topic, from, to string) (drill.Prover, error) {
		keys, err := markerKeys(cfg)
		if err != nil {
			return nil, err
		}
		p := &verifyProver{o: verify.Options{Topic: topic, Keys: keys, Slack: time.Minute, MsgRate: msgRate, ByteRate: byteRate,
			ReaderPrefix: cfg.Sidecar.CursorPrefix}}
		for _, side := range []struct {
			name string
			into *verify.Side
		}{{from, &p.o.From}, {to, &p.o.To}} {
			cc, ok := cfg.Cluster(side.name)
			if !ok {
				p.Close()
				return nil, fmt.Errorf("cluster %q is not in the config", side.name)
			}
			s, closeSide, err := dialSide(cc)
			if err != nil {
				p.Close()
				return nil, err
			}
			*side.into = s
			p.close = append(p.close, closeSide)
		}
		return p, nil
	}
}

func (p *verifyProver) Mark(ctx context.Context) error {
	ends, err := verify.Ends(ctx, p.o)
	p.ends = ends
	return err
}

func (p *verifyProver) Prove(ctx context.Context, since time.Time) ([]drill.Proof, error) {
	if p.ends == nil {
		return nil, errors.New("no ends marked")
	}
	o := p.o
	o.Ends, o.Since = p.ends, since
	rep, err := verify.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	return proofs(rep), nil
}

func (p *verifyProver) Close() {
	for _, c := range p.close {
		c()
	}
}

// proofs is what the drill needs of a verify report.
func proofs(rep verify.Report) []drill.Proof {
	out := make([]drill.Proof, 0, len(rep.Partitions))
	for _, p := range rep.Partitions {
		u := p.NotHeld // what the target does not hold, proven or not: the RPO
		pr := drill.Proof{Partition: p.Partition, Entries: u.Entries, Messages: u.Messages,
			Unproven: p.PresentUnproven, Faults: p.CopyFaults()}
		if p.Through != nil {
			pr.Through = time.UnixMilli(p.Through.PublishTime)
		}
		if u.Entries > 0 {
			pr.First, pr.Last = time.UnixMilli(u.FirstPublishTime), time.UnixMilli(u.LastPublishTime)
		}
		out = append(out, pr)
	}
	return out
}

// newSwitcher connects drill's exact move (--exact) with the config's
// clusters and marker keys: switchover.Run on the drill's subscription,
// proven by verify from --from to --to (and, when the config copies the
// topic back, the copies --to→--from mapped the other way round, as the
// failback does: the drill then publishes in both regions, and --from
// consumed copies of --to's messages), moved by the wire on --to.
func newSwitcher(cfg *config.Config, msgRate, byteRate float64) drill.NewSwitcher {
	return func(topic, from, to string) (drill.Switcher, error) {
		full, short, parts, _, err := verifyTopicAndSince(topic, "")
		if err != nil {
			return nil, err
		}
		fc, tc, keys, err := copyEnds(cfg, from, to, short, parts)
		if err != nil {
			return nil, err
		}
		src, tgt, closeEnds, err := dialPair(fc, tc)
		if err != nil {
			return nil, err
		}
		moves, err := tgt.MoveClient()
		if err != nil {
			closeEnds()
			return nil, err
		}
		srcSide := verify.Side{Name: from, Client: src.Wire, Admin: src.Admin}
		tgtSide := verify.Side{Name: to, Client: tgt.Wire, Admin: tgt.Admin}
		out := verify.Options{Topic: full, Keys: keys, MsgRate: msgRate, ByteRate: byteRate, ReaderPrefix: cfg.Sidecar.CursorPrefix,
			From: srcSide, To: tgtSide}
		var prover switchover.Prover = verifyProof{o: out}
		if cfg.Copies(parts[0]+"/"+parts[1], parts[2], to, from) {
			back := out
			back.From, back.To = tgtSide, srcSide
			prover = failbackProof{back: out, out: back}
		}
		return &drillSwitcher{full: full, from: from, src: src, tgt: tgt, prover: prover, close: closeEnds,
			mover: wireMover{c: moves, control: tgt.Control, name: cfg.Sidecar.CursorPrefix + ".switchover"}}, nil
	}
}

// drillSwitcher is drill.Switcher over switchover.Run.
type drillSwitcher struct {
	full, from string
	src, tgt   end
	prover     switchover.Prover
	mover      wireMover
	close      func()
}

func (d *drillSwitcher) Switch(ctx context.Context, sub string, progress io.Writer) (switchover.Report, error) {
	partitions, err := partitionsOf(ctx, d.src.Wire, d.from, d.full)
	if err != nil {
		return switchover.Report{}, err
	}
	// The drill's producers closed before it consumed: a second of quiet
	// is enough to see any other.
	return switchover.Run(ctx, switchover.Options{Topic: d.full, From: d.from, To: d.tgt.Name, Partitions: partitions,
		Subscriptions: []string{sub}, Source: switchover.Admin(d.src.Admin), Target: switchover.Admin(d.tgt.Admin),
		Quiet: time.Second, Mover: d.mover, Prover: d.prover}, progress)
}

func (d *drillSwitcher) Close() { d.close() }
