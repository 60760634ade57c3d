package entrypath

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
)

// The open cursors share their pool: each window is the pool over their
// number, at most cursorWindowBytes, so that the windows together stay
// within the pool; a cursor that leaves (twice, even) gives its share
// back.
func TestReceivePoolWindows(t *testing.T) {
	p := newReceivePool(receiveBudget, nil)
	var leaves []func()
	join := func(n int) {
		for range n {
			leaves = append(leaves, p.join())
		}
	}
	for _, tc := range []struct {
		name string
		join int
		want int64
	}{
		{"none open", 0, cursorWindowBytes},
		{"one", 1, cursorWindowBytes},
		{"sixteen: the whole window each", 15, cursorWindowBytes},
		{"seventeen: the pool shared", 1, receiveBudget / 17},
		{"10,000: a share each, no floor", 9983, receiveBudget / 10_000},
	} {
		join(tc.join)
		if got := p.window(); got != tc.want {
			t.Errorf("%s (%d open): window %d, want %d", tc.name, len(leaves), got, tc.want)
		}
		if int64(len(leaves))*p.window() > receiveBudget {
			t.Errorf("%s: %d windows of %d exceed the pool", tc.name, len(leaves), p.window())
		}
	}
	for _, leave := range leaves[1:] {
		leave()
		leave()
	}
	if got := p.window(); got != cursorWindowBytes || p.open.Load() != 1 {
		t.Errorf("after all but one left: %d open, window %d, want 1 and %d", p.open.Load(), got, cursorWindowBytes)
	}
}

// admissions records the admit calls of a pool's waiters, by name.
type admissions struct {
	mu  sync.Mutex
	got []string
	n   map[string]int64
}

func (a *admissions) admit(name string) func(int64) {
	return func(n int64) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.n == nil {
			a.n = map[string]int64{}
		}
		if _, twice := a.n[name]; twice {
			panic(name + " admitted twice")
		}
		a.got = append(a.got, name)
		a.n[name] = n
	}
}

func (a *admissions) order() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

func (a *admissions) bytes(name string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[name]
}

// The pool's line: what fits is reserved at once while no one waits;
// waiters are served first come first, each with what fits of its least
// to its most, the first blocking those behind it (no partition starves
// behind smaller ones); TryAcquire takes nothing while someone waits;
// releasing bytes, or entries held, lets waiters in; a waiter that
// leaves is never admitted; an entry larger than the pool passes alone.
func TestReceivePoolLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newReceivePool(100, nil)
		var a admissions
		if got, _ := p.Acquire(30, 60, a.admit("x")); got != 60 {
			t.Fatalf("first Acquire(30, 60) on an empty pool got %d, want 60", got)
		}
		if !p.TryAcquire(30) {
			t.Fatal("TryAcquire(30) refused with 40 free and no one waiting")
		}
		p.Hold(10) // entries arrive whatever the room
		if got, _ := p.Acquire(20, 50, a.admit("big")); got != 0 {
			t.Fatalf("Acquire(20, 50) with nothing free got %d", got)
		}
		if got, _ := p.Acquire(5, 5, a.admit("small")); got != 0 {
			t.Fatalf("Acquire(5, 5) behind a waiter got %d, want to wait its turn", got)
		}
		_, cancelGone := p.Acquire(1, 1, a.admit("gone"))
		if got, _ := p.Acquire(1, 1, a.admit("last")); got != 0 {
			t.Fatal("admitted past the line")
		}
		if p.TryAcquire(1) {
			t.Fatal("TryAcquire took room while others wait")
		}
		if !cancelGone() {
			t.Fatal("cancel of a waiter in line reported it served")
		}
		p.Release(15) // 15 of x's free: less than big's least, and small waits behind it
		if o := a.order(); len(o) != 0 {
			t.Fatalf("admitted %v with 15 free, want no one (big first, least 20)", o)
		}
		if p.TryAcquire(10) {
			t.Fatal("TryAcquire(10) took room that the first waiter waits for")
		}
		p.Hold(-10) // entries confirmed: 25 free
		if o := a.order(); !slices.Equal(o, []string{"big"}) || a.bytes("big") != 25 {
			t.Fatalf("admitted %v (big %d), want big with the 25 free", o, a.bytes("big"))
		}
		p.Release(45) // the rest of x's
		if o := a.order(); !slices.Equal(o, []string{"big", "small", "last"}) {
			t.Fatalf("admitted %v, want big, small, last in order (gone left)", o)
		}
		used, held, waiting := p.state()
		if used != 30+25+5+1 || held != 0 || waiting != 0 {
			t.Errorf("pool at %d (%d held), %d waiting; want 61, 0, 0", used, held, waiting)
		}
		p.Release(61)
		if got, _ := p.Acquire(500, 800, a.admit("huge")); got != 500 {
			t.Errorf("Acquire(500, 800) on an empty pool of 100 got %d, want 500 (passes alone)", got)
		}
		p.Release(500)
		synctest.Wait()
	})
}

// The first waiter leaving lets the next in if it fits, with no release
// to prompt it (leaving runs under the cursor's lock, so the pool's timer
// serves the line).
func TestReceivePoolFirstWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newReceivePool(100, nil)
		var a admissions
		p.TryAcquire(90)
		p.Hold(5)
		_, cancel := p.Acquire(50, 50, a.admit("first"))
		p.Acquire(5, 5, a.admit("next"))
		cancel()
		synctest.Wait()
		if o := a.order(); !slices.Equal(o, []string{"next"}) {
			t.Fatalf("admitted %v after the first waiter left, want next", o)
		}
		p.Release(90)
		p.Hold(-5)
		p.Release(5)
	})
}

// An admit func that hands bytes back (a cursor let in that no longer
// needs them) admits the next waiter without nesting admit calls.
func TestReceivePoolAdmitReleases(t *testing.T) {
	p := newReceivePool(100, nil)
	p.TryAcquire(100)
	depth, deepest := 0, 0
	var order []int
	const waiters = 1000
	for i := range waiters {
		p.Acquire(100, 100, func(n int64) {
			depth++
			deepest = max(deepest, depth)
			order = append(order, i)
			p.Release(n)
			depth--
		})
	}
	p.Release(100)
	if len(order) != waiters || deepest != 1 {
		t.Fatalf("%d of %d admitted, admit calls nested %d deep; want all, 1", len(order), waiters, deepest)
	}
	if !slices.IsSorted(order) {
		t.Error("admitted out of order")
	}
	if used, _, waiting := p.state(); used != 0 || waiting != 0 {
		t.Errorf("pool at %d, %d waiting; want 0, 0", used, waiting)
	}
}

// Permits out on partitions gone idle cannot be taken back: a pool full
// of their reservations lets its first waiter in past its size once the
// line has stood still for admitIdleAfter, with what the entries held
// leave. A pool full of entries held (a target that confirms nothing)
// lets no one in however long the line stands.
func TestReceivePoolIdleValve(t *testing.T) {
	for _, tt := range []struct {
		name     string
		held     int64 // of the 100 used
		admitted bool
		got      int64
	}{
		{"only permits reserved", 0, true, 40},
		{"a few entries held", 30, true, 40},
		{"entries leave less than its least", 80, false, 0},
		{"entries fill the pool", 100, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newReceivePool(100, nil)
				p.TryAcquire(100 - tt.held)
				p.Hold(tt.held)
				var a admissions
				start := time.Now()
				_, cancel := p.Acquire(25, 40, a.admit("waiter"))
				time.Sleep(admitIdleAfter / 2)
				synctest.Wait()
				if len(a.order()) != 0 {
					t.Fatal("let in before the line stood still for admitIdleAfter")
				}
				time.Sleep(100 * admitIdleAfter)
				synctest.Wait()
				if admitted := len(a.order()) == 1; admitted != tt.admitted {
					t.Fatalf("after %v admitted %v, want %v", time.Since(start), admitted, tt.admitted)
				}
				if tt.admitted && a.bytes("waiter") != tt.got {
					t.Errorf("let in with %d bytes, want %d", a.bytes("waiter"), tt.got)
				}
				if !tt.admitted {
					cancel()
				}
				synctest.Wait()
			})
		})
	}
}

// A target that stops confirming fills its own pool with entries it
// cannot release: the cursors of another target go on, and its own
// waiters stay out (no idle valve for a pool of entries held).
func TestReceivePoolsIsolateTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		pools := NewReceivePools(200, []string{"west", "north", "west"}, m)
		west, north := pools.Of("west"), pools.Of("north")
		if west == nil || north == nil || west == north {
			t.Fatalf("pools west %p, north %p: want one each", west, north)
		}
		if pools.Of("south") != nil {
			t.Fatal("a pool for a target not given")
		}
		// west's cursors receive their windows and hold every entry.
		for range 5 {
			if !west.TryAcquire(20) {
				t.Fatal("west refused its own share")
			}
			west.Hold(20)
			west.Release(20)
		}
		var a admissions
		_, cancel := west.Acquire(10, 20, a.admit("west"))
		// north's cursors copy 10 simulated minutes of entries meanwhile.
		copied := 0
		for start := time.Now(); time.Since(start) < 10*time.Minute; time.Sleep(time.Second) {
			got, _ := north.Acquire(30, 30, a.admit("north"+time.Since(start).String()))
			if got != 30 {
				t.Fatalf("north waited at %v with west stuck", time.Since(start))
			}
			north.Hold(30)
			north.Release(30)
			north.Hold(-30)
			copied++
		}
		if copied != 600 {
			t.Errorf("north copied %d windows in 10 minutes while west held its pool, want 600", copied)
		}
		synctest.Wait()
		if len(a.order()) != 0 {
			t.Fatalf("%v let in; west's waiter must stay out while its entries fill its pool", a.order())
		}
		gauge := metricstest.Gauges(t, reg, "geo_sidecar_receive_reserved_bytes")
		waiting := metricstest.Gauges(t, reg, "geo_sidecar_receive_waiting_cursors")
		if gauge["/west"] != 100 || gauge["/north"] != 0 || waiting["/west"] != 1 || waiting["/north"] != 0 {
			t.Errorf("gauges %v, waiting %v; want west 100 with 1 waiting, north 0", gauge, waiting)
		}
		cancel()
		west.Hold(-100)
	})
}

// receiveBudget is the default receive budget, in the pools' terms.
const receiveBudget = int64(config.DefaultReceiveBudget)
