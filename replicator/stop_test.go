package replicator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire/wiretest"
)

// wireConns are a test's clusters as a stop sees them: their wire
// clients. closing is set when Close starts.
type wireConns struct {
	clients []*wire.Client
	closing atomic.Bool
}

func (w *wireConns) Exiting() {
	for _, c := range w.clients {
		c.Exiting()
	}
}

func (w *wireConns) Close() {
	w.closing.Store(true)
	for _, c := range w.clients {
		_ = c.Close()
	}
}

// TestStopHonoursItsDeadline: brokers that never answer a close, nor
// confirm an entry in flight, do not hold the stop past its deadline.
// One partition closes its cursor and producer: the closes write their
// command and return at once, before any connection is closed
// (Exiting), where each waited up to its operation timeout (an hour
// here). Another waits for its producer's receipt without a bound of its
// own: the connections closed under it at the cut end the wait, its
// entry fails and is not confirmed, and the stop ends in time with
// nothing acknowledged on the source.
func TestStopHonoursItsDeadline(t *testing.T) {
	source, target := wiretest.New(t), wiretest.New(t)
	never := func(_ *wiretest.Conn, cmd wire.Command, _ wire.Frame) bool {
		switch cmd.Body.(type) {
		case *wire.CloseConsumer, *wire.CloseProducer, *wire.Send:
			return true // never answered
		}
		return false
	}
	source.Handle(never)
	target.Handle(never)
	client := func(b *wiretest.Broker) *wire.Client {
		c, err := wire.NewClient(wire.ClientOptions{ServiceURL: b.URL(), OperationTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	conns := &wireConns{clients: []*wire.Client{client(source), client(target)}}
	src, dst := conns.clients[0], conns.clients[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type partition struct {
		cons *wire.Consumer
		prod *wire.Producer
	}
	open := func(topic string) partition {
		cons, err := wire.Subscribe(ctx, src, wire.ConsumerOptions{Topic: topic, Subscription: "geo-sidecar.west"})
		if err != nil {
			t.Fatal(err)
		}
		prod, err := wire.CreateProducer(ctx, dst, wire.ProducerOptions{Topic: topic, Name: "geo-sidecar-east"})
		if err != nil {
			t.Fatal(err)
		}
		return partition{cons, prod}
	}
	closing, draining := open("persistent://t/ns/a-partition-0"), open("persistent://t/ns/a-partition-1")
	sent := make(chan error, 1)
	md := wire.MetadataBuilder{ProducerName: "geo-sidecar-east", SequenceID: 1, PublishTime: 1}.Append(nil)
	if err := draining.prod.Send(ctx, wire.Outgoing{Metadata: md, Payload: []byte("x"), NumMessages: 1, SequenceID: 1},
		func(_ wire.Receipt, err error) { sent <- err }); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var closedFirst atomic.Bool
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = closing.prod.Close()
		_ = closing.cons.Close()
		closedFirst.Store(!conns.closing.Load())
	}()
	go func() {
		defer wg.Done()
		_ = draining.prod.Flush(context.Background()) // no bound of its own
		_ = draining.prod.Close()
		_ = draining.cons.Close()
	}()
	pairsDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(pairsDone)
	}()

	stopped := make(chan error, 1)
	go func() { stopped <- stopWithin(zaptest.NewLogger(t), 2*time.Second, pairsDone, conns) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v, want every partition and connection ended in time", err)
		}
	case <-ctx.Done():
		t.Fatal("the stop did not return")
	}
	select {
	case <-pairsDone:
	default:
		t.Fatal("the stop returned nil with partitions still stopping")
	}
	if !closedFirst.Load() {
		t.Error("the closes waited for the connections' close: they waited for a broker reply")
	}
	if err := <-sent; err == nil {
		t.Error("the entry in flight was confirmed without a receipt")
	}
	if acks := source.Commands(wire.TypeAck); len(acks) > 0 {
		t.Errorf("%d acknowledgements reached the source during the stop, want none", len(acks))
	}
	// The closes were asked for (and never answered: the connections'
	// close ended them on the broker).
	if n, m := len(source.Commands(wire.TypeCloseConsumer)), len(target.Commands(wire.TypeCloseProducer)); n == 0 || m == 0 {
		t.Errorf("closes written: %d of consumers, %d of producers; want the cursor's and the producer's", n, m)
	}
}

// stuckConns are connections whose close does not return until the
// test ends.
type stuckConns struct{ release chan struct{} }

func (s *stuckConns) Exiting() {}
func (s *stuckConns) Close()   { <-s.release }

// TestStopDeadlineNamesWhatIsLeft: past its deadline the stop returns,
// whatever still runs, and says what that is. In a bubble (synctest):
// with real time, a loaded machine left the closing goroutine of an
// instant Close unscheduled for the 60 ms between the cut and the
// deadline, and the message named connections too.
func TestStopDeadlineNamesWhatIsLeft(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pairsEnd  bool
		stuck     bool
		wantError string
	}{
		{"partitions that never end", false, false, "stop deadline (200ms) passed with partitions still stopping"},
		{"connections that never close", true, true, "stop deadline (200ms) passed with connections still closing"},
		{"both", false, true, "stop deadline (200ms) passed with partitions still stopping and connections still closing"},
		{"neither", true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var conns connections = &wireConns{}
				if tc.stuck {
					stuck := &stuckConns{release: make(chan struct{})}
					defer close(stuck.release)
					conns = stuck
				}
				pairsDone := make(chan struct{})
				if tc.pairsEnd {
					close(pairsDone)
				}
				err := stopWithin(zaptest.NewLogger(t), 200*time.Millisecond, pairsDone, conns)
				if got := fmt.Sprint(err); (err == nil) != (tc.wantError == "") || (err != nil && got != tc.wantError) {
					t.Errorf("stop: %v, want %q", err, tc.wantError)
				}
			})
		})
	}
}
