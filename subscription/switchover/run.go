package switchover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Sub is what a cluster's admin API says of a subscription on one
// partition.
type Sub struct {
	// Exists: the partition has the subscription (a durable cursor).
	Exists bool
	State  State
	// Type is the subscription's type as the broker's stats name it
	// (Shared, Failover, Exclusive, Key_Shared; "" or None when no
	// consumer attached since the broker loaded the topic).
	Type string
	// Consumers attached now.
	Consumers int
}

// Cluster is one cluster's admin API as the switchover reads it. Safe for
// concurrent use.
type Cluster interface {
	// Subscription reads sub on partition: internal stats (the cursor's
	// mark-delete position and individually deleted ranges) and stats
	// (type, consumers). A partition without it gives Exists false.
	Subscription(ctx context.Context, partition, sub string) (Sub, error)
	// Producers names the producers attached to partition.
	Producers(ctx context.Context, partition string) ([]string, error)
}

// Mover moves a subscription on the target forward, with a consumer of
// its own that attaches as Shared (the target's subscription has no
// consumer, so any type is admitted, and it asks for no message, so the
// broker dispatches none to it): its mark-delete position to md (where
// it is: only the holes move; a missing subscription is created there),
// then an individual acknowledgement of each entry of individually. The
// broker moves positions forward only. Run reads the state after from
// the admin API.
type Mover interface {
	Move(ctx context.Context, partition, sub string, md marker.Position, individually []marker.Position) error
}

// Prover proves the copy of the topic from the source to the target
// through the ends of every partition as they are when it starts, and
// calls copied, from its own goroutine, for every proven copy it reads
// on the target.
type Prover interface {
	Prove(ctx context.Context, copied func(partition string, origin, at marker.Position)) (Proof, error)
}

// Proof is the proof's verdict.
type Proof struct {
	// Complete: nothing missing, duplicated, divergent, out of order or
	// unproven, and nothing left to copy, on every partition.
	Complete bool
	// Detail says what is wrong when not Complete.
	Detail string
}

// Options say what to switch over.
type Options struct {
	Topic         string
	From, To      string
	Partitions    []string // the topic's partitions (the topic itself when not partitioned)
	Subscriptions []string
	Source        Cluster
	Target        Cluster
	Mover         Mover
	Prover        Prover
	// Quiet is how long the source must stay without application
	// producers (any not named under marker.SidecarProducers) before the
	// proof; it is checked at its start and its end.
	Quiet time.Duration
	// DryRun plans and compares without moving anything.
	DryRun bool
	// Leave and Consume name, per partition, target entries with no copy
	// on the source that the move leaves unconsumed or consumes
	// (Copies.Leave, Copies.Consume): the failback's stranded tail. Nil
	// for a switchover.
	Leave, Consume map[string][]marker.Position
}

// Outcome of one subscription on one partition.
const (
	Moved      = "moved"       // the plan was carried out
	InStep     = "in-step"     // nothing to move: the target is at the source's state
	Refused    = "refused"     // left as it is: see Detail
	Planned    = "planned"     // DryRun: see the plan's counts
	NoSource   = "no-source"   // the source has no such subscription on the partition
	MoveFailed = "move-failed" // the move returned an error: see Detail
)

// Result is one subscription on one partition.
type Result struct {
	Partition    string `json:"partition"`
	Subscription string `json:"subscription"`
	Type         string `json:"type"`
	Outcome      string `json:"outcome"`
	Detail       string `json:"detail,omitempty"`
	Source       string `json:"source_state"`
	TargetBefore string `json:"target_state_before"`
	TargetAfter  string `json:"target_state_after"`
	// MovedMarkDelete is where the target's mark-delete position was sent
	// ("" when it stayed); Individually how many entries were acknowledged
	// one by one.
	MovedMarkDelete string `json:"moved_mark_delete,omitempty"`
	Individually    int    `json:"individually"`
	// Before is the comparison before the move, After after it: what a
	// consumer switching now receives again and misses.
	Before Comparison `json:"before"`
	After  Comparison `json:"after"`
}

// Report is what Run did and found.
type Report struct {
	Topic string `json:"topic"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Proven: the copy was proven complete before anything moved.
	Proven      bool     `json:"proven"`
	ProofDetail string   `json:"proof_detail,omitempty"`
	DryRun      bool     `json:"dry_run"`
	Results     []Result `json:"results"`
	// Again and Missed total After over the results: the goal is 0 and 0.
	Again  int `json:"again"`
	Missed int `json:"missed"`
	// Refused counts the subscriptions (per partition) not brought in
	// step: refused, whose move failed, or missing on the source (a name
	// mistyped is not a switchover done).
	Refused int `json:"refused"`
	// Next says what to do next.
	Next    string  `json:"next"`
	Seconds float64 `json:"seconds"`
}

// OK reports whether a consumer switching now misses nothing, receives
// nothing again, and every subscription was brought in step.
func (r Report) OK() bool {
	return r.Proven && r.Missed == 0 && r.Again == 0 && r.Refused == 0
}

// ErrNotQuiet: application producers are attached to the source.
var ErrNotQuiet = errors.New("the source's producers have not stopped")

// ErrConsumers: an application's consumers are attached to a named
// subscription on the source (its state would change under the
// switchover) or on the target (a move's consumer would share its
// dispatcher).
var ErrConsumers = errors.New("consumers attached")

// ErrNotProven: the proof did not find the copy complete.
var ErrNotProven = errors.New("the copy is not proven complete")

// Run switches the subscriptions over, writing progress lines to
// progress. An error before any move returns the report so far; the
// subscriptions are then untouched.
func Run(ctx context.Context, o Options, progress io.Writer) (rep Report, err error) {
	started := time.Now()
	rep = Report{Topic: o.Topic, From: o.From, To: o.To, DryRun: o.DryRun}
	defer func() { rep.Seconds = time.Since(started).Seconds() }()
	say := func(format string, a ...any) { fmt.Fprintf(progress, format+"\n", a...) }

	// 1. The source is quiet: no application producer, at the start and
	// the end of the quiet period.
	if err := quiet(ctx, o, say); err != nil {
		rep.Next = "stop the applications' producers on " + o.From + " and run again"
		return rep, err
	}
	// 2. The subscriptions' states, source and target, with no
	// application consumer attached on either side.
	type key struct{ part, sub string }
	src, tgt := map[key]Sub{}, map[key]Sub{}
	for _, part := range o.Partitions {
		for _, sub := range o.Subscriptions {
			s, err := o.Source.Subscription(ctx, part, sub)
			if err != nil {
				return rep, fmt.Errorf("%s: %s of %s: %w", o.From, sub, part, err)
			}
			if s.Consumers > 0 {
				rep.Next = "stop the application's consumers of " + sub + " on " + o.From + " (their acknowledgements are what moves) and run again"
				return rep, fmt.Errorf("%s: %s of %s: %d %w: its state would change under the switchover", o.From, sub, part, s.Consumers, ErrConsumers)
			}
			t, err := o.Target.Subscription(ctx, part, sub)
			if err != nil {
				return rep, fmt.Errorf("%s: %s of %s: %w", o.To, sub, part, err)
			}
			if !t.Exists {
				t.State = State{MarkDelete: nothing}
			}
			if t.Consumers > 0 {
				rep.Next = "stop the consumers of " + sub + " on " + o.To + " until the switchover is done, and run again"
				return rep, fmt.Errorf("%s: %s of %s: %d %w", o.To, sub, part, t.Consumers, ErrConsumers)
			}
			src[key{part, sub}], tgt[key{part, sub}] = s, t
		}
	}
	// 3. The proof, collecting the copies each subscription needs.
	copies := map[key]*Copies{}
	for k, s := range src {
		c := NewCopies(s.State.MarkDelete, tgt[k].State.MarkDelete)
		for _, p := range o.Leave[k.part] {
			c.Leave(p)
		}
		for _, p := range o.Consume[k.part] {
			c.Consume(p)
		}
		copies[k] = c
	}
	say("proving the copy of %s from %s to %s", o.Topic, o.From, o.To)
	proof, err := o.Prover.Prove(ctx, func(part string, origin, at marker.Position) {
		for _, sub := range o.Subscriptions {
			if c := copies[key{part, sub}]; c != nil {
				c.Add(origin, at)
			}
		}
	})
	if err != nil {
		rep.Next = "the copy could not be proven; nothing was moved"
		return rep, fmt.Errorf("prove the copy: %w", err)
	}
	rep.Proven, rep.ProofDetail = proof.Complete, proof.Detail
	if !proof.Complete {
		rep.Next = "let the sidecar finish the copy (geo-sidecar verify --complete) and run again; nothing was moved"
		return rep, fmt.Errorf("%w: %s", ErrNotProven, proof.Detail)
	}
	// 4. Plan, move, read the target again and compare.
	for _, part := range o.Partitions {
		for _, sub := range o.Subscriptions {
			k := key{part, sub}
			r := apply(ctx, o, part, sub, src[k], tgt[k], copies[k])
			say("%s %s: %s", part, sub, r.Outcome)
			rep.Results = append(rep.Results, r)
			rep.Again += r.After.Again
			rep.Missed += r.After.Missed
			if r.Outcome == Refused || r.Outcome == MoveFailed || r.Outcome == NoSource {
				rep.Refused++
			}
		}
	}
	switch {
	case rep.Missed > 0:
		rep.Next = fmt.Sprintf("DO NOT switch: consumers on %s would miss %d entries (see the results)", o.To, rep.Missed)
	case rep.Refused > 0:
		rep.Next = "see the results not brought in step (refused, move-failed, no-source: their detail says why); the others are in step on " + o.To
	case o.DryRun:
		rep.Next = "run again without --dry-run to move the subscriptions on " + o.To
	case rep.Again > 0:
		rep.Next = fmt.Sprintf("consumers on %s would receive %d entries again; run again to retry the move", o.To, rep.Again)
	default:
		rep.Next = fmt.Sprintf("start the consumers on %s: they receive exactly what was not acknowledged on %s", o.To, o.From)
	}
	return rep, nil
}

// quiet waits o.Quiet and checks, at both ends, that no application
// producer is attached to any partition of the source.
func quiet(ctx context.Context, o Options, say func(string, ...any)) error {
	check := func() error {
		for _, part := range o.Partitions {
			names, err := o.Source.Producers(ctx, part)
			if err != nil {
				return fmt.Errorf("%s: producers of %s: %w", o.From, part, err)
			}
			var apps []string
			for _, n := range names {
				if !strings.HasPrefix(n, marker.SidecarProducers) {
					apps = append(apps, n)
				}
			}
			if len(apps) > 0 {
				slices.Sort(apps)
				return fmt.Errorf("%w: %s of %s: %s", ErrNotQuiet, o.From, part, strings.Join(apps, ", "))
			}
		}
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	if o.Quiet <= 0 {
		return nil
	}
	say("waiting %s: no application producer on %s", o.Quiet, o.From)
	t := time.NewTimer(o.Quiet)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return check()
}

// apply plans, moves and compares one subscription on one partition.
func apply(ctx context.Context, o Options, part, sub string, src, tgt Sub, c *Copies) Result {
	r := Result{Partition: part, Subscription: sub, Type: src.Type, Source: src.State.String(), TargetBefore: tgt.State.String()}
	if !src.Exists {
		r.Outcome, r.Detail = NoSource, "no such subscription on "+o.From+"; left alone on "+o.To
		r.TargetAfter = r.TargetBefore
		return r
	}
	if !tgt.Exists {
		r.TargetBefore = "none"
	}
	r.Before = c.Compare(src.State, tgt.State)
	plan := c.PlanMove(src.State, tgt.State)
	r.Individually = len(plan.Individually)
	if plan.HasMarkDelete {
		r.MovedMarkDelete = at(plan.MarkDelete)
	}
	after := tgt
	switch {
	case plan.Refused != "":
		r.Outcome, r.Detail = Refused, plan.Refused
	case plan.Empty() && tgt.Exists:
		r.Outcome = InStep
	case !tgt.Exists && !plan.HasMarkDelete:
		r.Outcome, r.Detail = Refused, "no such subscription on "+o.To+" and no copy at or before the source's mark-delete position to create it at"
	case o.DryRun:
		r.Outcome = Planned
		after.State = predict(tgt.State, plan)
	default:
		md := tgt.State.MarkDelete // where it is: only the holes move
		if plan.HasMarkDelete {
			md = plan.MarkDelete
		}
		if err := o.Mover.Move(ctx, part, sub, md, plan.Individually); err != nil {
			r.Outcome, r.Detail = MoveFailed, err.Error()
		} else {
			r.Outcome = Moved
		}
		a, err := o.Target.Subscription(ctx, part, sub)
		if err != nil {
			r.Outcome, r.Detail = MoveFailed, fmt.Sprintf("%s; reading the target after: %v", r.Detail, err)
		} else {
			after = a
		}
	}
	r.TargetAfter = after.State.String()
	if !after.Exists {
		r.TargetAfter = "none"
	}
	r.After = c.Compare(src.State, after.State)
	return r
}

// nothing is the mark-delete position of a subscription that does not
// exist: before every entry.
var nothing = marker.Position{Ledger: -1, Entry: -1, Batch: -1}

// predict is the state plan leaves s in (a dry run's After).
func predict(s State, plan Plan) State {
	out := State{MarkDelete: s.MarkDelete, Acked: slices.Clone(s.Acked)}
	if plan.HasMarkDelete && plan.MarkDelete.Compare(out.MarkDelete) > 0 {
		out.MarkDelete = plan.MarkDelete
	}
	for _, p := range plan.Individually {
		out.Acked = append(out.Acked, Range{After: marker.Position{Ledger: p.Ledger, Entry: p.Entry - 1, Batch: -1}, Through: p})
	}
	return out
}
