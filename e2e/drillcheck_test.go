package e2e

// Failover checks that do not trust the product's own report: the test
// publishes every message itself ("<region>-<i>", so each has an identity
// and an origin), consumes with its own consumers before and after the
// switch, and counts lost and duplicated messages by identity. The drill
// command (geo-sidecar drill) computes the same figures for operators;
// these helpers are the independent check of the mechanism underneath.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/drill"
)

// snapshotInterval is the snapshot interval of the test sidecars' configs
// (Config sets none, so the default applies).
const snapshotInterval = config.DefaultSnapshotInterval

// batchMax caps the test producers' batches. A subscription position is
// carried over entry by entry, so the rest of the batch a snapshot falls in
// is delivered again: at most batchMax-1 messages per partition.
const batchMax = 10

// ackWindow is how many acknowledgements are shuffled together for shared
// subscriptions (individual acks past the mark-delete position are not
// carried over: at most ackWindow messages per partition come again).
const ackWindow = 20

// syncOff reports whether E2E_SUBSCRIPTION_SYNC=off asks for configs
// without the `subscriptions:` lists, i.e. subscription sync switched off.
// The failover checks must then fail (too many duplicates): that is how
// their teeth are shown (see TestFailoverCheckSyncOff for the part of that
// proof kept in the suite).
func syncOff() bool { return os.Getenv("E2E_SUBSCRIPTION_SYNC") == "off" }

var subscriptionsLine = regexp.MustCompile(`(?m)^ +subscription(s|_patterns): \[.*\]\n`)

// withoutSync removes the `subscriptions:` and `subscription_patterns:`
// lines of replication entries.
func withoutSync(entries string) string { return subscriptionsLine.ReplaceAllString(entries, "") }

// checkedEntries is syncEntries, or withoutSync of it when syncOff.
func checkedEntries(ns, sub string, clusters ...string) string {
	e := syncEntries(ns, sub, clusters...)
	if syncOff() {
		e = withoutSync(e)
	}
	return e
}

// paced publishes "<region>-<i>" for i < n to one topic, evenly spread over
// a given time (10 ms ticks), with a batching producer capped at batchMax
// messages per batch and no send timeout (a broker restart delays, never
// fails, a send).
type paced struct {
	region    string
	n         int
	confirmed atomic.Int64
	done      chan error
}

func publishPaced(t *testing.T, c pulsar.Client, topic, region string, n int, over time.Duration) *paced {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 2000,
		SendTimeout: -1, BatchingMaxMessages: batchMax})
	if err != nil {
		t.Fatalf("producer on %s in %s: %v", topic, region, err)
	}
	g := &paced{region: region, n: n, done: make(chan error, 1)}
	go func() {
		defer p.Close()
		const tick = 10 * time.Millisecond
		ticks := max(int(over/tick), 1)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		var firstErr atomic.Value
		for k, i := 0, 0; i < n; k++ {
			<-tk.C
			for upto := min(n*(k+1)/ticks, n); i < upto || (k >= ticks && i < n); i++ {
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{
					Payload: []byte(msgID(region, i)), Key: fmt.Sprintf("k%d", i%16),
				}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
					g.confirmed.Add(1)
				})
			}
		}
		err := p.Flush()
		if e, ok := firstErr.Load().(error); ok {
			err = e
		}
		g.done <- err
	}()
	return g
}

func (g *paced) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-g.done:
		if err != nil {
			t.Fatalf("publishing in %s: %v", g.region, err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("publishing in %s did not finish", g.region)
	}
}

func msgID(region string, i int) string { return fmt.Sprintf("%s-%d", region, i) }

// parseID splits "<region>-<i>"; ok is false for anything else.
func parseID(p string) (region string, i int, ok bool) {
	k := strings.LastIndexByte(p, '-')
	if k < 0 {
		return "", 0, false
	}
	i, err := strconv.Atoi(p[k+1:])
	return p[:k], i, err == nil
}

// liveConsumer receives on a subscription in the background, acknowledging
// every message (in shuffled windows of ackWindow when shuffle), skipping
// markers, recording payloads in arrival order and counting them per
// origin region.
type liveConsumer struct {
	cons     pulsar.Consumer
	shuffle  bool
	want     int // stop after this many (0: until Stop)
	stopping atomic.Bool
	done     chan error

	mu       sync.Mutex
	got      []string
	perOrig  map[string]int
	lastRecv time.Time
}

func startConsumer(t *testing.T, c pulsar.Client, topic, sub string, typ pulsar.SubscriptionType, want int) *liveConsumer {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe %s on %s: %v", sub, topic, err)
	}
	l := &liveConsumer{cons: cons, shuffle: typ == pulsar.Shared, want: want, done: make(chan error, 1),
		perOrig: map[string]int{}, lastRecv: time.Now()}
	go func() { l.done <- l.loop() }()
	return l
}

func (l *liveConsumer) loop() error {
	var window []pulsar.MessageID
	flush := func() error {
		if l.shuffle {
			rand.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
		}
		for _, id := range window {
			if err := l.cons.AckID(id); err != nil {
				return err
			}
		}
		window = window[:0]
		return nil
	}
	for !l.stopping.Load() && (l.want == 0 || l.count() < l.want) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		m, err := l.cons.Receive(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return err
		}
		window = append(window, m.ID())
		if !marker.Is(m) {
			p := string(m.Payload())
			region, _, _ := parseID(p)
			l.mu.Lock()
			l.got = append(l.got, p)
			l.perOrig[region]++
			l.lastRecv = time.Now()
			l.mu.Unlock()
		}
		if len(window) >= ackWindow || !l.shuffle {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (l *liveConsumer) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

func (l *liveConsumer) from(region string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perOrig[region]
}

func (l *liveConsumer) idleFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.lastRecv)
}

// stop ends the consumer (after its pending acknowledgements) and returns
// what it received. The consumer is closed: the subscription has no
// consumer attached afterwards.
func (l *liveConsumer) stop(t *testing.T) []string {
	t.Helper()
	l.stopping.Store(true)
	if err := <-l.done; err != nil {
		t.Fatalf("consumer: %v", err)
	}
	l.cons.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// drain waits until the consumer received want messages (or nothing came
// for idle) and stops it.
func (l *liveConsumer) drain(t *testing.T, want int, idle, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for l.count() < want && l.idleFor() < idle && time.Now().Before(deadline) {
		select {
		case err := <-l.done:
			l.done <- err
			return l.stop(t)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return l.stop(t)
}

// failoverTally compares what a subscription delivered before (in the old
// region) and after (in the new one) the switch with the messages published.
type failoverTally struct {
	Published, Before, After int
	Lost, Duplicates         int
	LostIDs                  string // the first few, for the failure message
}

func tallyFailover(published []string, before, after []string) failoverTally {
	r := failoverTally{Published: len(published), Before: len(before), After: len(after)}
	seen := map[string]int{}
	for _, p := range before {
		seen[p]++
	}
	for _, p := range after {
		if seen[p] > 0 {
			r.Duplicates++
		}
		seen[p]++
	}
	var lost []string
	for _, p := range published {
		if seen[p] == 0 {
			r.Lost++
			if len(lost) < 10 {
				lost = append(lost, p)
			}
		}
	}
	r.LostIDs = strings.Join(lost, " ")
	return r
}

// tallyIDs counts the published messages missing from got and the extra
// copies in got.
func tallyIDs(published, got []string) (missing, copies int) {
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
	}
	for _, p := range published {
		switch n := seen[p]; {
		case n == 0:
			missing++
		case n > 1:
			copies += n - 1
		}
	}
	return missing, copies
}

// orderBreaksPerOrigin counts, per origin region, the messages that arrived
// for the first time after a later message of the same origin (copies of
// already delivered messages are not breaks).
func orderBreaksPerOrigin(got []string) map[string]int {
	next := map[string]int{}
	seen := map[string]bool{}
	breaks := map[string]int{}
	for _, p := range got {
		region, i, ok := parseID(p)
		if !ok || seen[p] {
			continue
		}
		seen[p] = true
		if i < next[region] {
			breaks[region]++
		}
		next[region] = max(next[region], i+1)
	}
	return breaks
}

func ids(region string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = msgID(region, i)
	}
	return out
}

// dupBound is how many messages a failover may deliver again, for traffic
// of rate messages per second on the topic (all regions together, since
// every region's messages are in every copy of the topic).
//
// The subscription on the target is moved to b of the newest snapshot
// (a, b) whose a the source subscription consumed past; what it delivers
// again is what the source consumed after that snapshot's request was
// written. A snapshot is started every interval while data arrives and
// completes one round trip (request forwarded, response forwarded back)
// after its request; the next snapshot's request comes one interval later.
// So the redelivered messages are those of at most one interval plus one
// round trip. We allow two intervals (a round trip within one interval;
// on this machine it is some tens of milliseconds) plus extra seconds
// where no snapshot could be taken or completed (a sidecar that was down,
// a third cluster's data in flight), plus the rest of the batch a snapshot
// falls in (batchMax-1 per partition) and, for shared subscriptions,
// individual acknowledgements past the mark-delete position (ackWindow
// per partition).
//
// Without subscription sync the target subscription starts from the
// earliest message and delivers again everything consumed before the
// switch, far above this bound when that is several seconds of traffic.
func dupBound(rate float64, extra time.Duration, partitions int, shared bool) int {
	b := rate*(2*snapshotInterval+extra).Seconds() + float64(partitions*(batchMax-1))
	if shared {
		b += float64(partitions * ackWindow)
	}
	return int(math.Ceil(b))
}

// failover is a failover done by the test itself: publish in every region,
// consume part in from, stop, wait until the subscription is in step, then
// consume the rest in to on the same subscription.
type failover struct {
	topic, sub, from, to string
	regions              []string // publishing regions (each publishes perRegion)
	perRegion            int
	over                 time.Duration // publishing spread over this long
	typ                  pulsar.SubscriptionType
	partitions           int           // 0: not partitioned
	inStepWait           time.Duration // longest wait for the subscription to be in step (0: 60 s)
	// during, when set, runs while publishing (from its start), given the
	// number of messages confirmed so far in all regions; it returns how
	// long no snapshot could be taken (added to the duplicate bound).
	during func(confirmed func() int) time.Duration
}

type failoverResult struct {
	failoverTally
	Rate         float64 // messages per second on the topic
	Bound        int
	InStep       bool
	InStepAfter  time.Duration
	Extra        time.Duration // allowance beyond two snapshot intervals
	BreaksBefore map[string]int
	BreaksAfter  map[string]int
}

func (r failoverResult) String() string {
	return fmt.Sprintf("published %d (%.0f msg/s), consumed before %d, after %d, lost %d, duplicates %d (bound %d), in step %v after %.1fs, extra allowance %.1fs",
		r.Published, r.Rate, r.Before, r.After, r.Lost, r.Duplicates, r.Bound, r.InStep, r.InStepAfter.Seconds(), r.Extra.Seconds())
}

func (f failover) run(t *testing.T) failoverResult {
	t.Helper()
	fromC, toC := Client(t, f.from), Client(t, f.to)
	total := f.perRegion * len(f.regions)
	var published []string
	for _, r := range f.regions {
		published = append(published, ids(r, f.perRegion)...)
	}
	// The subscription exists before the first message (created at the
	// earliest position; the topic is new).
	_ = startConsumer(t, fromC, f.topic, f.sub, f.typ, 0).stop(t)

	var pubs []*paced
	for _, r := range f.regions {
		pubs = append(pubs, publishPaced(t, Client(t, r), f.topic, r, f.perRegion, f.over))
	}
	start := time.Now()
	var blind time.Duration
	if f.during != nil {
		blind = f.during(func() int {
			var n int64
			for _, p := range pubs {
				n += p.confirmed.Load()
			}
			return int(n)
		})
	}
	for _, p := range pubs {
		p.wait(t)
	}
	spent := time.Since(start)

	// Consume half in from, like the drill: an exclusive consumer's
	// mark-delete position lands in the middle of the published traffic.
	before := startConsumer(t, fromC, f.topic, f.sub, f.typ, total/2).drain(t, total/2, 30*time.Second, 2*time.Minute)

	wait := f.inStepWait
	if wait == 0 {
		wait = 60 * time.Second
	}
	inStepAfter, inStep := awaitInStep(t, Admin(t, f.from), Admin(t, f.to), f.topic, f.sub, wait)

	after := startConsumer(t, toC, f.topic, f.sub, f.typ, 0).drain(t, 1<<30, 5*time.Second, 3*time.Minute)
	parts := max(f.partitions, 1)
	rate := float64(total) / f.over.Seconds()
	res := failoverResult{
		failoverTally: tallyFailover(published, before, after),
		Rate:          rate,
		Bound:         dupBound(rate, blind, parts, f.typ == pulsar.Shared),
		InStep:        inStep,
		InStepAfter:   inStepAfter,
		Extra:         blind,
		BreaksBefore:  orderBreaksPerOrigin(before),
		BreaksAfter:   orderBreaksPerOrigin(after),
	}
	if spent > f.over+5*time.Second {
		t.Logf("publishing took %s instead of %s (a busy machine): the rate was lower than assumed, so the bound is loose", spent, f.over)
	}
	return res
}

// check fails t on any lost message and on more duplicates than the bound.
func (r failoverResult) check(t *testing.T) {
	t.Helper()
	if r.Lost != 0 {
		t.Errorf("%d messages lost in the failover (e.g. %s)", r.Lost, r.LostIDs)
	}
	if r.Duplicates > r.Bound {
		t.Errorf("%d messages delivered again after the failover, more than %d (two snapshot intervals of traffic and the allowances): subscription sync did not carry the position over", r.Duplicates, r.Bound)
	}
}

// awaitInStep waits until the subscription exists on the target and the
// sum over partitions of how far it trails the source (backlog there minus
// backlog here, from each cluster's admin API) reaches 0, or stops
// shrinking for 3 s after it shrank, or never shrinks for 15 s: the
// drill's own rule (subscription/drill, settleAfterMove and
// settleUnmoved). It returns the time until the last improvement.
func awaitInStep(t *testing.T, fromA, toA pulsaradmin.Client, topic, sub string, timeout time.Duration) (time.Duration, bool) {
	t.Helper()
	tn := mustTopicName(t, topic)
	start := time.Now()
	best, bestAt, moved := int64(-1), start, false
	for time.Since(start) < timeout {
		fb, fok := drill.Backlogs(fromA, *tn, sub)
		tb, tok := drill.Backlogs(toA, *tn, sub)
		if fok && tok && len(tb) > 0 && len(tb) == len(fb) {
			var lag int64
			for p, f := range fb {
				lag += max(tb[p]-f, 0)
			}
			if best < 0 || lag < best {
				moved = moved || best >= 0
				best, bestAt = lag, time.Now()
			}
			settle := 15 * time.Second
			if moved {
				settle = 3 * time.Second
			}
			if lag == 0 || time.Since(bestAt) > settle {
				return bestAt.Sub(start), true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start), false
}

// fmtBreaks prints per-origin order breaks, "none" when there are none.
func fmtBreaks(b map[string]int) string {
	var parts []string
	for r, n := range b {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// northSample is how many north-origin messages east and west held at a
// moment of a three-cluster run.
type northSample struct {
	at         time.Duration
	east, west int
}

// northDelay is the longest time, over the samples up to until, that east
// took to hold as many north-origin messages as west held at that sample:
// how long a snapshot between east and west started then waited for north's
// watermark. It also returns the most west was ahead.
//
// The duplicate bound with a lagging third cluster: one snapshot is in
// flight at a time, and one started at t completes after the round trip
// plus that wait D(t). The newest snapshot usable at the stop, started at
// t_k, and the next one, at t_k+max(interval, its completion), which was not
// usable, put the stop less than max(interval, D+rt) + D+rt after t_k. With
// the round trip within one interval that is at most 2*(interval + Dmax):
// dupBound(rate, 2*Dmax) allows exactly that.
func northDelay(samples []northSample, until time.Duration) (d time.Duration, ahead int) {
	for i, s := range samples {
		if s.at > until {
			break
		}
		ahead = max(ahead, s.west-s.east)
		j := i
		for j < len(samples) && samples[j].east < s.west {
			j++
		}
		if j == len(samples) {
			j-- // not caught up by the last sample: as long as seen
		}
		d = max(d, samples[j].at-s.at)
	}
	return d, ahead
}

// awaitClusters waits (up to 3 minutes) until every named cluster answers
// on its admin API and can create a topic's tenant. The test-bed clusters
// are shared: other tests kill and restart west. This never starts a
// cluster (that could end another test's outage early); it only waits.
func awaitClusters(t *testing.T, names ...string) {
	t.Helper()
	Eventually(t, 3*time.Minute, func() error {
		for _, n := range names {
			if _, err := Admin(t, n).Tenants().List(); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
		return nil
	})
}
