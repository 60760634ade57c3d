package verify

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// fakeCluster is a Reader over entries held in memory, per partition;
// a test appends while the verifier reads.
type fakeCluster struct {
	mu      sync.Mutex
	entries map[string][]wire.Entry
	opened  int // readers opened (Read)
}

func newFakeCluster() *fakeCluster { return &fakeCluster{entries: map[string][]wire.Entry{}} }

func (c *fakeCluster) add(p string, es ...wire.Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[p] = append(c.entries[p], es...)
}

func (c *fakeCluster) count(p string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries[p])
}

func (c *fakeCluster) readers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened
}

func (c *fakeCluster) End(_ context.Context, p string) (marker.Position, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.entries[p]
	if len(es) == 0 {
		return marker.Position{}, false, nil
	}
	return position(es[len(es)-1].ID), true, nil
}

func (c *fakeCluster) Read(_ context.Context, p string, start *marker.Position) (entryReader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opened++
	var q []wire.Entry
	for _, e := range c.entries[p] {
		if start == nil || position(e.ID).Compare(*start) >= 0 {
			q = append(q, e)
		}
	}
	r := &fakeReader{queue: q}
	if len(q) > 0 {
		r.md, r.hasMD = q[len(q)-1].ID, true
	}
	return r, nil
}

// rig is a continuous verifier of partition part, east to west, over
// fake clusters, with the test's hands on both: it produces source
// entries and writes copies (made as the entry pipe makes them, signed
// with testKeys) or anything else to the target.
type rig struct {
	t        *testing.T
	src, tgt *fakeCluster
	srcN     uint64 // next source entry
	tgtN     uint64 // next target entry
	sources  []wire.Entry
	reg      *prometheus.Registry
	m        *metrics.Metrics
	active   atomic.Bool
	cfg      ContinuousConfig
	stop     context.CancelFunc
	done     chan struct{}
}

const interval = time.Second

func newRig(t *testing.T) *rig {
	r := &rig{t: t, src: newFakeCluster(), tgt: newFakeCluster(), reg: prometheus.NewRegistry()}
	r.m = metrics.New(r.reg)
	r.active.Store(true)
	r.cfg = ContinuousConfig{Source: "east", Target: "west", Keys: testKeys, Interval: interval,
		Partitions: func() []Assigned { return []Assigned{{Partition: part, Active: &r.active}} },
		Metrics:    r.m}
	r.cfg.From, r.cfg.To = r.src, r.tgt
	return r
}

// start runs the verifier until the test ends.
func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan struct{})
	v := NewContinuous(r.cfg)
	go func() {
		defer close(r.done)
		if err := v.Run(ctx); err != nil {
			r.t.Errorf("Run: %v", err)
		}
	}()
	r.t.Cleanup(func() { r.stop(); <-r.done })
}

// produce writes n entries to the source, published now.
func (r *rig) produce(n int) []wire.Entry {
	var out []wire.Entry
	for range n {
		mb := wire.MetadataBuilder{ProducerName: "app", SequenceID: r.srcN, PublishTime: uint64(time.Now().UnixMilli())}
		e := wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: r.srcN}, Metadata: mb.Append(nil),
			Payload: []byte(fmt.Sprintf("payload %d", r.srcN)), NumMessages: 1}
		r.srcN++
		out = append(out, e)
	}
	r.sources = append(r.sources, out...)
	r.src.add(part, out...)
	return out
}

// copyOf is the entry pipe's copy of source entry i.
func (r *rig) copyOf(i int) wire.Entry { return forward(r.t, r.sources[i], testKeys, part, nil) }

// write appends entries to the target, numbered in order.
func (r *rig) write(es ...wire.Entry) {
	for i := range es {
		es[i].ID = wire.MessageID{Ledger: 77, Entry: r.tgtN}
		r.tgtN++
	}
	r.tgt.add(part, es...)
}

// copyAll writes the copies of source entries from..to-1, but skip.
func (r *rig) copyAll(from, to int, skip ...int) {
	var es []wire.Entry
	for i := from; i < to; i++ {
		if !slices.Contains(skip, i) {
			es = append(es, r.copyOf(i))
		}
	}
	r.write(es...)
}

// rounds lets n intervals pass, the verifier's work done.
func (r *rig) rounds(n int) {
	time.Sleep(time.Duration(n) * interval)
	synctest.Wait()
}

func (r *rig) found() map[Kind]float64 {
	out := map[Kind]float64{}
	for _, k := range foundKinds {
		if v := metricstest.Counter(r.m.Verify.Found, "east", "west", string(k)); v != 0 {
			out[k] = v
		}
	}
	return out
}

// age is the topic's verified-through age, and whether it is exported.
func (r *rig) age() (float64, bool) {
	v, ok := metricstest.Gauges(r.t, r.reg, "geo_sidecar_verify_verified_through_age_seconds")["/east/west/t/ns/orders"]
	return v, ok
}

func (r *rig) read() float64 { return metricstest.Counter(r.m.Verify.Read, "east", "west") }

func (r *rig) wantFound(step string, want map[Kind]float64) {
	r.t.Helper()
	if got := r.found(); fmt.Sprint(got) != fmt.Sprint(want) {
		r.t.Errorf("%s: found %v, want %v", step, got, want)
	}
}

func (r *rig) wantAgeBelow(step string, limit time.Duration) {
	r.t.Helper()
	if a, ok := r.age(); !ok || a > limit.Seconds() {
		r.t.Errorf("%s: verified-through age %v (exported %v), want at most %v", step, a, ok, limit)
	}
}

// TestContinuous: each fault injected on a copy moves its counter by
// exactly one and keeps it there, and verified-through keeps moving past
// it: the age stays a couple of intervals.
func TestContinuous(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fault acts on source entries 0..19 and their copies (written
		// in order but for what it changes).
		fault func(r *rig)
		want  map[Kind]float64
	}{
		{"clean", func(r *rig) { r.copyAll(0, 20) }, map[Kind]float64{}},
		{"a copy written twice", func(r *rig) {
			r.copyAll(0, 10)
			r.write(r.copyOf(3))
			r.copyAll(10, 20)
		}, map[Kind]float64{Duplicated: 1}},
		{"another payload under a copy's origin", func(r *rig) {
			r.copyAll(0, 20)
			c := r.copyOf(5)
			c.Payload = []byte("not what east holds")
			r.write(c)
		}, map[Kind]float64{Divergent: 1}},
		{"an entry never copied", func(r *rig) { r.copyAll(0, 20, 7) }, map[Kind]float64{Missing: 1}},
		{"two copies swapped", func(r *rig) {
			r.copyAll(0, 8)
			r.write(r.copyOf(9), r.copyOf(8))
			r.copyAll(10, 20)
		}, map[Kind]float64{OutOfOrder: 1}},
		{"a copy signed under another key", func(r *rig) {
			r.copyAll(0, 6)
			r.write(forward(r.t, r.sources[6], marker.NewKeys([]byte("another-marker-key-0123456789abcdef")), part, nil))
			r.copyAll(7, 20)
		}, map[Kind]float64{PresentUnproven: 1}},
		{"a signed copy of an entry the source never had", func(r *rig) {
			r.copyAll(0, 20)
			e := r.sources[4]
			e.ID.Entry = 1000
			r.write(forward(r.t, e, testKeys, part, nil))
		}, map[Kind]float64{TargetOnly: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t)
				r.start()
				r.rounds(1) // both sides empty: the walk starts at their ends
				r.produce(20)
				tc.fault(r)
				r.rounds(3)
				r.wantFound("after the fault", tc.want)
				r.wantAgeBelow("after the fault", 2*interval)
				// The walk goes on past it, and counts nothing twice.
				r.produce(10)
				r.copyAll(20, 30)
				r.rounds(3)
				r.wantFound("10 entries later", tc.want)
				r.wantAgeBelow("10 entries later", 2*interval)
				if n, tn := r.read(), r.tgt.count(part); n != float64(30+tn) {
					t.Errorf("read %v messages, want each entry of both sides once (30 + %d)", n, tn)
				}
			})
		})
	}
}

// TestContinuousResume: a walk that starts while the target holds copies
// already starts AnchorBack entries before the target's end, from the
// first proven copy there: the source from the entry after the one it
// copies, so that what the pipe copied before the verifier came up is
// verified too, and nothing earlier is read.
func TestContinuousResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.produce(200)
		// The target's own data first, then the copies of 0..148 and one
		// lost (120, within AnchorBack of the end).
		mb := wire.MetadataBuilder{ProducerName: "west-app"}
		r.write(wire.Entry{Metadata: mb.Append(nil), Payload: []byte("local"), NumMessages: 1})
		r.copyAll(0, 150, 120)
		r.start()
		r.rounds(1)
		r.copyAll(150, 200)
		r.rounds(3)
		r.wantFound("resumed", map[Kind]float64{Missing: 1})
		// The target's end is its entry 149: the walk starts at its entry
		// 49, the copy of 48 (the anchor), and reads the target from
		// there (49..199: 151 entries) and the source after 48 (49..199:
		// 151).
		if n := r.read(); n != 151+151 {
			t.Errorf("read %v messages, want 302: from the anchor on, once", n)
		}
	})
}

// TestContinuousStandby: a partition whose cursor is active on another
// instance is not read here; its walk and its age series are kept for
// InactiveGrace (a session restart's backoff) and go after it.
func TestContinuousStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.start()
		r.rounds(1)
		r.produce(5)
		r.copyAll(0, 5)
		r.rounds(2)
		if _, ok := r.age(); !ok {
			t.Fatal("no age series while active")
		}
		r.active.Store(false)
		r.rounds(1)
		opened := r.src.readers() + r.tgt.readers()
		read := r.read()
		r.produce(5)
		r.copyAll(5, 10)
		r.rounds(3)
		if a, ok := r.age(); !ok || a < 3 {
			t.Errorf("age %v s (exported %v) 4 s into a standby: want the series kept, growing", a, ok)
		}
		if now := r.src.readers() + r.tgt.readers(); now != opened || r.read() != read {
			t.Errorf("standby read: readers %d -> %d, messages %v -> %v", opened, now, read, r.read())
		}
		r.rounds(int(InactiveGrace / interval))
		if _, ok := r.age(); ok {
			t.Error("age series left after a standby of InactiveGrace")
		}
	})
}

// TestContinuousSessionRestart: a partition whose session restarts (its
// cursor inactive for the backoff) keeps its walk, so that a copy
// written twice meanwhile is counted when the walk goes on, even when it
// copies an entry more than AnchorBack entries back (a walk started
// again at the target's end would take it for one before its range);
// and the age series stays. A partition the pair no longer runs is
// forgotten at once.
func TestContinuousSessionRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		var gone atomic.Bool
		r.cfg.Partitions = func() []Assigned {
			if gone.Load() {
				return nil
			}
			return []Assigned{{Partition: part, Active: &r.active}}
		}
		r.start()
		r.rounds(1)
		r.produce(150)
		r.copyAll(0, 150)
		r.rounds(2)
		r.wantFound("clean", map[Kind]float64{})
		r.active.Store(false)
		r.rounds(2)
		r.write(r.copyOf(3))
		r.produce(10)
		r.copyAll(150, 160)
		r.rounds(3)
		if _, ok := r.age(); !ok {
			t.Error("age series gone during a session restart's backoff")
		}
		r.active.Store(true)
		r.rounds(3)
		r.wantFound("after the restart", map[Kind]float64{Duplicated: 1})
		r.wantAgeBelow("after the restart", 2*interval)

		gone.Store(true)
		r.rounds(1)
		if _, ok := r.age(); ok {
			t.Error("age series left for a partition the pair no longer runs")
		}
	})
}

// TestContinuousThrottled: the rate limit bounds what is read, whatever
// the copy's rate; the age shows the verifier falling behind.
func TestContinuousThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.cfg.Limiter = cluster.NewLimiter(100)
		r.start()
		r.rounds(1)
		r.produce(1000)
		r.copyAll(0, 1000)
		r.rounds(5)
		if n := r.read(); n > 5*100+10 || n < 4*100 {
			t.Errorf("read %v messages in 5 s at 100 a second", n)
		}
		if a, _ := r.age(); a < 4 {
			t.Errorf("age %v s while the verifier is behind, want it growing", a)
		}
	})
}

// TestContinuousLaggingTarget: while the target has no copies, the
// source is read only half a window ahead, and nothing is counted.
func TestContinuousLaggingTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.cfg.Window = 64
		r.start()
		r.rounds(1)
		r.produce(500)
		r.rounds(5)
		if n := r.read(); n != 32 {
			t.Errorf("read %v source messages ahead of the copies, want half the window (32)", n)
		}
		r.wantFound("behind", map[Kind]float64{})
		if a, _ := r.age(); a < 4 {
			t.Errorf("age %v s with nothing copied for 5 s", a)
		}
		r.copyAll(0, 500)
		r.rounds(3)
		r.wantFound("caught up", map[Kind]float64{})
		r.wantAgeBelow("caught up", 2*interval)
	})
}
