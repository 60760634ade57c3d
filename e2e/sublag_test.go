package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestSubscriptionFollowsLaggingConsumer: an application on east that
// acknowledges each message two seconds after it got it (a steady
// backlog of about a hundred entries at 50 msg/s, as a consumer with a
// slow handler or a deep receive queue keeps) is followed on west while
// the load runs. The follow used to wait for the consumers to pass the
// snapshot that had just completed; with one completing every second and
// this consumer always two seconds behind, it never did, and west's copy
// stayed at the start until the load stopped.
func TestSubscriptionFollowsLaggingConsumer(t *testing.T) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "lagging")
	const (
		sub  = "app"
		rate = 50 // messages a second
		load = 30 * time.Second
		lag  = 2 * time.Second
	)
	CreatePartitioned(t, topic, 0, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	app, err := east.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Failover,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	wc, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Failover,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	wc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			m, err := app.Receive(ctx)
			if err != nil {
				return
			}
			time.AfterFunc(lag, func() { _ = app.Ack(m) })
		}
	}()
	StartSidecar(t, []string{"east", "west"}, syncEntries(ns, sub, "east", "west"))

	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var sent atomic.Int64
	go func() {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for end := time.Now().Add(load); time.Now().Before(end); {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			i := sent.Add(1)
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i))}, nil)
		}
	}()
	// While the load runs, west's copy must stay within a few seconds of
	// traffic of east's: the excess is what a failover now would deliver
	// again.
	start := time.Now()
	var excess []int64
	for time.Since(start) < load-2*time.Second {
		time.Sleep(time.Second)
		e, w := backlogOf(t, "east", topic, sub), backlogOf(t, "west", topic, sub)
		t.Logf("%v into the load: %d sent; backlog east %d, west %d", time.Since(start).Round(time.Second), sent.Load(), e, w)
		if e >= 0 && w >= 0 && time.Since(start) >= 15*time.Second {
			excess = append(excess, w-e)
		}
	}
	// The median from 15 s on against ten seconds of traffic: the copy
	// followed is a second or two of traffic behind (the snapshots'
	// markers count too); one never followed is the whole load behind,
	// over 750 entries by then and growing.
	slices.Sort(excess)
	if len(excess) == 0 || excess[len(excess)/2] > 10*rate {
		t.Fatalf("west's copy was not followed during the load: excess from 15 s on %v (want a median of at most %d)", excess, 10*rate)
	}
}
