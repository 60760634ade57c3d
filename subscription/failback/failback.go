// Package failback brings a topic home after an unplanned failover
// (geo-sidecar failback): east went down, its consumers moved to west,
// and east is back. Three things stand between the operator and going
// home, and this package does them in order, each timed:
//
//  1. The stranded tail: the entries east holds that never reached west
//     (east stored them, then went down before the sidecar copied them).
//     Nobody else sees them: west's consumers never received them, and
//     moving east's subscriptions to west's state would pass them by.
//     The tail is what the proof of the copy east→west (verify) finds
//     not held on west, per partition: its count, positions and publish
//     times, the failover's RPO.
//  2. What to do with it, chosen by the operator and never by default:
//     copy it to west late (Replay, each copy flagged
//     geo-sidecar.replayed-late=true, on every message of a batch;
//     an encrypted batch, which cannot be flagged so, is refused), park it in a topic aside (Park),
//     or leave it where it is (Leave). Without a choice it reports and
//     stops. Either way the pair east→west's cursor is then moved past
//     it, so that the sidecar does not copy it later on its own.
//  3. The subscriptions named: east's brought to west's exact state (the
//     mark-delete position and the ranges acknowledged past it), as
//     geo-sidecar switchover does, the other way round (west→east), once
//     the pair west→east is proven drained (verify). The stranded tail
//     is kept unconsumed on east under Leave, consumed under Park (it is
//     in the park topic), and under Replay follows its late copies'
//     state on west.
//
// This file is the core: the tail's accounting, the steps and the
// report, over small interfaces (the proof's walk, the copier, the
// pair's cursor, switchover.Run's clusters) that the command implements
// with verify, wire and the admin API and that tests fake.
package failback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// Choices of what to do with the stranded tail.
const (
	Replay = "replay" // copy it to the same partition on west, late and flagged
	Park   = "park"   // copy it to a topic aside
	Leave  = "leave"  // leave it on east, unconsumed by the subscriptions named
)

// Entry is one entry of the stranded tail.
type Entry struct {
	Pos         marker.Position
	PublishTime int64 // Unix milliseconds
	Messages    int32
	// Sealed: an encrypted batch. A late copy flags every message of a
	// batch (consumers see a batched message's own properties, not the
	// entry's), which an encrypted payload does not allow: Replay
	// refuses it (ErrSealed), Park copies it flagged on the entry only.
	Sealed bool
}

// End is how far a partition was walked on east: Source is east's last
// entry when the walk began (HasSource false: none).
type End struct {
	Partition string
	Source    marker.Position
	HasSource bool
}

// Finder walks the copy east→west to the ends both sides have when it
// starts and tells add, from its own goroutine and in east's order per
// partition, of every entry east holds that west holds no copy of with
// its bytes. It returns the ends walked.
type Finder interface {
	Find(ctx context.Context, add func(partition string, e Entry)) ([]End, error)
}

// Copier copies entries of an east partition, read again through end,
// to where the choice says (west's same partition, or the park topic),
// each as the entry pipe would with the late flags (entryrule.LateCopy:
// on every message of a batch). It returns how many it copied; an error
// part-way says so with the count so far.
type Copier interface {
	Copy(ctx context.Context, partition string, end marker.Position, entries []marker.Position) (int, error)
}

// Pair is the sidecar's pair east→west as seen on east: its cursor
// (a durable subscription) on each partition.
type Pair interface {
	// Attached counts the consumers attached to the cursor of partition:
	// more than none, the pair is running and copies the tail itself.
	Attached(ctx context.Context, partition string) (int, error)
	// Advance moves the cursor of partition forward to to (never back);
	// moved is false when it was there or past it already.
	Advance(ctx context.Context, partition string, to marker.Position) (moved bool, err error)
}

// Options say what to fail back.
type Options struct {
	Topic string
	// From is the cluster that came back (east), To the one that took over
	// (west).
	From, To   string
	Partitions []string
	// Choice is Replay, Park, Leave or "" (report only).
	Choice string
	// ParkTopic and ParkOn (a cluster: From or To) say where Park copies.
	ParkTopic, ParkOn string
	DryRun            bool
	Finder            Finder
	Copier            Copier // for Replay and Park
	Pair              Pair
	// Switchover, when it names subscriptions, is switchover.Run's options
	// for west→east (Source the cluster To, Target From; the Prover
	// proves the pair west→east and maps copies both ways); Run sets its
	// Leave, Consume and DryRun.
	Switchover switchover.Options
}

// Stranded is one partition's stranded tail.
type Stranded struct {
	Partition string `json:"partition"`
	Entries   int64  `json:"entries"`
	Messages  int64  `json:"messages"`
	// First and Last are the positions on east ("ledger:entry") of the
	// first and the last entry, and their publish times (RFC 3339).
	First            string `json:"first"`
	Last             string `json:"last"`
	FirstPublishTime string `json:"first_publish_time"`
	LastPublishTime  string `json:"last_publish_time"`
	// Copied: how many were copied (Replay, Park).
	Copied int64 `json:"copied"`
	// Sealed: how many are encrypted batches (Entry.Sealed), and the
	// first of them.
	Sealed      int64  `json:"sealed,omitempty"`
	FirstSealed string `json:"first_sealed,omitempty"`

	positions         []marker.Position
	firstPub, lastPub int64
	firstPos, lastPos marker.Position
}

// RPO is the stranded tail over every partition: what the failover left
// behind.
type RPO struct {
	Entries  int64 `json:"entries"`
	Messages int64 `json:"messages"`
	// Sealed: how many of the entries are encrypted batches.
	Sealed int64 `json:"sealed,omitempty"`
	// FirstPublishTime and LastPublishTime (RFC 3339) bound it; Seconds
	// is the traffic between them.
	FirstPublishTime string  `json:"first_publish_time,omitempty"`
	LastPublishTime  string  `json:"last_publish_time,omitempty"`
	Seconds          float64 `json:"seconds"`

	firstPub, lastPub int64 // Unix milliseconds
}

// Step is one step's outcome and time.
type Step struct {
	Name    string  `json:"name"`
	Outcome string  `json:"outcome"`
	Seconds float64 `json:"seconds"`
}

// Steps.
const (
	StepTail          = "stranded-tail" // the walk east→west
	StepCopy          = "copy-tail"     // Replay or Park
	StepPair          = "pair-cursor"   // the pair east→west's cursor moved past the tail
	StepSubscriptions = "subscriptions" // switchover west→east
)

// Report is what Run found and did.
type Report struct {
	Topic     string `json:"topic"`
	From      string `json:"from"`
	To        string `json:"to"`
	Choice    string `json:"choice"`
	ParkTopic string `json:"park_topic,omitempty"`
	ParkOn    string `json:"park_on,omitempty"`
	DryRun    bool   `json:"dry_run"`
	// Stranded lists every partition, with a tail or not.
	Stranded []Stranded `json:"stranded"`
	RPO      RPO        `json:"rpo"`
	// Copied totals Stranded's.
	Copied int64 `json:"copied"`
	// Tail says in a sentence what became of the stranded tail.
	Tail string `json:"tail"`
	// Subscriptions is the switchover west→east's report (nil when no
	// subscription was named, or it was not reached).
	Subscriptions *switchover.Report `json:"subscriptions,omitempty"`
	Steps         []Step             `json:"steps"`
	Next          string             `json:"next"`
	Seconds       float64            `json:"seconds"`
	// Changed: something was copied, a cursor or a subscription moved (a
	// move that failed counts: it may have moved part). A run over several
	// topics exits "nothing changed" only when no topic changed anything.
	Changed bool `json:"changed"`
}

// OK reports whether everything asked was done: the tail dealt with as
// chosen, and every subscription named in step.
func (r Report) OK() bool {
	return (r.Choice != "" || r.RPO.Entries == 0) && (r.Subscriptions == nil || r.Subscriptions.OK())
}

// ErrNoChoice: entries are stranded and no choice says what to do with
// them; nothing was changed.
var ErrNoChoice = errors.New("entries are stranded on the cluster that came back: choose --replay, --park or --leave")

// ErrSealed: Replay was chosen and the stranded tail holds encrypted
// batches, whose messages a late copy cannot flag one by one (their
// metadata is inside the encrypted payload): copied, they would reach
// west's consumers as if in time. Nothing was changed.
var ErrSealed = errors.New("the stranded tail holds encrypted batches, whose messages cannot be flagged late one by one")

// ErrPairRunning: the sidecar's pair east→west is attached to its
// cursor: it would copy the tail itself, unflagged, beside the failback.
var ErrPairRunning = errors.New("the sidecar's pair is running")

// Changed wraps an error that came after Run changed something (copied,
// moved a cursor or a subscription): the report says what.
type Changed struct{ Err error }

func (c *Changed) Error() string { return c.Err.Error() + " (after changes: see the report)" }
func (c *Changed) Unwrap() error { return c.Err }

// Run fails back, writing progress lines to progress. An error before
// anything changed is returned as is; one after is wrapped in *Changed.
func Run(ctx context.Context, o Options, progress io.Writer) (rep Report, err error) {
	started := time.Now()
	rep = Report{Topic: o.Topic, From: o.From, To: o.To, Choice: o.Choice, DryRun: o.DryRun}
	if o.Choice == Park {
		rep.ParkTopic, rep.ParkOn = o.ParkTopic, o.ParkOn
	}
	changed := false
	defer func() {
		rep.Seconds = time.Since(started).Seconds()
		rep.Changed = changed || subscriptionsChanged(rep.Subscriptions)
	}()
	say := func(format string, a ...any) { fmt.Fprintf(progress, format+"\n", a...) }
	fail := func(e error) error {
		if changed {
			return &Changed{Err: e}
		}
		return e
	}
	step := func(name string, t0 time.Time, outcome string) {
		rep.Steps = append(rep.Steps, Step{Name: name, Outcome: outcome, Seconds: time.Since(t0).Seconds()})
	}

	// 0. The pair east→west must be stopped: running, it copies the tail
	// itself (unflagged) while the failback decides.
	for _, part := range o.Partitions {
		n, err := o.Pair.Attached(ctx, part)
		if err != nil {
			return rep, fmt.Errorf("%s: the pair's cursor on %s: %w", o.From, part, err)
		}
		if n > 0 {
			rep.Next = fmt.Sprintf("stop the sidecar's pair %s→%s (geo-sidecar run --cluster %s) and run again: it would copy the stranded tail to %s on its own, unflagged",
				o.From, o.To, o.From, o.To)
			return rep, fmt.Errorf("%w: %d consumers on its cursor of %s on %s", ErrPairRunning, n, part, o.From)
		}
	}

	// 1. The stranded tail.
	t0 := time.Now()
	say("walking the copy %s→%s of %s for entries %s holds and %s does not", o.From, o.To, o.Topic, o.From, o.To)
	tails := map[string]*Stranded{}
	for _, part := range o.Partitions {
		tails[part] = &Stranded{Partition: part}
	}
	ends, err := o.Finder.Find(ctx, func(part string, e Entry) {
		s := tails[part]
		if s == nil {
			s = &Stranded{Partition: part}
			tails[part] = s
		}
		s.add(e)
	})
	if err != nil {
		rep.Next = "the stranded tail could not be read; nothing was changed"
		return rep, fmt.Errorf("find the stranded tail: %w", err)
	}
	for _, part := range o.Partitions {
		s := tails[part]
		s.finish()
		rep.Stranded = append(rep.Stranded, *s)
		rep.RPO.add(s)
	}
	rep.RPO.finish()
	step(StepTail, t0, fmt.Sprintf("%d entries (%d messages) stranded on %s", rep.RPO.Entries, rep.RPO.Messages, o.From))
	say("stranded on %s: %d entries, %d messages", o.From, rep.RPO.Entries, rep.RPO.Messages)

	// 2. What to do with it.
	if o.Choice == "" {
		if rep.RPO.Entries > 0 {
			rep.Tail = fmt.Sprintf("%d entries stranded on %s, left as they are: no choice was made", rep.RPO.Entries, o.From)
			rep.Next = fmt.Sprintf("choose what to do with the %d stranded entries and run again: --replay (copy them to %s late, flagged %s=true), --park TOPIC (copy them aside) or --leave (leave them on %s for its consumers)",
				rep.RPO.Entries, o.To, marker.PropReplayedLate, o.From)
			return rep, ErrNoChoice
		}
	}
	if o.Choice == Replay && rep.RPO.Sealed > 0 {
		first := ""
		for _, s := range rep.Stranded {
			if s.Sealed > 0 {
				first = s.Partition + " " + s.FirstSealed
				break
			}
		}
		rep.Tail = fmt.Sprintf("%d entries stranded on %s, left as they are: %d are encrypted batches (the first at %s), which --replay cannot flag message by message",
			rep.RPO.Entries, o.From, rep.RPO.Sealed, first)
		rep.Next = fmt.Sprintf("choose --park TOPIC (the tail copied aside, where every message is known late; an encrypted batch's messages carry the flags on the entry only) or --leave (left on %s for its consumers) and run again",
			o.From)
		return rep, fmt.Errorf("%w: %d of %d entries, the first at %s", ErrSealed, rep.RPO.Sealed, rep.RPO.Entries, first)
	}
	t0 = time.Now()
	switch {
	case rep.RPO.Entries == 0:
		rep.Tail = "nothing stranded on " + o.From
	case o.Choice == Leave:
		rep.Tail = fmt.Sprintf("%d entries left on %s as they are, not copied: east's subscriptions named keep them unconsumed", rep.RPO.Entries, o.From)
	case o.DryRun:
		rep.Tail = fmt.Sprintf("%d entries would be copied (%s)", rep.RPO.Entries, o.Choice)
	default:
		for i := range rep.Stranded {
			s := &rep.Stranded[i]
			if s.Entries == 0 {
				continue
			}
			n, err := o.Copier.Copy(ctx, s.Partition, s.lastPos, s.positions)
			s.Copied = int64(n)
			rep.Copied += int64(n)
			if n > 0 {
				changed = true
			}
			if err == nil && int64(n) != s.Entries {
				err = fmt.Errorf("%d of %d entries copied", n, s.Entries)
			}
			if err != nil {
				step(StepCopy, t0, "failed")
				rep.Tail = fmt.Sprintf("%d of %d stranded entries copied (%s) before an error", rep.Copied, rep.RPO.Entries, o.Choice)
				rep.Next = "run again: the entries copied are found copied (replay) or parked; the others are still on " + o.From
				return rep, fail(fmt.Errorf("copy the stranded tail of %s: %w", s.Partition, err))
			}
			say("%s: %d stranded entries copied (%s)", s.Partition, n, o.Choice)
		}
		where := o.To + "'s same partitions, every message flagged " + marker.PropReplayedLate + "=true"
		if o.Choice == Park {
			where = o.ParkTopic + " on " + o.ParkOn
		}
		rep.Tail = fmt.Sprintf("%d entries copied to %s", rep.Copied, where)
		if rep.RPO.Sealed > 0 {
			rep.Tail += fmt.Sprintf("; %d of them encrypted batches, whose messages carry the flags on the entry only (consumers do not see them per message)", rep.RPO.Sealed)
		}
		step(StepCopy, t0, fmt.Sprintf("%d entries copied", rep.Copied))
	}

	// 3. The pair's cursor past everything walked: what it left behind is
	// dealt with as chosen, the rest is on west.
	if !o.DryRun {
		t0 = time.Now()
		moved, walked := 0, 0
		for _, e := range ends {
			if !e.HasSource {
				continue
			}
			walked++
			m, err := o.Pair.Advance(ctx, e.Partition, e.Source)
			if err != nil {
				step(StepPair, t0, "failed")
				rep.Next = "run again; until the pair's cursor is past the stranded tail, do not start the pair " + o.From + "→" + o.To + ": it would copy the tail again"
				return rep, fail(fmt.Errorf("move the pair's cursor on %s to %s: %w", e.Partition, e.Source, err))
			}
			if m {
				changed = true
				moved++
			}
		}
		step(StepPair, t0, fmt.Sprintf("moved to the end walked on %d of %d partitions (the others were there already)", moved, walked))
	}

	// 4. The subscriptions, west's state onto east.
	if len(o.Switchover.Subscriptions) > 0 {
		t0 = time.Now()
		so := o.Switchover
		so.DryRun = o.DryRun
		so.Leave, so.Consume = map[string][]marker.Position{}, map[string][]marker.Position{}
		for _, s := range rep.Stranded {
			switch rep.Choice {
			case Leave, Replay:
				// Replay: the late copies map the tail (the Prover's walk
				// east→west), consumed on east where consumed on west;
				// left too, so that a copy the walk does not map (or a
				// dry run's, not made) keeps its entry unconsumed
				// rather than passed by the mark-delete position.
				so.Leave[s.Partition] = s.positions
			case Park:
				so.Consume[s.Partition] = s.positions
			}
		}
		say("bringing %v on %s to their state on %s", so.Subscriptions, o.From, o.To)
		sr, err := switchover.Run(ctx, so, progress)
		rep.Subscriptions = &sr
		if err != nil {
			step(StepSubscriptions, t0, "not moved")
			rep.Next = sr.Next
			return rep, fail(fmt.Errorf("subscriptions: %w", err))
		}
		outcome := fmt.Sprintf("again %d, missed %d, refused %d", sr.Again, sr.Missed, sr.Refused)
		step(StepSubscriptions, t0, outcome)
		rep.Next = sr.Next
		if sr.OK() {
			rep.Next = fmt.Sprintf("start the consumers on %s: they receive exactly what was not acknowledged on %s", o.From, o.To)
			if rep.Choice == Leave && rep.RPO.Entries > 0 {
				rep.Next += fmt.Sprintf(", and the %d stranded entries left on %s", rep.RPO.Entries, o.From)
			}
		}
		return rep, nil
	}
	switch {
	case o.DryRun:
		rep.Next = "run again without --dry-run"
	default:
		rep.Next = fmt.Sprintf("the stranded tail is dealt with; to bring consumers home, stop them and the producers on %s and run again with --subscription", o.To)
	}
	return rep, nil
}

// subscriptionsChanged reports whether the switchover moved anything, or
// may have (a move that failed).
func subscriptionsChanged(r *switchover.Report) bool {
	if r == nil || r.DryRun {
		return false
	}
	for _, res := range r.Results {
		if res.Outcome == switchover.Moved || res.Outcome == switchover.MoveFailed {
			return true
		}
	}
	return false
}

func (s *Stranded) add(e Entry) {
	if s.Entries == 0 {
		s.firstPos, s.firstPub = e.Pos, e.PublishTime
	}
	s.Entries++
	s.Messages += int64(max(e.Messages, 1))
	if e.Sealed {
		if s.Sealed == 0 {
			s.FirstSealed = at(e.Pos)
		}
		s.Sealed++
	}
	s.lastPos, s.lastPub = e.Pos, e.PublishTime
	s.positions = append(s.positions, e.Pos)
}

func (s *Stranded) finish() {
	if s.Entries == 0 {
		return
	}
	s.First, s.Last = at(s.firstPos), at(s.lastPos)
	s.FirstPublishTime, s.LastPublishTime = rfc3339(s.firstPub), rfc3339(s.lastPub)
}

func (r *RPO) add(s *Stranded) {
	if s.Entries == 0 {
		return
	}
	if r.Entries == 0 || s.firstPub < r.firstPub {
		r.firstPub = s.firstPub
	}
	if r.Entries == 0 || s.lastPub > r.lastPub {
		r.lastPub = s.lastPub
	}
	r.Entries += s.Entries
	r.Messages += s.Messages
	r.Sealed += s.Sealed
}

func (r *RPO) finish() {
	if r.Entries > 0 {
		r.FirstPublishTime, r.LastPublishTime = rfc3339(r.firstPub), rfc3339(r.lastPub)
		r.Seconds = float64(r.lastPub-r.firstPub) / 1000
	}
}

func at(p marker.Position) string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }

func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
