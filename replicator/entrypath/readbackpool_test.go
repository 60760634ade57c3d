package entrypath

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// concurrency counts what runs at once and the most that ever did.
type concurrency struct {
	mu        sync.Mutex
	now, most int
}

func (c *concurrency) enter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now++
	c.most = max(c.most, c.now)
}

func (c *concurrency) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now--
}

// 1,000 read-backs at once (a target back under 1,000 partitions) run
// at most limit/window at a time, hold within the pool, are let in in
// the order they came, and every one of them runs (none fails for want
// of room); the gauges show the pool full and the line.
//
// Fails for: the room check in acquire or serve ignoring the limit (all
// 1,000 run at once), serve letting in none, or a line that is not first
// come first served.
func TestReadBackPoolBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		pools := NewReadBackPools(int64(config.DefaultReadBackBudget), []string{"west"}, metrics.New(reg))
		p := pools.Of("west")
		if p.Window() != readbackWindowBytes || p.Limit() != int64(config.DefaultReadBackBudget) {
			t.Fatalf("pool %d bytes, window %d; want %d and %d", p.Limit(), p.Window(), config.DefaultReadBackBudget, readbackWindowBytes)
		}
		slots := int(p.Limit() / p.Window())
		const n = 1000
		var (
			c     concurrency
			mu    sync.Mutex
			order []int
			fails []error
			wg    sync.WaitGroup
			done  [n]chan struct{}
		)
		for i := range n {
			done[i] = make(chan struct{})
			wg.Go(func() {
				release, err := p.acquire(context.Background())
				if err != nil {
					mu.Lock()
					fails = append(fails, err)
					mu.Unlock()
					return
				}
				c.enter()
				if used, _ := p.state(); used > p.Limit() {
					t.Errorf("pool holds %d bytes, over its %d", used, p.Limit())
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				<-done[i]
				c.leave()
				release()
				release() // twice: given back once
			})
			synctest.Wait() // in line before the next comes
		}
		if used, waiting := p.state(); used != p.Limit() || waiting != n-slots {
			t.Errorf("with %d read-backs: %d bytes held and %d waiting, want %d and %d", n, used, waiting, p.Limit(), n-slots)
		}
		reserved := metricstest.Gauges(t, reg, "geo_sidecar_readback_reserved_bytes")
		waiting := metricstest.Gauges(t, reg, "geo_sidecar_readback_waiting_partitions")
		if reserved["/west"] != float64(p.Limit()) || waiting["/west"] != n-float64(slots) {
			t.Errorf("gauges: reserved %v, waiting %v; want %d and %d", reserved, waiting, p.Limit(), n-slots)
		}
		for i := range n { // one ends at a time: the next let in records its turn
			close(done[i])
			synctest.Wait()
		}
		wg.Wait()
		if len(fails) != 0 {
			t.Fatalf("%d read-backs failed (%v), want all to wait their turn", len(fails), fails[0])
		}
		if len(order) != n || !slices.IsSorted(order) {
			t.Errorf("%d read-backs ran, in order %v...; want all %d, first come first served", len(order), order[:min(len(order), 20)], n)
		}
		if c.most != slots {
			t.Errorf("at most %d read-backs ran at once, want %d (the budget over the window: %d × %d bytes)", c.most, slots, slots, p.Window())
		}
		if used, waiting := p.state(); used != 0 || waiting != 0 {
			t.Errorf("after all: %d bytes held and %d waiting, want 0 and 0", used, waiting)
		}
		if reserved := metricstest.Gauges(t, reg, "geo_sidecar_readback_reserved_bytes"); reserved["/west"] != 0 {
			t.Errorf("reserved gauge %v after all, want 0", reserved)
		}
	})
}

// A read-back whose session ends while it waits leaves the line with the
// session's error and holds nothing; the one behind it moves up. A pool
// smaller than the window has one window of its size: one read-back at a
// time, never none.
//
// Fails for: a cancelled waiter left in the line (the one behind it
// waits for ever), or one that keeps room.
func TestReadBackPoolCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newReadBackPool(3<<20, nil)
		if p.Window() != 3<<20 {
			t.Fatalf("window %d in a pool of %d, want the whole pool", p.Window(), p.Limit())
		}
		release, err := p.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := p.acquire(ctx)
			errc <- err
		}()
		synctest.Wait()
		admitted := make(chan func(), 1)
		go func() {
			r, err := p.acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			admitted <- r
		}()
		synctest.Wait()
		if _, waiting := p.state(); waiting != 2 {
			t.Fatalf("%d waiting, want 2", waiting)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled wait returned %v, want context.Canceled", err)
		}
		release()
		(<-admitted)()
		if used, waiting := p.state(); used != 0 || waiting != 0 {
			t.Errorf("after all: %d bytes held and %d waiting, want 0 and 0", used, waiting)
		}
	})
}

// blockingTail is a remote partition of one entry whose reads take a
// second each; it counts the read-backs that read at once.
type blockingTail struct{ c *concurrency }

func (b blockingTail) last(context.Context) (marker.Position, bool, error) {
	b.c.enter()
	defer b.c.leave()
	time.Sleep(time.Second)
	return marker.Position{Ledger: 7, Entry: 0, Batch: -1}, true, nil
}

func (b blockingTail) ledgers(context.Context) ([]ledgerInfo, error) { return nil, nil }

func (b blockingTail) read(_ context.Context, from, _ marker.Position, fn func(marker.Position, entryCopy)) error {
	b.c.enter()
	defer b.c.leave()
	time.Sleep(time.Second)
	fn(from, entryCopy{})
	return nil
}

// The entry pipe's read-back (copiedSince) takes its room in the
// target's read-back pool: 200 partitions reading back at once read at
// most the pool's windows at a time, and all of them finish; the readers
// a read-back opens have the pool's window.
//
// Fails for: copiedSince not taking room (all 200 read at once), or the
// readers' window not the pool's.
func TestWireEndpointsReadBackBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool := newReadBackPool(3*readbackWindowBytes, nil)
		var c concurrency
		e := &wireEndpoints{local: testConn("east"), remote: testConn("west"), topic: "persistent://t/ns/x-partition-0",
			maxPending: 100, readBackPool: pool,
			readBack: func() (tailReader, error) { return blockingTail{&c}, nil }}
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				if _, err := e.copiedSince(context.Background(), marker.Position{Ledger: 7, Batch: -1}, 0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if c.most != 3 {
			t.Errorf("%d read-backs read at once, want 3 (a pool of 3 windows)", c.most)
		}
		if used, waiting := pool.state(); used != 0 || waiting != 0 {
			t.Errorf("after all: %d bytes held and %d waiting, want 0 and 0", used, waiting)
		}

		small := newReadBackPool(2<<20, nil)
		e.readBack, e.readBackPool = nil, small
		w, err := e.newWireTail()
		if err != nil {
			t.Fatal(err)
		}
		start := wire.MessageID{Ledger: 7, Partition: -1}
		if o := w.readerOptions(&start); o.MaxBytes == nil || o.MaxBytes() != 2<<20 {
			t.Errorf("a reader's window is not its pool's (%d bytes)", small.Window())
		}
		if o := w.readerOptions(nil); o.MaxBytes != nil || o.Permits != 1 || o.InitialPosition != wire.Latest {
			t.Errorf("probe: %d permits at %v, want 1 at the end", o.Permits, o.InitialPosition)
		}
	})
}

// The sidecar's pools: one per target, an equal share each.
func TestReadBackPoolsPerTarget(t *testing.T) {
	pools := NewReadBackPools(64<<20, []string{"west", "north", "west"}, nil)
	west, north := pools.Of("west"), pools.Of("north")
	if west == nil || north == nil || west == north || pools.Of("south") != nil {
		t.Fatalf("pools west %p, north %p, south %p: want one each for west and north", west, north, pools.Of("south"))
	}
	if west.Limit() != 32<<20 || west.Window() != readbackWindowBytes {
		t.Errorf("west: %d bytes, window %d; want %d and %d", west.Limit(), west.Window(), 32<<20, readbackWindowBytes)
	}
}

// A partition built from its Config reads back within the read-back pool
// given, and receives within the receive pool given.
//
// Fails for: New dropping Config.ReadBack or Config.Pool.
func TestNewPartitionTakesItsPools(t *testing.T) {
	rb, pool := newReadBackPool(readbackWindowBytes, nil), newReceivePool(1<<20, nil)
	p := New(Config{Local: testConn("east"), Remote: testConn("west"), Topic: "persistent://t/ns/x-partition-0",
		MaxPending: 10, Pool: pool, ReadBack: rb, Budget: newByteBudget(1<<20, nil)})
	e, ok := p.ends.(*wireEndpoints)
	if !ok {
		t.Fatalf("ends %T, want *wireEndpoints", p.ends)
	}
	if e.readBackPool != rb || e.pool != pool {
		t.Errorf("partition reads back within %p and receives within %p, want %p and %p", e.readBackPool, e.pool, rb, pool)
	}
}
