package failback

// Failing back several topics in one run: operators fail a region over
// by namespace, not topic by topic, and a region's way home is the sum
// of its topics'. Each topic runs Run on its own, several at once: one
// topic failing never stops another, and the report says per topic what
// was done, and in total.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Topic is one topic of a run over several: its options, or the error
// that kept them from being built (its partitions could not be listed,
// say), which is reported as that topic's, nothing changed.
type Topic struct {
	Options Options
	Err     error
}

// Outcomes of a topic in a run over several.
const (
	TopicDone      = "done"      // Run's report is OK: the tail dealt with, the subscriptions in step
	TopicNotDone   = "not-done"  // something was changed, not everything is done
	TopicUnchanged = "unchanged" // it stopped before changing anything (Error says why)
)

// TopicResult is one topic's outcome and Run's report of it.
type TopicResult struct {
	Topic   string `json:"topic"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	Report  Report `json:"report"`
}

// Totals sum the topics' reports.
type Totals struct {
	Topics    int `json:"topics"`
	Done      int `json:"done"`
	NotDone   int `json:"not_done"`
	Unchanged int `json:"unchanged"`
	// Stranded is the tail over every topic (the region's RPO).
	Stranded RPO   `json:"stranded"`
	Copied   int64 `json:"copied"`
	// Again, Missed and Refused total the subscriptions' (switchover's).
	Again   int `json:"again"`
	Missed  int `json:"missed"`
	Refused int `json:"refused"`
}

// ManyReport is what RunMany found and did.
type ManyReport struct {
	From     string        `json:"from"`
	To       string        `json:"to"`
	Choice   string        `json:"choice"`
	DryRun   bool          `json:"dry_run"`
	Parallel int           `json:"parallel"`
	Topics   []TopicResult `json:"topics"`
	Total    Totals        `json:"total"`
	Next     string        `json:"next"`
	Seconds  float64       `json:"seconds"`
}

// Exit statuses of a run over several topics, as of one topic's.
const (
	ExitDone      = 0 // every topic done
	ExitNotDone   = 1 // something was changed, not everything is done
	ExitUnchanged = 2 // no topic changed anything, and not every topic is done
)

// Exit is the run's exit status: 0 when every topic is done; 2 when no
// topic changed anything (each one not done stopped before any change);
// 1 otherwise.
func (m ManyReport) Exit() int {
	switch {
	case m.OK():
		return ExitDone
	case m.Total.NotDone == 0 && !m.Changed():
		return ExitUnchanged
	}
	return ExitNotDone
}

// OK reports whether every topic is done.
func (m ManyReport) OK() bool { return m.Total.Done == m.Total.Topics }

// Changed reports whether any topic changed anything: a run over several
// topics is "nothing changed" only when none did.
func (m ManyReport) Changed() bool {
	for _, t := range m.Topics {
		if t.Report.Changed {
			return true
		}
	}
	return false
}

// RunMany fails back every topic, at most parallel at once (at least 1),
// each as Run does, writing each topic's progress lines to progress
// prefixed with its name. The result lists the topics in the order
// given.
func RunMany(ctx context.Context, from, to, choice string, dry bool, topics []Topic, parallel int, progress io.Writer) ManyReport {
	started := time.Now()
	parallel = max(parallel, 1)
	rep := ManyReport{From: from, To: to, Choice: choice, DryRun: dry, Parallel: parallel, Topics: make([]TopicResult, len(topics))}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex // progress
		sem = make(chan struct{}, parallel)
	)
	for i, t := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &rep.Topics[i]
			res.Topic = t.Options.Topic
			if t.Err != nil {
				res.Outcome, res.Error = TopicUnchanged, t.Err.Error()
				res.Report = Report{Topic: t.Options.Topic, From: from, To: to, Choice: choice, DryRun: dry,
					Next: "nothing was changed: " + t.Err.Error()}
				return
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				res.Outcome, res.Error = TopicUnchanged, ctx.Err().Error()
				res.Report = Report{Topic: t.Options.Topic, From: from, To: to, Choice: choice, DryRun: dry}
				return
			}
			defer func() { <-sem }()
			r, err := Run(ctx, t.Options, &prefixed{mu: &mu, w: progress, prefix: t.Options.Topic + ": "})
			res.Report = r
			// The outcomes are the exit statuses of a run of this topic
			// alone: 0, 1 (changed, or a subscription not in step), 2.
			var changed *Changed
			switch {
			case err == nil && r.OK():
				res.Outcome = TopicDone
			case err == nil || errors.As(err, &changed):
				res.Outcome = TopicNotDone
				if err != nil {
					res.Error = err.Error()
				}
			default:
				res.Outcome, res.Error = TopicUnchanged, err.Error()
			}
		}()
	}
	wg.Wait()
	for _, t := range rep.Topics {
		rep.Total.add(t)
	}
	rep.Total.Stranded.finish()
	switch {
	case rep.OK() && dry:
		rep.Next = "run again without --dry-run"
	case rep.OK():
		rep.Next = fmt.Sprintf("every topic is done: %s", nextOf(rep.Topics))
	default:
		rep.Next = fmt.Sprintf("%d of %d topics are not done (see each topic's next); run again for them once the cause is gone: what is done is found done",
			rep.Total.Topics-rep.Total.Done, rep.Total.Topics)
	}
	rep.Seconds = time.Since(started).Seconds()
	return rep
}

func (t *Totals) add(r TopicResult) {
	t.Topics++
	switch r.Outcome {
	case TopicDone:
		t.Done++
	case TopicNotDone:
		t.NotDone++
	default:
		t.Unchanged++
	}
	for i := range r.Report.Stranded {
		s := r.Report.Stranded[i]
		t.Stranded.add(&s)
	}
	t.Copied += r.Report.Copied
	if s := r.Report.Subscriptions; s != nil {
		t.Again += s.Again
		t.Missed += s.Missed
		t.Refused += s.Refused
	}
}

// nextOf is the topics' common next step, or the first when they
// differ (each topic's is in its report).
func nextOf(ts []TopicResult) string {
	seen := map[string]int{}
	for _, t := range ts {
		seen[t.Report.Next]++
	}
	if len(seen) == 1 {
		return ts[0].Report.Next
	}
	return "see each topic's next"
}

// prefixed writes each line to w behind prefix, one writer at a time.
type prefixed struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i]); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
}
