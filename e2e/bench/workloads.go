package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/e2e"
	"github.com/geo-sidecar/geo-sidecar/marker"
)

// The arms of a comparison.
const (
	armBuiltin = "built-in"
	armSidecar = "sidecar"
	armDirect  = "direct"
	// armVersus is a second sidecar binary (-versus), for A/B tests of a
	// change; it appears in the per-round tables only.
	armVersus = "sidecar-b"
)

// order returns the arms of round r: rotated every round, so that no arm
// always runs first (on a fresh broker cache) or last.
func order(r int, arms ...string) []string {
	out := slices.Clone(arms)
	for range r % len(arms) {
		out = append(out[1:], out[0])
	}
	return out
}

// sidecarRun is what one sidecar process used during a measured window.
type sidecarRun struct {
	CPU        time.Duration
	Messages   int
	PeakRSS    int64 // VmHWM at the end of the workload
	Threads    int
	Goroutines int
}

// ---- throughput -----------------------------------------------------------

// tpRound is one arm of one throughput round.
type tpRound struct {
	Arm     string
	Round   int
	Msgs    int
	Dur     time.Duration // first send to the last message on west
	Publish time.Duration // first send to the last receipt (the publishing side)
	CPU     time.Duration // the sidecar's CPU in the window (sidecar arm)
	Use     window        // the machine and the brokers in the window
}

type tpResult struct {
	Partitions int
	Rounds     []tpRound
	Sidecar    sidecarRun
}

// throughput measures sustained replication: a batching producer on east
// publishes TPMessages 1 KiB messages as fast as it can, and the arm's
// time is from the first send to the moment west's broker has taken the
// last one. The direct arm publishes the same messages to west itself.
func (e *env) throughput(parts int) (*tpResult, error) {
	name := fmt.Sprintf("tp%d", parts)
	n := e.o.Sizes.TPMessages
	topics, from := e.armTopics(name)
	for _, arm := range []string{armBuiltin, armSidecar} {
		if err := e.createTopic(topics[arm], parts, "east", "west"); err != nil {
			return nil, err
		}
	}
	if err := e.createTopic(topics[armDirect], parts, "west"); err != nil {
		return nil, err
	}
	sc, err := e.sidecarFor(e.o.Binary, name, nsSidecar, name)
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	arms := []string{armBuiltin, armSidecar, armDirect}
	scs := map[string]*sidecar{armSidecar: sc}
	if e.o.Versus != "" {
		topics[armVersus], from[armVersus] = e.topic(nsSidecar, name+"b"), "east"
		if err := e.createTopic(topics[armVersus], parts, "east", "west"); err != nil {
			return nil, err
		}
		scb, err := e.sidecarFor(e.o.Versus, name+"b", nsSidecar, name+"b")
		if err != nil {
			return nil, err
		}
		defer scb.stop()
		scs[armVersus] = scb
		arms = append(arms, armVersus)
	}
	res := &tpResult{Partitions: parts}
	if err := e.warmUp(topics, from); err != nil {
		return nil, err
	}
	timeout := max(2*time.Minute, time.Duration(n/500)*time.Second)
	for r := range e.o.Sizes.Rounds {
		for _, arm := range order(r, arms...) {
			sc := sc
			if s, ok := scs[arm]; ok {
				sc = s
			}
			var tr tpRound
			err := e.attempt(name+" "+arm, func() error {
				time.Sleep(e.o.Sizes.Settle)
				topic := topics[arm]
				base, err := e.received(context.Background(), "west", topic)
				if err != nil {
					return err
				}
				u0, _ := sc.usage()
				m0 := e.meter.sample()
				var stopProf func()
				if arm == armSidecar && r == 0 {
					stopProf = sc.cpuProfile(e.o.ProfileSeconds, name)
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				t0 := time.Now()
				pubErr := make(chan error, 1)
				var pubDur time.Duration
				go func() {
					err := e.produce(ctx, from[arm], topic, n)
					pubDur = time.Since(t0)
					pubErr <- err
				}()
				_, done, werr := e.waitReceived("west", topic, base, base+int64(n), timeout)
				if werr != nil {
					cancel()
				}
				perr := <-pubErr
				if stopProf != nil {
					stopProf()
				}
				if perr != nil {
					return fmt.Errorf("publish: %w", perr)
				}
				if werr != nil {
					return werr
				}
				u1, _ := sc.usage()
				tr = tpRound{Arm: arm, Round: r, Msgs: n, Dur: done.Sub(t0), Publish: pubDur, Use: e.meter.since(m0)}
				if _, ok := scs[arm]; ok {
					tr.CPU = u1.CPU - u0.CPU
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", name, arm, err)
			}
			use := tr.Use
			res.Rounds = append(res.Rounds, tr)
			e.logf("%s round %d %-9s %7.0f msg/s (%d messages in %s; publish %s; CPU s: sidecar %.2f east %.2f west %.2f; machine %.0f%% busy)",
				name, r+1, arm, float64(n)/tr.Dur.Seconds(), n, tr.Dur.Round(time.Millisecond), tr.Publish.Round(time.Millisecond),
				tr.CPU.Seconds(), use.Broker["east"].Seconds(), use.Broker["west"].Seconds(), 100*use.Busy)
		}
	}
	res.Sidecar = e.finish(sc, name)
	e.dropWorkload(slices.Collect(maps.Values(topics))...)
	for _, r := range res.Rounds {
		if r.Arm == armSidecar {
			res.Sidecar.Messages += r.Msgs
			res.Sidecar.CPU += r.CPU
		}
	}
	return res, nil
}

// sidecarFor starts a sidecar copying the named topics of namespace ns
// east->west and waits until it is ready.
func (e *env) sidecarFor(binary, name, ns string, topics ...string) (*sidecar, error) {
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	sc, err := e.startSidecar(binary, name, listen, sidecarConfig(listen, e.ns(ns), "", false, topics...))
	if err != nil {
		return nil, err
	}
	if err := sc.waitReady(60 * time.Second); err != nil {
		sc.stop()
		return nil, err
	}
	return sc, nil
}

// warmUp sends WarmMessages through every arm and waits for them on
// west: connections, producers (the sidecar opens its producer on the
// first message) and JIT-compiled broker paths are ready before anything
// is measured.
func (e *env) warmUp(topics, from map[string]string) error {
	n := e.o.Sizes.WarmMessages
	for _, arm := range []string{armBuiltin, armSidecar, armDirect, armVersus} {
		topic, ok := topics[arm]
		if !ok {
			continue
		}
		base, err := e.received(context.Background(), "west", topic)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = e.produce(ctx, from[arm], topic, n)
		cancel()
		if err != nil {
			return fmt.Errorf("warm-up %s: %w", arm, err)
		}
		if _, _, err := e.waitReceived("west", topic, base, base+int64(n), 2*time.Minute); err != nil {
			return fmt.Errorf("warm-up %s: %w", arm, err)
		}
	}
	return nil
}

// finish reads the sidecar's peak RSS, threads and goroutines, saves its
// allocation and blocking profiles when profiling, and stops it.
func (e *env) finish(sc *sidecar, label string) sidecarRun {
	u, _ := sc.usage()
	g, _ := sc.metric("go_goroutines")
	sc.profile("allocs", "", label)
	sc.profile("block", "", label)
	sc.profile("mutex", "", label)
	sc.profile("goroutine", "", label)
	sc.stop()
	return sidecarRun{PeakRSS: u.HWM, Threads: u.Threads, Goroutines: int(g)}
}

// ---- latency --------------------------------------------------------------

type latRound struct {
	Arm           string
	Round         int
	Sent, Got     int
	P50, P99, Max time.Duration
}

type latResult struct {
	Rate    int
	Rounds  []latRound
	Sidecar sidecarRun
}

// latency measures publish-on-east to received-on-west at a fixed
// moderate rate. The producer does not batch (a batching delay would be
// the application's latency, not replication's); each payload carries its
// send time, and a consumer on west takes the difference on receipt. The
// direct arm (publish on west, receive on west) is the floor: one hop.
func (e *env) latency() (*latResult, error) {
	const name = "lat"
	rate, d := e.o.Sizes.LatRate, e.o.Sizes.LatDuration
	topics, from := e.armTopics(name)
	for _, arm := range []string{armBuiltin, armSidecar} {
		if err := e.createTopic(topics[arm], 1, "east", "west"); err != nil {
			return nil, err
		}
	}
	if err := e.createTopic(topics[armDirect], 1, "west"); err != nil {
		return nil, err
	}
	sc, err := e.sidecarFor(e.o.Binary, "latency", nsSidecar, name)
	if err != nil {
		return nil, err
	}
	defer sc.stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	col := map[string]*collector{}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for arm, topic := range topics {
		cons, err := e.west.Subscribe(pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "bench-latency", Type: pulsar.Exclusive,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest,
		})
		if err != nil {
			return nil, fmt.Errorf("consumer on west %s: %w", topic, err)
		}
		c := &collector{}
		col[arm] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cons.Close()
			c.run(ctx, cons)
		}()
	}
	res := &latResult{Rate: rate}
	tag := uint64(time.Now().UnixNano())
	// Warm-up: LatWarm at the rate through every arm, not recorded.
	for _, arm := range []string{armBuiltin, armSidecar, armDirect} {
		tag++
		if _, _, err := e.paced(from[arm], topics[arm], col[arm], tag, rate, e.o.Sizes.LatWarm); err != nil {
			return nil, fmt.Errorf("latency warm-up %s: %w", arm, err)
		}
	}
	for r := range e.o.Sizes.Rounds {
		for _, arm := range order(r, armBuiltin, armSidecar, armDirect) {
			var sent int
			var samples []time.Duration
			var u0, u1 usage
			err := e.attempt("latency "+arm, func() error {
				time.Sleep(e.o.Sizes.Settle)
				tag++
				u0, _ = sc.usage()
				var err error
				sent, samples, err = e.paced(from[arm], topics[arm], col[arm], tag, rate, d)
				if err == nil && e.restarted() {
					err = errRestarted
				}
				u1, _ = sc.usage()
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("latency %s: %w", arm, err)
			}
			lr := latRound{Arm: arm, Round: r, Sent: sent, Got: len(samples)}
			if len(samples) > 0 {
				slices.Sort(samples)
				lr.P50, lr.P99, lr.Max = quantile(samples, 0.50), quantile(samples, 0.99), samples[len(samples)-1]
			}
			if arm == armSidecar {
				res.Sidecar.CPU += u1.CPU - u0.CPU
				res.Sidecar.Messages += sent
			}
			res.Rounds = append(res.Rounds, lr)
			e.logf("latency round %d %-8s p50 %s p99 %s max %s (%d/%d received)", r+1, arm,
				ms(lr.P50), ms(lr.P99), ms(lr.Max), lr.Got, lr.Sent)
		}
	}
	run := e.finish(sc, "latency")
	cancel() // the consumers
	e.dropWorkload(slices.Collect(maps.Values(topics))...)
	run.CPU, run.Messages = res.Sidecar.CPU, res.Sidecar.Messages
	res.Sidecar = run
	return res, nil
}

// paced publishes at rate for d, without batching, each message stamped
// with its send time and tag, then waits (up to 15 s) until col has seen
// every one. It returns how many were sent and their latencies.
func (e *env) paced(cluster, topic string, col *collector, tag uint64, rate int, d time.Duration) (int, []time.Duration, error) {
	p, err := e.client(cluster).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, CompressionType: pulsar.NoCompression})
	if err != nil {
		return 0, nil, err
	}
	defer closeSoon(p)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	col.expect(tag)
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	start := time.Now()
	var failed atomic.Int64
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload(time.Now(), tag)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					failed.Add(1)
				}
			})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		return n, nil, err
	}
	if f := failed.Load(); f > 0 {
		return n, nil, fmt.Errorf("%d sends failed", f)
	}
	deadline := time.Now().Add(15 * time.Second)
	for col.count(tag) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if os.Getenv("BENCH_DEBUG_LAT") != "" {
		col.dump(topic)
	}
	return n, col.take(tag), nil
}

// collector records the latency of every message a consumer receives,
// by tag; geo-sidecar markers are acknowledged and skipped.
type collector struct {
	mu  sync.Mutex
	tag uint64
	lat []time.Duration
}

func (c *collector) run(ctx context.Context, cons pulsar.Consumer) {
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		_ = cons.Ack(m)
		if marker.Is(m) || len(m.Payload()) != msgSize {
			continue
		}
		b := m.Payload()
		sent, tag := int64(getUint64(b)), getUint64(b[8:])
		c.mu.Lock()
		if tag == c.tag {
			c.lat = append(c.lat, now.Sub(time.Unix(0, sent)))
		}
		c.mu.Unlock()
	}
}

func (c *collector) dump(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(os.Stderr, "DEBUG %s:", topic)
	for i, l := range c.lat {
		if l > 40*time.Millisecond {
			fmt.Fprintf(os.Stderr, " %d:%.0f", i, float64(l)/1e6)
		}
	}
	fmt.Fprintln(os.Stderr)
}

func (c *collector) expect(tag uint64) {
	c.mu.Lock()
	c.tag, c.lat = tag, nil
	c.mu.Unlock()
}

func (c *collector) count(tag uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tag != tag {
		return 0
	}
	return len(c.lat)
}

func (c *collector) take(tag uint64) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tag != tag {
		return nil
	}
	return slices.Clone(c.lat)
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ---- scale ----------------------------------------------------------------

type scaleResult struct {
	Topics       int
	Ready        time.Duration // process start to /readyz
	Startup      time.Duration // process start until every topic has replicated
	RSS, HWM     int64
	Threads      int
	Goroutines   int
	IdleWindow   time.Duration
	IdleCPU      time.Duration
	Messages     int
	Dur          time.Duration
	CPU          time.Duration // during the spread traffic
	HWMAfter     int64
	GoroutinesTr int // during traffic (after)
	Stop         time.Duration
	idleEnd      time.Duration // the sidecar's CPU when the idle window ended
}

// scaleInFlight bounds the scale run's sends outstanding at once.
const scaleInFlight = 4096

// scale runs one sidecar over ScaleTopics topics: each topic holds one
// message before the sidecar starts, so "every topic replicates" is
// "replicated_messages_total reached the topic count". Then it idles
// (RSS, goroutines, CPU), then carries traffic spread over every topic.
func (e *env) scale() (*scaleResult, error) {
	var res *scaleResult
	try := 0
	err := e.attempt("scale", func() error {
		try++
		var err error
		if res, err = e.scaleOnce(try); err == nil && e.restarted() {
			err = errRestarted
		}
		return err
	})
	return res, err
}

func (e *env) scaleOnce(try int) (*scaleResult, error) {
	k, m := e.o.Sizes.ScaleTopics, e.o.Sizes.ScaleMessages
	prefix := fmt.Sprintf("s%d-", try)
	res := &scaleResult{Topics: k, Messages: m, IdleWindow: e.o.Sizes.IdleWindow}
	e.logf("scale: creating %d topics on east, one message each", k)
	t0 := time.Now()
	producers, err := e.scaleTopics(prefix, k)
	defer closeAll(producers)
	if err != nil {
		return nil, fmt.Errorf("scale topics: %w", err)
	}
	e.logf("scale: %d topics created in %s; starting one sidecar for all of them", k, time.Since(t0).Round(time.Millisecond))
	sc, err := e.scaleStart(prefix, res)
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	e.scaleIdle(sc, res)
	if err := e.scaleTraffic(sc, producers, res); err != nil {
		return nil, err
	}
	sc.profile("allocs", "", "scale")
	res.Stop = sc.stop()
	for _, c := range []string{"east", "west"} {
		if failed := e.dropTopics(c, nsScale); len(failed) > 0 {
			e.logf("scale: %d topic(s) not deleted on %s: %s", len(failed), c, failed[0])
		}
	}
	return res, nil
}

// scaleTopics creates the scale run's k topics on east (prefix and a
// number), with a producer each that has sent one message; 16 at a time.
// The producers it made are returned even with an error, to be closed.
func (e *env) scaleTopics(prefix string, k int) ([]pulsar.Producer, error) {
	producers := make([]pulsar.Producer, k)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				opts := batching(e.topic(nsScale, fmt.Sprintf("%s%04d", prefix, i)))
				// The spread traffic is a few hundred messages per topic:
				// a longer batching delay keeps the 1,000 idle producers of
				// this process from waking every 10 ms.
				opts.BatchingMaxPublishDelay = 100 * time.Millisecond
				p, err := e.east.CreateProducer(opts)
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, err = p.Send(ctx, &pulsar.ProducerMessage{Payload: payload(time.Now(), 0)})
					cancel()
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				producers[i] = p
				mu.Unlock()
			}
		}()
	}
	for i := range k {
		work <- i
	}
	close(work)
	wg.Wait()
	return producers, firstErr
}

// closeAll closes every producer made, at once.
func closeAll(producers []pulsar.Producer) {
	var cw sync.WaitGroup
	for _, p := range producers {
		if p != nil {
			cw.Add(1)
			go func() { defer cw.Done(); closeSoon(p) }()
		}
	}
	cw.Wait()
}

// scaleStart starts the one sidecar of the scale run on the topics named
// prefix.* and waits until it has copied each topic's message: res.Ready
// and res.Startup.
func (e *env) scaleStart(prefix string, res *scaleResult) (*sidecar, error) {
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	sc, err := e.startSidecar(e.o.Binary, "scale", listen, sidecarConfig(listen, e.ns(nsScale), "", true, prefix+".*"))
	if err != nil {
		return nil, err
	}
	if err := sc.waitReady(5 * time.Minute); err != nil {
		sc.stop()
		return nil, err
	}
	res.Ready = time.Since(sc.started)
	done, err := sc.waitMetric("geo_sidecar_replicated_messages_total", float64(res.Topics), 10*time.Minute)
	if err != nil {
		sc.stop()
		return nil, err
	}
	res.Startup = done.Sub(sc.started)
	e.logf("scale: ready after %s, every topic replicated after %s", res.Ready.Round(time.Millisecond), res.Startup.Round(time.Millisecond))
	return sc, nil
}

// scaleIdle measures the sidecar at rest: RSS, goroutines and threads
// after ScaleSettle, then its CPU over the idle window.
func (e *env) scaleIdle(sc *sidecar, res *scaleResult) {
	// Idle is measured once start-up work is over: the first stats
	// refreshes find the topics connected and caught up.
	time.Sleep(e.o.Sizes.ScaleSettle)
	u0, _ := sc.usage()
	g, _ := sc.metric("go_goroutines")
	res.RSS, res.Threads, res.Goroutines = u0.RSS, u0.Threads, int(g)
	stopProf := sc.cpuProfile(res.IdleWindow, "scale-idle")
	time.Sleep(res.IdleWindow)
	u1, _ := sc.usage()
	stopProf()
	res.IdleCPU = u1.CPU - u0.CPU
	res.HWM = u1.HWM
	res.idleEnd = u1.CPU
	sc.profile("goroutine", "", "scale-idle")
	sc.profile("heap", "", "scale-idle")
	e.logf("scale: idle RSS %s MiB, %d goroutines, %d threads, idle CPU %.2f%% of a core",
		mib(res.RSS), res.Goroutines, res.Threads, 100*res.IdleCPU.Seconds()/res.IdleWindow.Seconds())
}

// scaleTraffic spreads ScaleMessages round-robin over the topics'
// producers and times the sidecar until it counted them confirmed.
func (e *env) scaleTraffic(sc *sidecar, producers []pulsar.Producer, res *scaleResult) error {
	k, m := len(producers), res.Messages
	base, err := sc.metric("geo_sidecar_replicated_messages_total")
	if err != nil {
		return err
	}
	body := payload(time.Now(), 0)
	var failed atomic.Int64
	stopProf := sc.cpuProfile(e.o.ProfileSeconds, "scale-traffic")
	trafficTimeout := max(5*time.Minute, time.Duration(m/200)*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), trafficTimeout)
	defer cancel()
	t1 := time.Now()
	// At most scaleInFlight sends outstanding: all 200,000 handed to
	// 10,000 producers at once left east's broker more than the client's
	// 30 s send timeout behind, and thousands of the bench's own sends
	// failed before the sidecar was measured.
	inFlight := make(chan struct{}, scaleInFlight)
	for i := range m {
		inFlight <- struct{}{}
		producers[i%k].SendAsync(ctx, &pulsar.ProducerMessage{Payload: body},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				<-inFlight
				if err != nil {
					failed.Add(1)
				}
			})
	}
	var fw sync.WaitGroup
	for _, p := range producers {
		fw.Add(1)
		go func() { defer fw.Done(); _ = p.FlushWithCtx(ctx) }()
	}
	fw.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("scale traffic: %d sends failed", f)
	}
	done, err := sc.waitMetric("geo_sidecar_replicated_messages_total", base+float64(m), trafficTimeout)
	if err != nil {
		return err
	}
	res.Dur = done.Sub(t1)
	u2, _ := sc.usage()
	stopProf()
	res.CPU = u2.CPU - res.idleEnd
	res.HWMAfter = u2.HWM
	g, _ := sc.metric("go_goroutines")
	res.GoroutinesTr = int(g)
	e.logf("scale: %d messages over %d topics in %s (%.0f msg/s)", m, k, res.Dur.Round(time.Millisecond), float64(m)/res.Dur.Seconds())
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func mib(b int64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }

// armTopics names a workload's topic in each arm's namespace, and the
// cluster each arm publishes to: east, except the direct arm (west).
func (e *env) armTopics(name string) (topics, from map[string]string) {
	topics = map[string]string{
		armBuiltin: e.topic(nsBuiltin, name),
		armSidecar: e.topic(nsSidecar, name),
		armDirect:  e.topic(nsDirect, name),
	}
	from = map[string]string{armBuiltin: "east", armSidecar: "east", armDirect: "west"}
	return topics, from
}
