package drill

// The exact drill (Options.Exact, geo-sidecar drill --exact): at the
// switch the subscription in To is brought to the one in From with
// switchover's plan, the mark-delete position and every acknowledgement
// past it, rather than followed to the newest snapshot. A drill that
// acknowledges out of order (Shared: in shuffled windows) leaves holes
// that the follow cannot carry, and a switch then delivers them again;
// the exact move carries them, so the drill shows what a planned
// switchover delivers again and misses: nothing.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// retryExact is how long exactSwitch waits between tries while the
// switchover's preconditions do not hold yet.
const retryExact = 500 * time.Millisecond

// exactSwitch moves sub to To with sw from the switch, at, while p marks
// the ends for the RPO: it tries until the switchover ran (its
// preconditions held: the copy proven complete, no producer of the
// application, no consumer attached) or o.InStepWait is over, and
// records in rep the switchover's report, in step (every partition
// moved or in step, nothing to receive again or miss), and the RTO (from
// the switch until the move was done).
func exactSwitch(ctx context.Context, rep *Report, at time.Time, p Prover, sw Switcher, o Options, sub string,
	say func(string, ...any)) mark {
	limit := o.InStepWait
	if limit <= 0 {
		limit = waitLimit
	}
	st, m := whileMarking(ctx, at, p, say, func() inStep {
		var st inStep
		lines := &lineSayer{say: say, prefix: "  switchover: "}
		for tries := 1; ; tries++ {
			sr, err := sw.Switch(ctx, sub, lines)
			lines.flush()
			st.waited = time.Since(at)
			if err == nil {
				rep.Switchover = &sr
				st.inStep = sr.OK()
				st.trailing = int64(sr.Again + sr.Missed + sr.Refused)
				st.closestAfter = st.waited
				return st
			}
			retry := errors.Is(err, switchover.ErrNotProven) || errors.Is(err, switchover.ErrConsumers) || errors.Is(err, switchover.ErrNotQuiet)
			if !retry || time.Since(at)+retryExact >= limit || ctx.Err() != nil {
				say("the exact move did not run (try %d, %.1fs after the switch): %v", tries, st.waited.Seconds(), err)
				sr.Next = err.Error()
				rep.Switchover = &sr
				st.gaveUp = true
				return st
			}
			say("  the exact move waits (try %d): %v", tries, err)
			select {
			case <-ctx.Done():
			case <-time.After(retryExact):
			}
		}
	})
	rep.InStep, rep.Trailing, rep.GaveUp = st.inStep, st.trailing, st.gaveUp
	rep.InStepSeconds, rep.WaitedSeconds = st.closestAfter.Seconds(), st.waited.Seconds()
	rep.RTO = rtoOf(st)
	switch s := rep.Switchover; {
	case st.gaveUp:
	case st.inStep:
		say("moved exactly: %s in %s is at its state in %s on every partition (would receive again %d, miss %d)", sub, o.To, o.From, s.Again, s.Missed)
	default:
		say("the exact move left %s not in step: would receive again %d, miss %d, refused %d (resuming all the same)", sub, s.Again, s.Missed, s.Refused)
	}
	return m
}

// lineSayer passes each whole line written to it on to say, behind
// prefix.
type lineSayer struct {
	mu     sync.Mutex
	say    func(string, ...any)
	prefix string
	buf    []byte
}

func (l *lineSayer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		l.say("%s%s", l.prefix, l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func (l *lineSayer) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.say("%s%s", l.prefix, l.buf)
		l.buf = nil
	}
}

var _ io.Writer = (*lineSayer)(nil)
