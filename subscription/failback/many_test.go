package failback

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingFinder is fakeFinder that counts the Finds under way at once.
type countingFinder struct {
	fakeFinder
	now, most *atomic.Int32
}

func (f countingFinder) Find(ctx context.Context, add func(string, Entry)) ([]End, error) {
	n := f.now.Add(1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	defer f.now.Add(-1)
	return f.fakeFinder.Find(ctx, add)
}

// TestRunMany: every topic runs as Run does, at most parallel at once;
// one topic's failure stops no other; each topic's outcome is what its
// own run's exit status would be, and the run's exit status is 0 only
// when every topic is done, 2 only when no topic changed anything.
func TestRunMany(t *testing.T) {
	type topic struct {
		choice  string
		tail    bool
		busy    bool  // the pair running: unchanged
		err     error // the options could not be built: unchanged
		upTo    int   // the copy fails after this many: not done
		there   bool  // the pair's cursor at the end already
		outcome string
	}
	for _, tc := range []struct {
		name     string
		topics   []topic
		parallel int
		exit     int
		copied   int64
		stranded int64
	}{
		{"all done", []topic{{choice: Replay, tail: true, outcome: TopicDone}, {choice: Park, tail: true, outcome: TopicDone},
			{choice: Leave, tail: true, outcome: TopicDone}}, 2, ExitDone, 10, 15},
		{"one unchanged, the others changed", []topic{{choice: Replay, tail: true, outcome: TopicDone},
			{choice: Replay, tail: true, busy: true, outcome: TopicUnchanged}, {choice: Replay, tail: true, outcome: TopicDone}},
			3, ExitNotDone, 10, 10},
		{"one unchanged, the other changed nothing", []topic{{choice: Leave, there: true, outcome: TopicDone},
			{choice: Replay, err: errors.New("partitions of t1: connection refused"), outcome: TopicUnchanged}}, 1, ExitUnchanged, 0, 0},
		{"no choice for a tail: unchanged", []topic{{tail: true, outcome: TopicUnchanged}, {tail: true, outcome: TopicUnchanged}},
			4, ExitUnchanged, 0, 10},
		{"a copy fails part-way", []topic{{choice: Park, tail: true, upTo: 2, outcome: TopicNotDone},
			{choice: Park, tail: true, outcome: TopicDone}}, 1, ExitNotDone, 7, 10},
		{"many at once", func() []topic {
			var ts []topic
			for range 12 {
				ts = append(ts, topic{choice: Replay, tail: true, outcome: TopicDone})
			}
			return ts
		}(), 4, ExitDone, 60, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now, most atomic.Int32
			var ts []Topic
			for i, x := range tc.topics {
				var tail []Entry
				if x.tail {
					tail = theTail()
				}
				busy := 0
				if x.busy {
					busy = 1
				}
				o := options(x.choice, countingFinder{fakeFinder{tail: tail}, &now, &most}, &fakeCopier{upTo: x.upTo},
					&fakePair{consumers: busy, there: x.there}, eastCluster(), false)
				o.Topic = "t" + string(rune('a'+i))
				ts = append(ts, Topic{Options: o, Err: x.err})
			}
			var progress bytes.Buffer
			var mu sync.Mutex
			rep := RunMany(context.Background(), "east", "west", "", false, ts, tc.parallel, &lockedWriter{mu: &mu, w: &progress})
			if got := rep.Exit(); got != tc.exit {
				t.Errorf("exit %d, want %d: %+v", got, tc.exit, rep.Total)
			}
			for i, x := range tc.topics {
				r := rep.Topics[i]
				if r.Topic != ts[i].Options.Topic || r.Outcome != x.outcome {
					t.Errorf("topic %d: %s %s (%s), want %s %s", i, r.Topic, r.Outcome, r.Error, ts[i].Options.Topic, x.outcome)
				}
				if r.Outcome == TopicUnchanged && (r.Error == "" || r.Report.Changed) {
					t.Errorf("%s unchanged: error %q, changed %v", r.Topic, r.Error, r.Report.Changed)
				}
			}
			if rep.Total.Topics != len(tc.topics) || rep.Total.Copied != tc.copied || rep.Total.Stranded.Entries != tc.stranded {
				t.Errorf("totals %+v, want %d topics, %d copied, %d stranded", rep.Total, len(tc.topics), tc.copied, tc.stranded)
			}
			if tc.stranded > 0 && rep.Total.Stranded.Seconds != 0.4 {
				t.Errorf("the tail over the topics spans %v s, want 0.4", rep.Total.Stranded.Seconds)
			}
			if m := int(most.Load()); m > tc.parallel || len(tc.topics) >= 2*tc.parallel && m < tc.parallel {
				t.Errorf("%d topics ran at once, want %d", m, tc.parallel)
			}
			for _, l := range strings.Split(strings.TrimSpace(progress.String()), "\n") {
				if l != "" && !strings.HasPrefix(l, "t") {
					t.Errorf("a progress line without its topic: %q", l)
				}
			}
			if rep.Next == "" {
				t.Error("no next step said")
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
