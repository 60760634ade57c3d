// Package drill runs a failover drill against live clusters, to show
// before a real failover that a replicated subscription resumes on the
// other cluster without losing a message. On a subscription of its own it
// publishes tagged messages in both regions, consumes and acknowledges part
// of them in the cluster failed over from, stops (the switch), waits until
// the sidecars have carried the subscription's position over, resumes in
// the other cluster and counts what was lost (must be none) and what was
// read twice. It also measures, from the clusters, the RPO and the RTO of
// a failover at the switch (rpo.go).
//
// It is a package rather than part of the geo-sidecar drill command so that
// the end-to-end tests read the same [Report] the command prints. The rules
// in safety.go keep it away from every subscription it did not create.
package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// tag is the property that marks a drill's own messages; its value is the
// run, so a drill counts only what it published itself.
const tag = "geo-sidecar.drill"

// Report is what a failover drill observed; geo-sidecar drill --json prints
// it as is.
type Report struct {
	Topic          string `json:"topic"`
	Subscription   string `json:"subscription"`
	Type           string `json:"type"`
	From           string `json:"from"`
	To             string `json:"to"`
	Published      int    `json:"published"`
	ConsumedBefore int    `json:"consumed_before"`
	ConsumedAfter  int    `json:"consumed_after"`
	Lost           int    `json:"lost"`
	Duplicates     int    `json:"duplicates"`
	// InStep: when the drill resumed in To, the subscription there
	// trailed the one in From by nothing on every partition.
	InStep bool `json:"in_step"`
	// Trailing is by how many backlog entries (summed over partitions)
	// the subscription in To trailed the one in From when the drill
	// resumed there: a switch at that moment delivers them again.
	Trailing int64 `json:"trailing"`
	// InStepSeconds is how long after the consumer in From stopped the
	// subscription in To got as close as it got (its last move).
	InStepSeconds float64 `json:"in_step_seconds"`
	// GaveUp: the drill resumed without the subscription in To having
	// moved closer (or existing on every partition) within its wait.
	GaveUp bool `json:"gave_up"`
	// WaitedSeconds is how long the drill waited before resuming.
	WaitedSeconds float64 `json:"waited_seconds"`
	// Kept: Options.Keep left the drill's subscription on both clusters;
	// otherwise it was deleted on both (or the drill failed saying where
	// it may be left).
	Kept bool `json:"kept"`
	// SwitchedAt is when the consumer in From stopped (RFC 3339, UTC):
	// the RPO and the RTO are of a failover then.
	SwitchedAt string `json:"switched_at,omitempty"`
	// RPO and RTO of a failover at the switch, measured.
	RPO RPO `json:"rpo"`
	RTO RTO `json:"rto"`
	// Mode is how the subscription in To was brought to the one in From:
	// ModeFollow (the sidecars' replicated subscription: the mark-delete
	// position, as of the newest snapshot) or ModeExact (switchover's
	// plan, Options.Exact: the mark-delete position and every
	// acknowledgement past it, once the copy is proven complete).
	Mode string `json:"mode"`
	// Switchover is the exact move's report (ModeExact): its own counts
	// of entries that would be received again or missed, per partition;
	// Duplicates and Lost are what the drill's consumer in To then
	// received.
	Switchover *switchover.Report `json:"switchover,omitempty"`

	// complete: the drill ran to the end.
	complete bool
}

// Complete reports whether the drill ran to the end, so that the figures
// stand; an error returned with a complete report is only about deleting
// the subscription.
func (r Report) Complete() bool { return r.complete }

// Modes of bringing the subscription over (Report.Mode).
const (
	ModeFollow = "follow"
	ModeExact  = "exact"
)

// Switcher moves the drill's subscription from one cluster to the other
// with switchover's exact plan (geo-sidecar switchover): the command
// wires it with verify's proof and the wire move, which this package may
// not import. Switch returns switchover.Run's report and error
// (switchover.ErrNotProven while the copy is not complete yet, and the
// other preconditions' errors: nothing moved).
type Switcher interface {
	Switch(ctx context.Context, sub string, progress io.Writer) (switchover.Report, error)
	Close()
}

// NewSwitcher connects a Switcher for topic from one cluster to another.
type NewSwitcher func(topic, from, to string) (Switcher, error)

// Dial connects to one cluster of the config. The command passes the
// sidecar's own connection (replicator.Dial), so the drill uses the same TLS
// checks and credentials; the drill closes the client when it is done.
type Dial func(config.Cluster) (pulsar.Client, pulsaradmin.Client, error)

// Options say where and how to drill. Errors name the command's flags
// that set each field. Run expects From and To to differ, Messages >= 2 and
// 0 < ConsumeFraction < 1; the command checks them as usage errors.
type Options struct {
	// Topic is tenant/namespace/topic, with or without persistent://.
	Topic string
	// Subscription is the one the drill creates; it must not exist. ""
	// names a fresh one under [Prefix].
	Subscription string
	// From and To are the clusters failed over from and to.
	From, To string
	// Type is exclusive, failover, shared or key_shared.
	Type string
	// Messages are split between the regions that publish: From, and To
	// when the config copies the topic from To to From.
	Messages int
	// ConsumeFraction of the messages is consumed in From before the
	// switch.
	ConsumeFraction float64
	// Keep leaves the subscription on both clusters afterwards.
	Keep bool
	// AllowOtherSubscriptions publishes even though others subscribe to
	// the topic: they receive the drill's messages.
	AllowOtherSubscriptions bool
	// PublishOver spreads publishing over this long, like live traffic.
	PublishOver time.Duration
	// InStepWait bounds the wait for the subscription in To to be in step
	// (the RTO is not reached past it); 0: 60 s.
	InStepWait time.Duration
	// Lookback: the RPO's walk reads the source from this long before the
	// drill began, so that what the target lacked of earlier traffic
	// counts too; a longer one reads more.
	Lookback time.Duration
	// Dial connects to From and To.
	Dial Dial
	// Prover, when set, connects what measures the RPO; nil: the RPO is
	// reported as not measured.
	Prover NewProver
	// Exact, when set, moves the subscription to To with switchover's
	// exact plan at the switch instead of waiting for the sidecars to
	// follow it (ModeExact); the wait is bounded by InStepWait as the
	// follow's is.
	Exact NewSwitcher
}

// Run runs the drill on a subscription it creates, writing progress lines
// to progress. Everything it checks before creating the subscription is
// checked before connecting to the data plane; once created, the
// subscription is deleted on both clusters (unless Keep) however the drill
// ends, and an error doing so is returned with the report.
func Run(ctx context.Context, cfg *config.Config, o Options, progress io.Writer) (rep Report, err error) {
	typ, err := subType(o.Type)
	if err != nil {
		return Report{}, err
	}
	topic, ns, short, err := drillTopic(o.Topic)
	if err != nil {
		return Report{}, err
	}
	sub := subName(o.Subscription)
	if err := checkKeptInStep(cfg, ns, short, sub, o.From, o.To); err != nil {
		return Report{}, err
	}
	rep = Report{Topic: topic, Subscription: sub, Type: o.Type, From: o.From, To: o.To, Kept: o.Keep, Mode: ModeFollow}
	if o.Exact != nil {
		rep.Mode = ModeExact
	}
	var sayMu sync.Mutex // the RPO's mark says it is done from a goroutine of its own
	say := func(format string, a ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		fmt.Fprintf(progress, "drill: "+format+"\n", a...)
	}
	// The RPO's walk reads the source from here: the drill's traffic,
	// and Lookback of what came before it.
	since := time.Now().Add(-o.Lookback)

	from, to, prover, switcher, closeAll, err := connectAll(cfg, o, topic)
	if err != nil {
		return rep, err
	}
	defer closeAll()
	// The failover target first: see removeSub.
	clusters := []cluster{{o.To, pulsarAdmin{to.admin}}, {o.From, pulsarAdmin{from.admin}}}
	leftovers, err := preflight(ctx, cfg, clusters, topic, sub, o.AllowOtherSubscriptions)
	if err != nil {
		return rep, err
	}
	if len(leftovers) > 0 {
		say("note: subscriptions of earlier drills on %s (or of one running now): %s", topic, strings.Join(leftovers, ", "))
	}

	if err := createAtEnd(ctx, clusters[1], topic, sub); err != nil {
		return rep, err
	}
	say("created subscription %s on %s", sub, o.From)
	if !o.Keep {
		defer func() {
			// With its own deadline: a drill stopped by a signal or its
			// timeout still deletes what it created.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if cerr := removeSub(cctx, clusters, topic, sub); cerr != nil {
				err = errors.Join(err, cerr)
				return
			}
			say("deleted subscription %s on %s and %s", sub, o.To, o.From)
		}()
	}

	cons, err := from.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	if err != nil {
		return rep, fmt.Errorf("subscribe in %s: %w", o.From, err)
	}

	run := uuid.NewString()[:8]
	sides := []*side{from}
	if cfg.Copies(ns, short, o.To, o.From) {
		sides = append(sides, to)
	}
	per := o.Messages / len(sides)
	// Publishing is spread over several snapshot intervals, as live
	// traffic is: snapshots are taken between messages, and the switch can
	// only be as precise as the newest snapshot before the position reached.
	say("publishing %d messages in each of %d regions over %s", per, len(sides), o.PublishOver)
	if err := publishAll(ctx, sides, topic, run, per, o.PublishOver); err != nil {
		cons.Close()
		return rep, err
	}
	rep.Published = per * len(sides)

	seen := map[string]int{}
	want := int(float64(rep.Published) * o.ConsumeFraction)
	say("consuming %d of them in %s", want, o.From)
	got, err := consume(ctx, cons, run, want, 30*time.Second, typ == pulsar.Shared)
	cons.Close()
	switched := time.Now() // the RTO's clock starts here
	if err != nil {
		return rep, fmt.Errorf("consume in %s: %w", o.From, err)
	}
	for _, p := range got {
		seen[p]++
	}
	rep.ConsumedBefore = len(got)

	rep.SwitchedAt = switched.UTC().Format(time.RFC3339Nano)
	var m mark
	if switcher != nil {
		say("consumer in %s stopped (the switch); moving the subscription to %s with switchover's exact plan", o.From, o.To)
		m = exactSwitch(ctx, &rep, switched, prover, switcher, o, sub, say)
	} else {
		say("consumer in %s stopped (the switch); waiting until the subscription is in step in %s", o.From, o.To)
		m = awaitInStep(ctx, &rep, switched, prover, backlogSampler(from.admin, to.admin, topic, sub), o, sub, say)
	}

	say("resuming in %s", o.To)
	if err := resume(ctx, &rep, to, typ, topic, sub, o.To, run, seen); err != nil {
		return rep, err
	}
	measureRPO(ctx, &rep, prover, m, since, say)
	for _, s := range sides {
		for i := range per {
			if seen[payload(run, s.name, i)] == 0 {
				rep.Lost++
			}
		}
	}
	rep.complete = true
	return rep, nil
}

// connectAll connects to both clusters and, with o.Prover, the RPO's
// verifier, with o.Exact, the exact move; closeAll closes what it
// opened.
func connectAll(cfg *config.Config, o Options, topic string) (from, to *side, prover Prover, switcher Switcher, closeAll func(), err error) {
	var closers []func()
	closeOpened := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	fail := func(err error) (*side, *side, Prover, Switcher, func(), error) {
		closeOpened()
		return nil, nil, nil, nil, nil, err
	}
	if from, err = connect(cfg, o.Dial, o.From); err != nil {
		return fail(err)
	}
	closers = append(closers, from.client.Close)
	if to, err = connect(cfg, o.Dial, o.To); err != nil {
		return fail(err)
	}
	closers = append(closers, to.client.Close)
	if o.Prover != nil {
		if prover, err = o.Prover(topic, o.From, o.To); err != nil {
			return fail(fmt.Errorf("connect the verifier (RPO): %w", err))
		}
		closers = append(closers, prover.Close)
	}
	if o.Exact != nil {
		if switcher, err = o.Exact(topic, o.From, o.To); err != nil {
			return fail(fmt.Errorf("connect the exact move (--exact): %w", err))
		}
		closers = append(closers, switcher.Close)
	}
	return from, to, prover, switcher, closeOpened, nil
}

// drillTopic parses --topic: tenant/namespace/topic, with or without
// persistent://.
func drillTopic(arg string) (topic, ns, short string, err error) {
	name := strings.TrimPrefix(arg, "persistent://")
	if strings.Count(name, "/") != 2 {
		return "", "", "", fmt.Errorf("--topic %q: want tenant/namespace/topic", arg)
	}
	i := strings.LastIndex(name, "/")
	return "persistent://" + name, name[:i], name[i+1:], nil
}

// createAtEnd creates the drill's subscription in c at the end of the
// topic, before the first drill message, so that it sees every one. The
// admin API refuses to create one that exists (someone else's, made
// since the preflight); on a topic that does not exist yet the drill's
// consumer creates both.
func createAtEnd(ctx context.Context, c cluster, topic, sub string) error {
	switch err := c.admin.CreateAtEnd(ctx, topic, sub); {
	case errors.Is(err, errSubscriptionExists):
		return fmt.Errorf("subscription %q appeared on %s while the drill started; it is not the drill's, so the drill stops", sub, c.name)
	case err != nil && !errors.Is(err, errTopicNotFound):
		return fmt.Errorf("create subscription %s on %s: %w", sub, c.name, err)
	}
	return nil
}

// publishAll publishes per messages of the drill's run from each side at
// once, spread over the given time.
func publishAll(ctx context.Context, sides []*side, topic, run string, per int, over time.Duration) error {
	errs := make(chan error, len(sides))
	for _, s := range sides {
		go func() { errs <- publish(ctx, s.client, topic, run, s.name, per, over) }()
	}
	var err error
	for range sides {
		err = errors.Join(err, <-errs)
	}
	return err
}

// awaitInStep waits, from the switch, until sub's copy in o.To is in step
// with o.From (or as close as it gets, or given up on), while p marks the
// ends for the RPO; it records how the wait ended in rep, the RTO among
// it, and says so: a drill never calls a subscription in step that is
// not. It returns how the mark went.
func awaitInStep(ctx context.Context, rep *Report, switched time.Time, p Prover, sample sampler, o Options, sub string,
	say func(string, ...any)) mark {
	limit := o.InStepWait
	if limit <= 0 {
		limit = waitLimit
	}
	st, m := atSwitch(ctx, switched, p, sample, limit, sub, say)
	rep.InStep, rep.Trailing, rep.GaveUp = st.inStep, st.trailing, st.gaveUp
	rep.InStepSeconds, rep.WaitedSeconds = st.closestAfter.Seconds(), st.waited.Seconds()
	rep.RTO = rtoOf(st)
	switch {
	case st.inStep:
	case st.gaveUp:
		say("gave up waiting after %.0fs: %s trails by %d backlog entries on %d of %d partitions in %s (resuming all the same)",
			st.waited.Seconds(), sub, st.trailing, st.present, st.partitions, o.To)
		say("  a subscription's copy follows only to the newest snapshot at or before its position in %s; one that never moves "+
			"usually lies before the partition's first snapshot (replication of the topic began, or messages last crossed both ways, "+
			"after that position): the sidecar's debug log says \"no update for a subscription\" with covered=false", o.From)
	default:
		say("%s trails by %d backlog entries in %s, as close as it got (unchanged for %s): a switch now delivers them again",
			sub, st.trailing, o.To, settleAfterMove)
	}
	return m
}

// measureRPO proves, with p, what of the source the target held at the
// switch (the ends p marked then), reading from since, and records it in
// rep; a drill that could not measure it says why and goes on.
func measureRPO(ctx context.Context, rep *Report, p Prover, m mark, since time.Time, say func(string, ...any)) {
	var proofs []Proof
	err := m.err
	switch {
	case p == nil:
		err = errors.New("no verifier")
	case err == nil:
		say("proving what %s held of %s at the switch (RPO), reading from %s", rep.To, rep.From, since.UTC().Format(time.RFC3339))
		proofs, err = p.Prove(ctx, since)
	}
	if err != nil {
		rep.RPO = RPO{Error: err.Error()}
		say("RPO not measured: %v", err)
		return
	}
	rep.RPO = rpoOf(proofs, since, m.after)
}

// resume consumes in the failover target (cluster name toName) everything
// sub holds of the run, counting in rep what arrives and, against seen
// (what was consumed before the switch), the duplicates.
func resume(ctx context.Context, rep *Report, to *side, typ pulsar.SubscriptionType, topic, sub, toName, run string, seen map[string]int) error {
	// The sidecar created the subscription in the target from the one in
	// the source; if it has not, this creates it (at the earliest
	// message: duplicates, never a loss), and it is the drill's all the
	// same.
	cons, err := to.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return fmt.Errorf("subscribe in %s: %w", toName, err)
	}
	after, err := consume(ctx, cons, run, 1<<30, 5*time.Second, false)
	cons.Close()
	if err != nil {
		return fmt.Errorf("consume in %s: %w", toName, err)
	}
	rep.ConsumedAfter = len(after)
	for _, p := range after {
		if seen[p] > 0 {
			rep.Duplicates++
		}
		seen[p]++
	}
	return nil
}

// side is one cluster as the drill publishes and consumes on it.
type side struct {
	name   string
	client pulsar.Client
	admin  pulsaradmin.Client
}

func connect(cfg *config.Config, dial Dial, name string) (*side, error) {
	cc, ok := cfg.Cluster(name)
	if !ok {
		return nil, fmt.Errorf("cluster %q is not in the config", name)
	}
	client, admin, err := dial(cc)
	if err != nil {
		return nil, err
	}
	return &side{name: name, client: client, admin: admin}, nil
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

func payload(run, region string, i int) string { return fmt.Sprintf("%s/%s/%d", run, region, i) }

func publish(ctx context.Context, c pulsar.Client, topic, run, region string, n int, spread time.Duration) error {
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
			Payload:    []byte(payload(run, region, i)),
			Key:        fmt.Sprintf("k%d", i%16),
			Properties: map[string]string{tag: run},
		}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			return fmt.Errorf("publish in %s: %w", region, err)
		}
	}
	return nil
}

// consume receives this run's messages until n arrived or none came for
// idle, acknowledging each (shuffled in windows of 20 when outOfOrder).
// Markers and other traffic are acknowledged and skipped: c is on the
// drill's own subscription.
func consume(ctx context.Context, c pulsar.Consumer, run string, n int, idle time.Duration, outOfOrder bool) ([]string, error) {
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
		if marker.Is(m) || m.Properties()[tag] != run {
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

// sampler reads sub's backlog per partition on the source and on the
// target; ok is false when either could not be read.
type sampler func() (from, to map[string]int64, ok bool)

func backlogSampler(fromAdmin, toAdmin pulsaradmin.Client, topic, sub string) sampler {
	tn, err := utils.GetTopicName(topic)
	return func() (map[string]int64, map[string]int64, bool) {
		if err != nil {
			return nil, nil, false
		}
		fb, fok := Backlogs(fromAdmin, *tn, sub)
		tb, tok := Backlogs(toAdmin, *tn, sub)
		return fb, tb, fok && tok
	}
}

// How long waitInStep waits: the lag must hold this long after it last
// shrank, or this long without ever shrinking, and never longer than its
// limit in all (by default waitLimit).
const (
	settleAfterMove = 3 * time.Second
	settleUnmoved   = 15 * time.Second
	waitLimit       = 60 * time.Second
)

// inStep is what waitInStep saw when it stopped waiting.
type inStep struct {
	inStep              bool // lag 0 on every partition of the source
	gaveUp              bool // never moved closer, or missing, within the wait
	trailing            int64
	present, partitions int
	closestAfter        time.Duration // until the lag last shrank (or was 0)
	waited              time.Duration
}

// waitInStep waits until the subscription on the target trails the one on
// the source by no more than it will for a while, and says how close it
// got. Lag is the sum over partitions of how much further back the target
// is. In step is lag 0 with the subscription on every partition. A lag
// that shrank and then holds for settleAfterMove is as close as the
// newest snapshot allows (not in step). A lag that never shrank, or a
// subscription missing on the target, is waited for up to settleUnmoved
// or limit and then reported as given up: the drill never calls a
// subscription in step that is not. Its times are measured from start,
// the switch, which may lie before the call.
func waitInStep(ctx context.Context, sample sampler, sub string, say func(string, ...any), start time.Time, limit time.Duration) inStep {
	var st inStep
	initial, best := int64(-1), int64(-1)
	var bestAt, lastSay time.Time
	done := func(gaveUp bool) inStep {
		st.gaveUp, st.waited = gaveUp, time.Since(start)
		if !bestAt.IsZero() {
			st.closestAfter = bestAt.Sub(start)
		}
		return st
	}
	for time.Since(start) < limit && ctx.Err() == nil {
		fb, tb, ok := sample()
		if ok {
			var lag int64
			for p, f := range fb {
				lag += max(tb[p]-f, 0)
			}
			st.trailing, st.present, st.partitions = lag, len(tb), len(fb)
			if time.Since(lastSay) >= 2*time.Second {
				lastSay = time.Now()
				say("  %s trails by %d backlog entries on %d of %d partitions", sub, lag, len(tb), len(fb))
			}
			// A partition where the source subscription consumed nothing
			// before the first snapshot may have no subscription on the
			// target yet: the rest is judged without it.
			if len(tb) > 0 {
				if initial < 0 {
					initial, best, bestAt = lag, lag, time.Now()
				}
				if lag < best {
					best, bestAt = lag, time.Now()
				}
				switch {
				case lag == 0 && len(tb) == len(fb):
					st.inStep = true
					bestAt = time.Now()
					return done(false)
				case best < initial && time.Since(bestAt) >= settleAfterMove:
					st.trailing = best
					return done(false)
				case best == initial && time.Since(bestAt) >= settleUnmoved:
					return done(true)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return done(true)
}

// Backlogs returns sub's backlog per partition of tn where sub exists,
// in messages (Pulsar's default counts a batch as one), and false when
// the admin API could not say. Exported for the e2e tests, which judge
// a drill's outcome by the same reading.
func Backlogs(a pulsaradmin.Client, tn utils.TopicName, sub string) (map[string]int64, bool) {
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
