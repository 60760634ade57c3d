package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// ---- backlog drain --------------------------------------------------------
//
// The drain rows time a replicator copying a backlog that already exists:
// the replicator's own speed, with no producer competing for the cores.
// Each arm of a round starts from the same state: a fresh topic, a backlog
// of DrainMessages published while its replicator could not deliver, the
// Settle pause, then the release. The arms run one after the other (their
// order rotating between rounds), each deleting its topic afterwards, so
// no arm's backlog waits on disk while another arm drains.

// drainCursor is the sidecar's cursor on a drain topic: the default
// cursor_prefix and the target's name.
const drainCursor = "geo-sidecar.repl.west"

// drainRound is one arm of one drain round.
type drainRound struct {
	Arm    string
	Round  int
	Msgs   int
	Leaked int64 // reached west while the replicator was held
	// Startup is the release (built-in) or the process start (sidecar)
	// to the first message on west.
	Startup time.Duration
	// Dur is the release or the process start to the last message on
	// west: Startup plus the copy.
	Dur time.Duration
	CPU time.Duration // the sidecar process's, start to the last message
	HWM int64
	Use window // the machine and the brokers from the release to the last message
	// Publish is each broker's mean publish latency over the round, ms
	// (meanLatency); a broker that took no message is missing.
	Publish map[string]float64
	// Log is the sidecar's log while the run lasts (a sidecar arm).
	Log string
	// Slow says why the round took more than twice its arm's median
	// (flagSlow); empty if it did not.
	Slow string
	// Kept is where a slow round's sidecar log was kept.
	Kept string
	// Run is what the sidecar process used (a sidecar arm).
	Run sidecarRun
	// Verify: geo-sidecar verify over this backlog once drained (the
	// sidecar's arm of the first round of the first shape).
	Verify *verifyRun
}

// copyTime is the replicator's copy: its first message on west to its last.
func (d drainRound) copyTime() time.Duration { return d.Dur - d.Startup }

// rate is the replicator's copy speed: the messages it copied (the backlog
// less what leaked while held) per second of copyTime; 0 when the copy
// was too short for the 50 ms polling to tell.
func (d drainRound) rate() float64 {
	c := d.copyTime()
	if c <= 0 {
		return 0
	}
	return float64(int64(d.Msgs)-d.Leaked) / c.Seconds()
}

type drainResult struct {
	Messages, Partitions int
	Rounds               []drainRound
	Sidecar              sidecarRun
	// Verify is geo-sidecar verify over the first round's drained
	// backlog; nil when it was not run.
	Verify *verifyRun
}

// drainArms are the arms of a drain round: the built-in, the sidecar and,
// with -versus, the second binary.
func (e *env) drainArms() []string {
	arms := []string{armBuiltin, armSidecar}
	if e.o.Versus != "" {
		arms = append(arms, armVersus)
	}
	return arms
}

// drains runs the drain rows, one per shape (sizes.DrainShapes); do runs
// a workload as run does. geo-sidecar verify runs in the first shape.
func (e *env) drains(rep *report, do func(string, func() error)) {
	o := e.o
	for i, parts := range o.Sizes.DrainShapes {
		e.logf("== backlog drain, %d partition(s): %d messages per arm per round, %d rounds", parts, o.Sizes.DrainMessages, o.Sizes.Rounds)
		do(fmt.Sprintf("drain%d", parts), func() error {
			d, err := e.drain(parts, i == 0)
			if err == nil {
				rep.Drain = append(rep.Drain, d)
			}
			return err
		})
	}
}

// drain measures how long each arm takes to copy a backlog of
// DrainMessages on a topic of parts partitions, Rounds times, then flags
// the slow rounds and keeps their sidecar logs. verify runs geo-sidecar
// verify after the sidecar's arm of the first round.
func (e *env) drain(parts int, verify bool) (*drainResult, error) {
	n := e.o.Sizes.DrainMessages
	res := &drainResult{Messages: n, Partitions: parts}
	for r := range e.o.Sizes.Rounds {
		for _, arm := range order(r, e.drainArms()...) {
			try := 0
			var dr drainRound
			err := e.attempt(fmt.Sprintf("drain p%d round %d %s", parts, r+1, arm), func() error {
				try++
				var err error
				dr, err = e.drainArm(parts, r, try, arm, verify && r == 0)
				return err
			})
			if err != nil {
				return nil, err
			}
			res.Rounds = append(res.Rounds, dr)
			if dr.Verify != nil {
				res.Verify = dr.Verify
			}
			if arm == armSidecar {
				run := dr.Run
				res.Sidecar.CPU += run.CPU
				res.Sidecar.Messages += run.Messages
				res.Sidecar.PeakRSS = max(res.Sidecar.PeakRSS, run.PeakRSS)
				res.Sidecar.Threads = max(res.Sidecar.Threads, run.Threads)
				res.Sidecar.Goroutines = max(res.Sidecar.Goroutines, run.Goroutines)
			}
		}
	}
	flagSlow(res.Rounds)
	e.keepSlowLogs(res)
	return res, nil
}

// holdArm makes topic's replicator unable to deliver before its backlog
// is built: the built-in's namespace gets the hold rate (replicatorHold)
// before the topic exists; a sidecar arm's cursor subscription is created
// with no sidecar running. It creates the topic on both clusters.
func (e *env) holdArm(arm, topic string, parts int) error {
	if arm == armBuiltin {
		ns, err := utils.GetNamespaceName(e.ns(nsBDrain))
		if err != nil {
			return err
		}
		if err := e.eastAdm.Namespaces().SetReplicatorDispatchRate(*ns, replicatorHold); err != nil {
			return fmt.Errorf("hold the built-in replicator: %w", err)
		}
		time.Sleep(time.Second) // the policy reaches the broker's namespace cache
	}
	if err := e.createTopic(topic, parts, "east", "west"); err != nil {
		return err
	}
	if arm == armBuiltin {
		return nil
	}
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	if err := e.eastAdm.Subscriptions().Create(*tn, drainCursor, utils.Earliest); err != nil && !isConflict(err) {
		return fmt.Errorf("create the sidecar's cursor: %w", err)
	}
	return nil
}

// releaseArm lets topic's replicator go: it lifts the built-in's hold
// (release), or starts the arm's sidecar binary on topic (short, its
// name in the sidecar namespace). It returns the moment the arm's time
// starts: the release, or the sidecar's process start.
func (e *env) releaseArm(arm, topic, short string) (time.Time, *sidecar, error) {
	if arm == armBuiltin {
		ns, err := utils.GetNamespaceName(e.ns(nsBDrain))
		if err != nil {
			return time.Time{}, nil, err
		}
		start := time.Now()
		if err := e.release(*ns, topic); err != nil {
			return start, nil, fmt.Errorf("release the built-in replicator: %w", err)
		}
		return start, nil, nil
	}
	binary := e.o.Binary
	if arm == armVersus {
		binary = e.o.Versus
	}
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return time.Time{}, nil, err
	}
	sc, err := e.startSidecar(binary, "drain-"+short, listen, sidecarConfig(listen, e.ns(nsSidecar), "", false, short))
	if err != nil {
		return time.Time{}, nil, err
	}
	return sc.started, sc, nil
}

// drainStall is how long a drain arm's count on west may stand still
// (before the first message too) before the row fails: the start-up of
// either replicator takes a few seconds, a copy moves every 50 ms poll.
const drainStall = time.Minute

// stallHint says where to look when an arm stopped copying (errStalled).
// Pulsar 4.0.7's replicator never reads again after a read that failed:
// the failed read leaves its in-flight task behind, and every later
// attempt logs "Skip the reading because there is a pending read task".
// On the test bed the four first reads of a 4-partition backlog of full
// batches (1,000 entries of up to 128 KiB each) exhaust the standalone
// JVM's 512 MiB of direct memory (east's log: OutOfDirectMemoryError in
// PerChannelBookieClient, then "Bookie handle is not available" for
// every read), which is how the first 4-partition drain hung.
func stallHint(err error, arm, logPath string) string {
	if !errors.Is(err, errStalled) {
		return ""
	}
	if arm == armBuiltin {
		return ` (Pulsar's replicator stopped reading: see east's pulsar.log for "Error reading entries" followed by "Skip the reading because there is a pending read task", which 4.0.7 never recovers from)`
	}
	return fmt.Sprintf(" (the sidecar's log: %s)", logPath)
}

// drainArm runs one arm of one drain round on a fresh topic: hold, build
// the backlog, settle, release, and time until west has every message.
func (e *env) drainArm(parts, r, try int, arm string, verify bool) (drainRound, error) {
	n := e.o.Sizes.DrainMessages
	short := fmt.Sprintf("d%dp-%d-%d", parts, r, try)
	ns := nsSidecar
	switch arm {
	case armBuiltin:
		ns = nsBDrain
	case armVersus:
		short += "b"
	}
	topic := e.topic(ns, short)
	dr := drainRound{Arm: arm, Round: r, Msgs: n}
	// The backlogs are a GiB or two each: free the space afterwards.
	defer e.dropWorkload(topic)
	timeout := max(3*time.Minute, time.Duration(n/1000)*time.Second)
	if err := e.holdArm(arm, topic, parts); err != nil {
		return dr, err
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := e.produce(ctx, "east", topic, n)
	cancel()
	if err != nil {
		return dr, fmt.Errorf("build backlog: %w", err)
	}
	e.logf("drain p%d round %d %-9s backlog of %d messages built in %s", parts, r+1, arm, n, time.Since(t0).Round(time.Millisecond))
	time.Sleep(e.o.Sizes.Settle)
	if dr.Leaked, err = e.received(context.Background(), "west", topic); err != nil {
		return dr, err
	}
	stopJFR := e.jfrStart(fmt.Sprintf("drain-p%d-r%d-%s", parts, r+1, arm))
	lat0 := e.publishLatency()
	m0 := e.meter.sample()
	start, sc, err := e.releaseArm(arm, topic, short)
	if err != nil {
		stopJFR()
		return dr, err
	}
	stopProf := func() {}
	if sc != nil && r == 0 {
		stopProf = sc.cpuProfile(e.o.ProfileSeconds, fmt.Sprintf("drain-p%d", parts))
	}
	first, done, err := e.waitProgress("west", topic, dr.Leaked, int64(n), timeout, drainStall)
	dr.Use = e.meter.since(m0)
	stopJFR()
	stopProf()
	if err != nil {
		logPath := ""
		if sc != nil {
			logPath = sc.logPath
			sc.stop()
		}
		return dr, fmt.Errorf("drain %s: %w%s", arm, err, stallHint(err, arm, logPath))
	}
	if first.IsZero() { // everything leaked while held: nothing to copy
		first = done
	}
	dr.Publish = meanLatency(lat0, e.publishLatency())
	dr.Startup, dr.Dur = first.Sub(start), done.Sub(start)
	if sc != nil {
		u, _ := sc.usage()
		dr.CPU, dr.HWM, dr.Log = u.CPU, u.HWM, sc.logPath
		dr.Run = e.finish(sc, fmt.Sprintf("drain-p%d", parts))
		dr.Run.CPU, dr.Run.Messages = dr.CPU, n
	}
	if verify && arm == armSidecar {
		v, err := e.verifyCommand(sc.cfgPath, topic, n, dr.Dur)
		if err != nil {
			return dr, err
		}
		dr.Verify = v
		e.logf("drain p%d round %d verify    %d messages in %s (%7.0f msg/s, %.2f× the sidecar's drain; peak RSS %s MiB; exit %d)",
			parts, r+1, n, v.Dur.Round(time.Millisecond), float64(n)/v.Dur.Seconds(), float64(n)/v.Dur.Seconds()/v.SidecarRate, mib(v.PeakRSS), v.Exit)
	}
	e.logf("drain p%d round %d %-9s copy %7.0f msg/s (%s first to last; start-up %s; %d leaked while held; CPU s: sidecar %.2f east %.2f west %.2f; machine %.0f%% busy, iowait %.0f%%)",
		parts, r+1, arm, dr.rate(), dr.copyTime().Round(time.Millisecond), dr.Startup.Round(time.Millisecond), dr.Leaked,
		dr.CPU.Seconds(), dr.Use.Broker["east"].Seconds(), dr.Use.Broker["west"].Seconds(), 100*dr.Use.Busy, 100*dr.Use.IOWait)
	return dr, nil
}

// keepSlowLogs copies the log of every slow sidecar round to the slow
// logs' folder (-slow-logs; a folder named after the run's tenant under
// the temporary directory by default) and notes where in the round: the
// run's other logs go with its temporary directory. With -logs every log
// is kept already, where it is.
func (e *env) keepSlowLogs(res *drainResult) {
	for i := range res.Rounds {
		d := &res.Rounds[i]
		if d.Slow == "" || d.Log == "" {
			continue
		}
		if e.o.Logs != "" {
			d.Kept = d.Log
			continue
		}
		dir := e.slowLogDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			e.logf("keep the slow round's log: %v", err)
			continue
		}
		dst := filepath.Join(dir, filepath.Base(d.Log))
		if err := copyFile(d.Log, dst); err != nil {
			e.logf("keep the slow round's log: %v", err)
			continue
		}
		d.Kept = dst
	}
}

// slowLogDir is where slow rounds' sidecar logs are kept.
func (e *env) slowLogDir() string {
	if e.o.SlowLogs != "" {
		return e.o.SlowLogs
	}
	return filepath.Join(os.TempDir(), "geo-sidecar-bench-slow", e.tenant)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// verifyRun is one run of the geo-sidecar verify command.
type verifyRun struct {
	Messages int           // in the source's topic
	Dur      time.Duration // start to exit
	PeakRSS  int64         // bytes
	Exit     int
	// SidecarRate is the sidecar's drain rate of the same backlog
	// (messages a second), the yardstick.
	SidecarRate float64
}

// verifyCommand runs geo-sidecar verify on topic with the sidecar's own
// config, after the sidecar drained it, and times it. Issue 24's goal:
// at least half the sidecar's drain rate, under 128 MiB.
func (e *env) verifyCommand(cfgPath, topic string, n int, drained time.Duration) (*verifyRun, error) {
	cmd := exec.Command(e.o.Binary, "verify", "--config", cfgPath, "--topic", topic, "--from", "east", "--to", "west", "--json")
	cmd.SysProcAttr = e2e.ChildProcAttr()
	start := time.Now()
	out, err := cmd.Output()
	run := &verifyRun{Messages: n, Dur: time.Since(start), SidecarRate: float64(n) / drained.Seconds()}
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe):
		run.Exit = xe.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("geo-sidecar verify: %w", err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.PeakRSS = ru.Maxrss * 1024
	}
	if run.Exit != 0 {
		e.logf("verify: exit %d: %s", run.Exit, strings.TrimSpace(string(out)))
	}
	return run, nil
}

// replicatorHold is the built-in arm's "target unreachable". West is never
// stopped (other work uses it), and removing west from the namespace's
// replication clusters would delete the replicator's cursor, and with it
// the backlog. Instead the namespace's replicator dispatch rate is set to
// 1 message and 1 byte per second while the backlog is built: Pulsar's
// PersistentReplicator asks its DispatchRateLimiter before every read and,
// with no permits, reschedules the read after MESSAGE_RATE_BACKOFF_MS (1 s)
// without reading, so the backlog stays on the replicator's durable cursor
// (pulsar.repl.west) exactly as during an outage. At most the first read
// gets through (one entry, i.e. one batch, per partition; the limiter then
// owes ~128 KB of tokens, days at 1 byte/s); the run reports it as leaked.
// Setting the rate back to -1 (no limit) releases it; the replicator
// notices within its 1 s backoff, which counts in the built-in's start-up
// just as the sidecar's process start, discovery and subscribe count in
// its own (both reported apart from the copy).
var replicatorHold = utils.DispatchRate{DispatchThrottlingRateInMsg: 1, DispatchThrottlingRateInByte: 1, RatePeriodInSecond: 1}

var replicatorFree = utils.DispatchRate{DispatchThrottlingRateInMsg: -1, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}

// release lifts the replicator dispatch rate of ns and restarts topic's
// replicators so that they read again. The restart is needed on Pulsar
// 4.0.7: a PersistentReplicator that found no rate-limiter permits leaves
// an in-flight read task behind (readPos set, no entries), so its next
// readMoreEntries sees "a pending read", logs "Skip the reading because
// there is a pending read task" and never schedules another read, limit
// or no limit. Unloading the topic drops that replicator; touching the
// topic loads it again, and the new replicator resumes from the durable
// cursor's mark-delete position with the whole backlog intact.
func (e *env) release(ns utils.NameSpaceName, topic string) error {
	if err := e.eastAdm.Namespaces().SetReplicatorDispatchRate(ns, replicatorFree); err != nil {
		return err
	}
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	if err := e.eastAdm.Topics().Unload(*tn); err != nil {
		return fmt.Errorf("unload %s: %w", topic, err)
	}
	_, err = e.received(context.Background(), "east", topic) // loads every partition
	return err
}
