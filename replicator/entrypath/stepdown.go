package entrypath

// The step-down: an active session whose remote has had no working link
// for too long (stepDownAfter) closes its cursor, so that another
// instance may copy the partition, and the partition subscribes again
// once the remote answers. The partition's side is openTarget and
// awaitTarget; stepDown is the watch.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// openTarget opens the producer. An attempt that fails without an answer
// from the remote (no connection, no reply in time) is tried again in
// the session, with the cursor kept, until the step-down fires: ending
// the session instead would close and reopen the cursor at each attempt,
// flipping the partition between this instance and a standby that could
// copy it. A broker's refusal ends the session as before.
func (p *Partition) openTarget(ctx context.Context, epoch uint64, down *stepDown, active *atomic.Bool) (entryTarget, error) {
	down.arm()
	bo := cluster.NewBackoff(200*time.Millisecond, 5*time.Second)
	var last string
	for {
		dst, err := p.ends.openProducer(ctx, epoch, down.link)
		if err == nil {
			return dst, nil
		}
		down.note(err)
		var be *wire.BrokerError
		if ctx.Err() != nil || p.stepDownAfter <= 0 || errors.As(err, &be) || !wire.IsRetryable(err) {
			return nil, err
		}
		if !active.Load() {
			return nil, errStandby
		}
		if msg := err.Error(); msg != last {
			p.log.Warn("cannot open the producer on the remote, retrying", zap.String("remote", p.remote), zap.Error(err))
			last = msg
		}
		if !cluster.Sleep(ctx, bo.Next()) {
			return nil, context.Cause(ctx)
		}
	}
}

// awaitTarget waits, after a step-down, until the remote answers
// (reachTarget), asking with capped backoff; it reports false when ctx
// ended first. Each question is bounded by half the step-down bound, so
// that a blackholed link does not hold one for the client's 30 s.
func (p *Partition) awaitTarget(ctx context.Context) bool {
	bo := cluster.NewBackoff(500*time.Millisecond, 5*time.Second)
	var last string
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, max(p.stepDownAfter/2, time.Second))
		err := p.ends.reachTarget(qctx)
		cancel()
		if err == nil {
			p.log.Info("remote reachable again: resubscribing",
				zap.String("remote", p.remote), zap.Duration("stepped_down_for", time.Since(p.steppedDown).Round(time.Millisecond)))
			return true
		}
		if msg := err.Error(); msg != last && ctx.Err() == nil {
			p.log.Debug("remote still unreachable", zap.String("remote", p.remote), zap.Error(err))
			last = msg
		}
		cluster.Sleep(ctx, bo.Next())
	}
	return false
}

// stepDown ends an active session (fire) once its remote has had no
// working link for after: from the first attempt to open the producer
// until the producer reports its link up, and from each report of the
// link going down until the next of it coming up. It watches only while
// armed (the session holds or opens a producer): a standby has nothing
// to step down from, and a closing producer's last reports are ignored.
// Safe for concurrent use: link runs on the producer's goroutine.
//
// When the bound passes, the producer is asked first whether it gave up
// for good (gaveUp: its reconnect was refused with an error no retry
// changes, such as a terminated target topic): then the remote answers
// and refuses, so the session ends with that error (quit) rather than
// step down, which would only move the partition, or watch on in
// silence until the next entry. Then reachable (if set) asks the
// remote whether it answers from here (a fresh lookup and a connection
// that is not silent); if it does, the watch starts over instead of
// firing. Another instance would meet the same remote, so stepping down
// would only move the partition: a producer waiting its turn among
// thousands being opened at once (wire.ClientOptions.MaxOpens), or a
// broker slow to load the topic, is not a remote this instance cannot
// reach.
type stepDown struct {
	after     time.Duration // 0: never fire
	fire      func()
	reachable func(ctx context.Context) error
	// quit ends the session with the error its producer gave up on.
	quit func(err error)

	mu      sync.Mutex
	armed   bool
	stopped bool
	since   time.Time // no working link since; zero: a working link
	timer   *time.Timer
	lastErr error
	downed  time.Duration // how long the link had been down when fired
	// gaveUp, set while a producer is open (watchProducer), returns the
	// error it gave up on for good, nil while it has not.
	gaveUp func() error
}

// arm starts watching a producer being opened: there is no working link
// until it reports one.
func (s *stepDown) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
	s.lostLocked()
}

// link is the producer's onLink.
func (s *stepDown) link(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed {
		return
	}
	if up {
		s.since, s.lastErr = time.Time{}, nil
		s.stopTimer()
		return
	}
	s.lostLocked()
}

func (s *stepDown) lostLocked() {
	if s.stopped || s.after <= 0 {
		return
	}
	if s.since.IsZero() {
		s.since = time.Now()
	}
	if s.timer == nil {
		since := s.since
		s.timer = time.AfterFunc(time.Until(since.Add(s.after)), func() { s.due(since) })
	}
}

// due runs when the bound of the watch that began at since passed.
func (s *stepDown) due(since time.Time) {
	current := func() bool { return !s.stopped && s.armed && s.since == since }
	s.mu.Lock()
	ok := current()
	gaveUp := s.gaveUp
	s.mu.Unlock()
	if !ok {
		return
	}
	if gaveUp != nil && s.quit != nil {
		if err := gaveUp(); err != nil {
			s.mu.Lock()
			ok := current()
			s.mu.Unlock()
			if ok {
				s.quit(err)
			}
			return
		}
	}
	if s.reachable != nil {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.after/2, reachProbeTimeout))
		err := s.reachable(ctx)
		cancel()
		if err == nil {
			s.mu.Lock()
			if current() {
				s.timer = time.AfterFunc(s.after, func() { s.due(since) })
			}
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	if !current() {
		s.mu.Unlock()
		return
	}
	s.downed = time.Since(since)
	s.mu.Unlock()
	s.fire()
}

// reachProbeTimeout bounds the question whether the remote answers, asked
// when a step-down is due: a blackholed link delays the step-down by at
// most this much.
const reachProbeTimeout = 5 * time.Second

func (s *stepDown) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// note keeps err as the latest reason the link is not working.
func (s *stepDown) note(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
}

// disarm stops watching: the producer is being closed.
func (s *stepDown) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.since, s.gaveUp = false, time.Time{}, nil
	s.stopTimer()
}

// watchProducer lets a due step-down ask dst whether it gave up for good
// (see stepDown), until disarm.
func (s *stepDown) watchProducer(dst entryTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaveUp = func() error { return gaveUp(dst) }
}

// gaveUp returns the error dst gave up on for good, nil while it has not
// (or was closed): a Flush that may not wait returns at once the
// producer's terminal error, and otherwise nothing or its context's.
func gaveUp(dst entryTarget) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := dst.Flush(ctx)
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, wire.ErrClosed) {
		return nil
	}
	return err
}

// stop ends the watch for good (the session is over).
func (s *stepDown) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.stopTimer()
}

// downFor is how long the link had been down when the step-down fired.
func (s *stepDown) downFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downed
}

func (s *stepDown) lastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}
