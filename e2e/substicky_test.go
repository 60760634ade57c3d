package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// stickyApp is an application's Key_Shared STICKY consumer over the hash
// ranges given (pairs, inclusive), acknowledging everything it receives
// and counting the data.
type stickyApp struct {
	c    pulsar.Consumer
	got  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func subscribeSticky(t *testing.T, c pulsar.Client, topic, sub, name string, ranges ...int) *stickyApp {
	t.Helper()
	policy, err := pulsar.NewKeySharedPolicySticky(ranges)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Name: name, Type: pulsar.KeyShared,
		KeySharedPolicy: policy, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 10})
	if err != nil {
		t.Fatalf("subscribe %s on %s (STICKY %v): %v", sub, topic, ranges, err)
	}
	a := &stickyApp{c: cons, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			select {
			case <-a.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			m, err := cons.Receive(ctx)
			cancel()
			if err != nil {
				continue
			}
			_ = cons.Ack(m)
			if !marker.Is(m) {
				a.got.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		close(a.stop)
		<-a.done
		cons.Close()
	})
	return a
}

// keyedLoad publishes n messages with 16 keys to topic, rate a second.
func keyedLoad(t *testing.T, c pulsar.Client, topic, prefix string, rate, n int) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%16),
			Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestSubscriptionStickyNotLockedOut: a Key_Shared STICKY application on
// west keeps consuming through topic unloads while updates from east
// arrive (issue 34, item 4). The stats never carry the Key_Shared mode;
// with the application's consumers attached as far as a reading showed,
// a move attached as AUTO_SPLIT and relied on the broker refusing it
// (ConsumerBusy, retried every 30 s). Had the consumers all been gone at
// that moment (a topic unload), the move's consumer would have been the
// only one, the dispatcher made AUTO_SPLIT, and the application's
// reconnecting STICKY consumers refused for good (pulsar-client-go
// treats ConsumerBusy as final: design E5). Now no move attaches to a
// Key_Shared subscription whose mode is not known to be AUTO_SPLIT: the
// update is refused (counted none/refused-type, logged), and the
// application's consumers reconnect after each unload and go on.
func TestSubscriptionStickyNotLockedOut(t *testing.T) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	const sub = "app"
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "orders")
	eastC, westC := Client(t, "east"), Client(t, "west")
	subscribeSticky(t, eastC, topic, sub, "east-app", 0, 65535)
	west := []*stickyApp{
		subscribeSticky(t, westC, topic, sub, "west-app-lo", 0, 32767),
		subscribeSticky(t, westC, topic, sub, "west-app-hi", 32768, 65535),
	}
	s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, sub, "east", "west"))
	westGot := func() int64 { return west[0].got.Load() + west[1].got.Load() }

	// Updates flow from east while west's topic is unloaded three times.
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		keyedLoad(t, eastC, topic, "e", 50, 1500)
	}()
	received := func() float64 {
		return s.Metric("geo_sidecar_subscription_updates_received_total", `cluster="west"`)
	}
	Eventually(t, 60*time.Second, func() error {
		if received() == 0 {
			return fmt.Errorf("no update received on west yet")
		}
		return nil
	})
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		before := received()
		if err := Admin(t, "west").Topics().Unload(*tn); err != nil {
			t.Fatalf("unload %d of %s on west: %v", i, topic, err)
		}
		// The next update after the unload, while the application's
		// consumers reconnect.
		Eventually(t, 30*time.Second, func() error {
			if received() <= before {
				return fmt.Errorf("no update received on west since unload %d", i)
			}
			return nil
		})
	}
	<-loaded

	// West's application is attached again with both consumers and
	// consumes what comes next.
	Eventually(t, 60*time.Second, func() error {
		st := subStatsOf(t, "west", topic, sub)
		apps := 0
		for _, c := range st.Consumers {
			if strings.HasPrefix(c.ConsumerName, "west-app") {
				apps++
			}
		}
		if apps != 2 {
			return fmt.Errorf("%d of west's 2 STICKY consumers attached (%v): locked out", apps, connectedSince(st))
		}
		return nil
	})
	got := westGot()
	keyedLoad(t, westC, topic, "w", 100, 100)
	Eventually(t, 60*time.Second, func() error {
		if n := westGot() - got; n < 100 {
			return fmt.Errorf("west's application consumed %d of the 100 published after the unloads", n)
		}
		return nil
	})

	protocol := s.Metric("geo_sidecar_subscription_updates_received_total", `cluster="west"`, `route="protocol"`)
	refused := s.Metric("geo_sidecar_subscription_updates_received_total", `cluster="west"`, `route="none"`, `outcome="refused-type"`)
	t.Logf("west: %v updates received, %v refused without an attach, %v over the protocol; the application consumed %d",
		received(), refused, protocol, westGot())
	if protocol != 0 {
		t.Errorf("%v updates attached to west's Key_Shared subscription over the protocol, its mode not known to be AUTO_SPLIT", protocol)
	}
	if refused == 0 {
		t.Errorf("no update refused as refused-type on west")
	}
	log, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "subscription update not applied: its type cannot be moved with consumers attached") {
		t.Errorf("the sidecar's log does not say why the updates were refused")
	}
}
