package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator"
)

// drillTag is the property that marks a drill's own messages.
const drillTag = "geo-sidecar.drill"

// DrillReport is what a failover drill observed.
type DrillReport struct {
	Topic          string  `json:"topic"`
	Subscription   string  `json:"subscription"`
	Type           string  `json:"type"`
	From           string  `json:"from"`
	To             string  `json:"to"`
	Published      int     `json:"published"`
	ConsumedBefore int     `json:"consumed_before"`
	ConsumedAfter  int     `json:"consumed_after"`
	Lost           int     `json:"lost"`
	Duplicates     int     `json:"duplicates"`
	InStepSeconds  float64 `json:"in_step_seconds"`
	InStep         bool    `json:"in_step"`
	// Kept: --keep left the drill's subscription on both clusters;
	// otherwise it was deleted on both (or the drill failed saying where
	// it may be left).
	Kept bool `json:"kept"`

	// counted: the drill ran to the end; an error returned with the
	// report is then only about deleting the subscription.
	counted bool
}

type drillOpts struct {
	topic, sub, from, to, typ string
	messages                  int
	consumeFraction           float64
	keep, asJSON, allowOthers bool
	spread                    time.Duration
}

func cmdDrill(args []string, stdout, stderr io.Writer) int {
	c := newFlags("drill", "Runs a failover drill against live clusters on a subscription of its own: creates it in --from,\n"+
		"publishes tagged messages in both regions, consumes and acknowledges part of them in --from,\n"+
		"stops, waits until the subscription is in step, resumes in --to on the same subscription,\n"+
		"reports lost (must be 0) and duplicated messages, and deletes the subscription on both clusters.\n"+
		"It never touches a subscription it did not create, and refuses a topic others subscribe to unless\n"+
		"--allow-other-subscriptions. The sidecars must be running and keep the subscription in step\n"+
		"(subscription_patterns: [\""+drillPattern+"\"]). Exit code 1 when anything was lost or the\n"+
		"subscription could not be deleted.", stderr)
	var o drillOpts
	c.fs.StringVar(&o.topic, "topic", "", "replicated topic, tenant/namespace/topic (required); best one of its own, e.g. tenant/ns/geo-sidecar-drill")
	c.fs.StringVar(&o.sub, "subscription", "", "name of the subscription the drill creates; must not exist (default "+drillPrefix+"<random>)")
	c.fs.StringVar(&o.from, "from", "", "cluster to fail over from (required)")
	c.fs.StringVar(&o.to, "to", "", "cluster to fail over to (required)")
	c.fs.StringVar(&o.typ, "type", "exclusive", "subscription type: exclusive, failover, shared or key_shared")
	c.fs.IntVar(&o.messages, "messages", 1000, "messages to publish (split between the regions)")
	c.fs.Float64Var(&o.consumeFraction, "consume", 0.5, "fraction of the messages to consume in --from before the switch")
	c.fs.BoolVar(&o.keep, "keep", false, "keep the drill's subscription on both clusters afterwards (it holds back retention until deleted)")
	c.fs.BoolVar(&o.allowOthers, "allow-other-subscriptions", false, "publish even though the topic has other subscriptions: they receive the drill's messages")
	c.fs.DurationVar(&o.spread, "publish-over", 5*time.Second, "spread publishing over this long, like live traffic")
	c.fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		return code
	}
	if o.topic == "" || o.from == "" || o.to == "" || o.from == o.to || o.messages < 2 ||
		o.consumeFraction <= 0 || o.consumeFraction >= 1 {
		fmt.Fprintln(stderr, "geo-sidecar drill: --topic, --from and --to are required, --from and --to differ; --messages >= 2; 0 < --consume < 1")
		return exitUsage
	}
	// SIGINT or SIGTERM stops the drill; its subscription is still deleted.
	sctx, sstop := signalContext(zap.NewNop())
	defer sstop()
	ctx, stop := context.WithTimeout(sctx, 10*time.Minute)
	defer stop()
	progress := stderr
	if !o.asJSON {
		progress = stdout
	}
	rep, err := drill(ctx, cfg, o, progress)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar drill: %v\n", err)
		if !rep.counted {
			return exitFailed
		}
		// Counted, but the subscription could not be deleted: the
		// report is printed all the same.
	}
	if o.asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printDrill(stdout, rep)
	}
	if rep.Lost > 0 || err != nil {
		return exitFailed
	}
	return exitOK
}

func printDrill(w io.Writer, r DrillReport) {
	fmt.Fprintf(w, "\nfailover drill %s -> %s on %s, subscription %s (%s)\n", r.From, r.To, r.Topic, r.Subscription, r.Type)
	fmt.Fprintf(w, "  published            %d\n", r.Published)
	fmt.Fprintf(w, "  consumed before      %d (in %s)\n", r.ConsumedBefore, r.From)
	fmt.Fprintf(w, "  consumed after       %d (in %s)\n", r.ConsumedAfter, r.To)
	fmt.Fprintf(w, "  lost                 %d\n", r.Lost)
	fmt.Fprintf(w, "  duplicates           %d\n", r.Duplicates)
	if r.InStep {
		fmt.Fprintf(w, "  in step after        %.1fs\n", r.InStepSeconds)
	} else {
		fmt.Fprintf(w, "  in step              no (the subscription on %s never caught up; resumed anyway)\n", r.To)
	}
	if r.Kept {
		fmt.Fprintf(w, "  subscription         kept on %s and %s (--keep); delete it with pulsar-admin topics unsubscribe %s --subscription %s\n",
			r.From, r.To, r.Topic, r.Subscription)
	}
}

type drillSide struct {
	name   string
	client pulsar.Client
	admin  pulsaradmin.Client
}

func drillConnect(cfg *config.Config, name string) (*drillSide, error) {
	cc, ok := cfg.Cluster(name)
	if !ok {
		return nil, fmt.Errorf("cluster %q is not in the config", name)
	}
	// The sidecar's own clients: the same TLS checks and credentials
	// (a token file is read again when it changes).
	conn, err := replicator.Dial(cc, zap.NewNop())
	if err != nil {
		return nil, err
	}
	return &drillSide{name: name, client: conn.Client, admin: conn.Admin}, nil
}

func subType(s string) (pulsar.SubscriptionType, error) {
	switch strings.ToLower(s) {
	case "exclusive":
		return pulsar.Exclusive, nil
	case "failover":
		return pulsar.Failover, nil
	case "shared":
		return pulsar.Shared, nil
	case "key_shared":
		return pulsar.KeyShared, nil
	}
	return 0, fmt.Errorf("--type %q: want exclusive, failover, shared or key_shared", s)
}

// replicates reports whether cfg copies topic (tenant/ns/short) from a to b.
func replicates(cfg *config.Config, topic, a, b string) bool {
	return len(replicatingEntries(cfg, topic, a, b)) > 0
}

// drill runs the drill on a subscription it creates. Everything it
// checks before creating it is checked before connecting to the data
// plane; once created, the subscription is deleted on both clusters
// (unless --keep) however the drill ends, and an error doing so is
// returned with the report.
func drill(ctx context.Context, cfg *config.Config, o drillOpts, out io.Writer) (rep DrillReport, err error) {
	typ, err := subType(o.typ)
	if err != nil {
		return DrillReport{}, err
	}
	name := strings.TrimPrefix(o.topic, "persistent://")
	if strings.Count(name, "/") != 2 {
		return DrillReport{}, fmt.Errorf("--topic %q: want tenant/namespace/topic", o.topic)
	}
	sub := drillSubName(o.sub)
	if err := checkKeptInStep(cfg, name, sub, o.from, o.to); err != nil {
		return DrillReport{}, err
	}
	topic := "persistent://" + name
	rep = DrillReport{Topic: topic, Subscription: sub, Type: o.typ, From: o.from, To: o.to, Kept: o.keep}
	say := func(format string, a ...any) { fmt.Fprintf(out, "drill: "+format+"\n", a...) }

	from, err := drillConnect(cfg, o.from)
	if err != nil {
		return rep, err
	}
	defer from.client.Close()
	to, err := drillConnect(cfg, o.to)
	if err != nil {
		return rep, err
	}
	defer to.client.Close()
	// The failover target first: see removeDrillSub.
	clusters := []drillCluster{{o.to, pulsarDrillAdmin{to.admin}}, {o.from, pulsarDrillAdmin{from.admin}}}
	leftovers, err := preflight(ctx, cfg, clusters, topic, sub, o.allowOthers)
	if err != nil {
		return rep, err
	}
	if len(leftovers) > 0 {
		say("note: subscriptions of earlier drills on %s (or of one running now): %s", topic, strings.Join(leftovers, ", "))
	}

	// Created at the end of the topic before the first drill message, so
	// the subscription sees every one. The admin API refuses to create one
	// that exists (someone else's, made since the check above); on a topic
	// that does not exist yet the consumer below creates both.
	switch err := clusters[1].admin.CreateAtEnd(ctx, topic, sub); {
	case errors.Is(err, errSubscriptionExists):
		return rep, fmt.Errorf("subscription %q appeared on %s while the drill started; it is not the drill's, so the drill stops", sub, o.from)
	case err != nil && !errors.Is(err, errTopicNotFound):
		return rep, fmt.Errorf("create subscription %s on %s: %w", sub, o.from, err)
	}
	say("created subscription %s on %s", sub, o.from)
	if !o.keep {
		defer func() {
			// With its own deadline: a drill stopped by a signal or its
			// timeout still deletes what it created.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if cerr := removeDrillSub(cctx, clusters, topic, sub); cerr != nil {
				err = errors.Join(err, cerr)
				return
			}
			say("deleted subscription %s on %s and %s", sub, o.to, o.from)
		}()
	}

	cons, err := from.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	if err != nil {
		return rep, fmt.Errorf("subscribe in %s: %w", o.from, err)
	}

	run := uuid.NewString()[:8]
	sides := []*drillSide{from}
	if replicates(cfg, name, o.to, o.from) {
		sides = append(sides, to)
	}
	per := o.messages / len(sides)
	// Publishing is spread over several snapshot intervals, as live
	// traffic is: snapshots are taken between messages, and the switch can
	// only be as precise as the newest snapshot before the position reached.
	say("publishing %d messages in each of %d regions over %s", per, len(sides), o.spread)
	errs := make(chan error, len(sides))
	for _, s := range sides {
		go func() { errs <- drillPublish(ctx, s.client, topic, run, s.name, per, o.spread) }()
	}
	var perr error
	for range sides {
		perr = errors.Join(perr, <-errs)
	}
	if perr != nil {
		cons.Close()
		return rep, perr
	}
	rep.Published = per * len(sides)

	seen := map[string]int{}
	want := int(float64(rep.Published) * o.consumeFraction)
	say("consuming %d of them in %s", want, o.from)
	got, err := drillConsume(ctx, cons, run, want, 30*time.Second, typ == pulsar.Shared)
	cons.Close()
	if err != nil {
		return rep, fmt.Errorf("consume in %s: %w", o.from, err)
	}
	for _, p := range got {
		seen[p]++
	}
	rep.ConsumedBefore = len(got)

	say("consumer in %s stopped; waiting until the subscription is in step in %s", o.from, o.to)
	rep.InStepSeconds, rep.InStep = waitInStep(ctx, from.admin, to.admin, topic, sub, say)

	say("resuming in %s", o.to)
	// The sidecar created the subscription in o.to from the one in
	// o.from; if it has not, this creates it (at the earliest message:
	// duplicates, never a loss), and it is the drill's all the same.
	cons2, err := to.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return rep, fmt.Errorf("subscribe in %s: %w", o.to, err)
	}
	after, err := drillConsume(ctx, cons2, run, 1<<30, 5*time.Second, false)
	cons2.Close()
	if err != nil {
		return rep, fmt.Errorf("consume in %s: %w", o.to, err)
	}
	rep.ConsumedAfter = len(after)
	for _, p := range after {
		if seen[p] > 0 {
			rep.Duplicates++
		}
		seen[p]++
	}
	for _, s := range sides {
		for i := range per {
			if seen[drillPayload(run, s.name, i)] == 0 {
				rep.Lost++
			}
		}
	}
	rep.counted = true
	return rep, nil
}

func drillPayload(run, region string, i int) string { return fmt.Sprintf("%s/%s/%d", run, region, i) }

func drillPublish(ctx context.Context, c pulsar.Client, topic, run, region string, n int, spread time.Duration) error {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return fmt.Errorf("producer in %s: %w", region, err)
	}
	defer p.Close()
	errs := make(chan error, n)
	const steps = 50
	tick := time.NewTicker(spread / steps)
	defer tick.Stop()
	for i := range n {
		if i > 0 && i%max(n/steps, 1) == 0 {
			<-tick.C
		}
		p.SendAsync(ctx, &pulsar.ProducerMessage{
			Payload:    []byte(drillPayload(run, region, i)),
			Key:        fmt.Sprintf("k%d", i%16),
			Properties: map[string]string{drillTag: run},
		}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			return fmt.Errorf("publish in %s: %w", region, err)
		}
	}
	return nil
}

// drillConsume receives this run's messages until n arrived or none came
// for idle, acknowledging each (shuffled in windows of 20 when
// outOfOrder). Markers and other traffic are acknowledged and skipped:
// c is on the drill's own subscription.
func drillConsume(ctx context.Context, c pulsar.Consumer, run string, n int, idle time.Duration, outOfOrder bool) ([]string, error) {
	var got []string
	var window []pulsar.MessageID
	flush := func() error {
		if outOfOrder {
			rand.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
		}
		for _, id := range window {
			if err := c.AckID(id); err != nil {
				return err
			}
		}
		window = window[:0]
		return nil
	}
	for len(got) < n {
		rctx, cancel := context.WithTimeout(ctx, idle)
		m, err := c.Receive(rctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				break
			}
			return got, err
		}
		if marker.Is(m) || m.Properties()[drillTag] != run {
			window = append(window, m.ID())
			continue
		}
		got = append(got, string(m.Payload()))
		window = append(window, m.ID())
		if len(window) >= 20 {
			if err := flush(); err != nil {
				return got, err
			}
		}
	}
	return got, flush()
}

// waitInStep waits until the subscription on the target trails the one on
// the source by no more than it will for a while: the sum over partitions
// of how much further back it is stops shrinking for 3 s, or reaches 0 with
// the subscription on every partition. A partition where the source
// subscription consumed nothing before the first snapshot has no position
// to carry over; there the target subscription starts from its initial
// position (duplicates, never a loss). It returns the time until the last
// improvement.
func waitInStep(ctx context.Context, fromAdmin, toAdmin pulsaradmin.Client, topic, sub string, say func(string, ...any)) (float64, bool) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return 0, false
	}
	start := time.Now()
	best, bestAt := int64(-1), start
	lastSay := start
	for time.Since(start) < 60*time.Second && ctx.Err() == nil {
		fb, fok := subBacklogs(fromAdmin, *tn, sub)
		tb, tok := subBacklogs(toAdmin, *tn, sub)
		present := fok && tok && len(tb) > 0
		var lag int64
		for p, f := range fb {
			lag += max(tb[p]-f, 0)
		}
		if time.Since(lastSay) >= 2*time.Second {
			lastSay = time.Now()
			say("  %s trails by %d backlog entries on %d of %d partitions", sub, lag, len(tb), len(fb))
		}
		if present {
			if best < 0 || lag < best {
				best, bestAt = lag, time.Now()
			}
			if (lag == 0 && len(tb) == len(fb)) || time.Since(bestAt) > 3*time.Second {
				return bestAt.Sub(start).Seconds(), true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start).Seconds(), false
}

// subBacklogs returns sub's backlog per partition where sub exists, in
// messages (Pulsar's default counts a batch as one).
func subBacklogs(a pulsaradmin.Client, tn utils.TopicName, sub string) (map[string]int64, bool) {
	md, err := a.Topics().GetMetadata(tn)
	if err != nil {
		return nil, false
	}
	opt := utils.GetStatsOptions{GetPreciseBacklog: true, ExcludePublishers: true, ExcludeConsumers: true}
	out := map[string]int64{}
	if md.Partitions == 0 {
		st, err := a.Topics().GetStatsWithOption(tn, opt)
		if err != nil {
			return nil, false
		}
		if s, ok := st.Subscriptions[sub]; ok {
			out[tn.String()] = s.MsgBacklog
		}
		return out, true
	}
	st, err := a.Topics().GetPartitionedStatsWithOption(tn, true, opt)
	if err != nil {
		return nil, false
	}
	for p, ps := range st.Partitions {
		if s, ok := ps.Subscriptions[sub]; ok {
			out[p] = s.MsgBacklog
		}
	}
	return out, true
}
