package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// wire.Client.MoveSubscription against a real broker, beside applications
// written with pulsar-client-go: the subscription's mark-delete position
// moves with no admin call, the applications' consumers stay connected
// (and active, for Failover) and keep receiving, and a subscription whose
// type refuses the move's consumer says so with ErrSubscriptionBusy
// (docs/design/subscription-follow.md §4; E1, E3, E6, E7).

const followName = "geo-sidecar.follow-e2e"

var followTypeNames = map[wire.SubType]string{wire.Failover: "Failover", wire.Shared: "Shared", wire.KeyShared: "Key_Shared"}

// followEvents records a Failover application's active-consumer events.
type followEvents struct {
	mu     sync.Mutex
	events []string
}

func (e *followEvents) BecameActive(_ pulsar.Consumer, _ string, partition int32) {
	e.add(fmt.Sprintf("active %d", partition))
}

func (e *followEvents) BecameInactive(_ pulsar.Consumer, _ string, partition int32) {
	e.add(fmt.Sprintf("inactive %d", partition))
}

func (e *followEvents) add(s string) {
	e.mu.Lock()
	e.events = append(e.events, s)
	e.mu.Unlock()
}

func (e *followEvents) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

func wireID(id pulsar.MessageID) wire.MessageID {
	return wire.EntryID(uint64(id.LedgerID()), uint64(id.EntryID()))
}

func followSubStats(t *testing.T, topic, sub string) utils.SubscriptionStats {
	t.Helper()
	st, err := Admin(t, "east").Topics().GetStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatalf("stats of %s: %v", topic, err)
	}
	s, ok := st.Subscriptions[sub]
	if !ok {
		t.Fatalf("no subscription %s on %s", sub, topic)
	}
	return s
}

func followMarkDelete(t *testing.T, topic, sub string) string {
	t.Helper()
	st, err := Admin(t, "east").Topics().GetInternalStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatalf("internal stats of %s: %v", topic, err)
	}
	return st.Cursors[sub].MarkDeletePosition
}

func followWaitMarkDelete(t *testing.T, topic, sub string, want wire.MessageID) {
	t.Helper()
	Eventually(t, 20*time.Second, func() error {
		if got := followMarkDelete(t, topic, sub); got != want.String() {
			return fmt.Errorf("mark-delete of %s on %s is %s, want %s", sub, topic, got, want)
		}
		return nil
	})
}

// followProduce publishes prefix-from .. prefix-(to-1) to topic, one
// entry each, and returns their ids by index.
func followProduce(t *testing.T, c pulsar.Client, topic, prefix string, from, to int) map[int]pulsar.MessageID {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer on %s: %v", topic, err)
	}
	defer p.Close()
	ids := map[int]pulsar.MessageID{}
	for i := from; i < to; i++ {
		id, err := p.Send(context.Background(), &pulsar.ProducerMessage{
			Payload: []byte(fmt.Sprintf("%s-%d", prefix, i)), Key: fmt.Sprintf("k%d", i%8),
		})
		if err != nil {
			t.Fatalf("send to %s: %v", topic, err)
		}
		ids[i] = id
	}
	return ids
}

// followIndex is the index of a message of followProduce with prefix, or
// -1.
func followIndex(m pulsar.Message, prefix string) int {
	s, ok := strings.CutPrefix(string(m.Payload()), prefix+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return i
}

func followReceive(t *testing.T, c pulsar.Consumer, n int) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []pulsar.Message
	for len(out) < n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("application consumer after %d of %d messages: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// followQuiet fails t when c receives anything within d.
func followQuiet(t *testing.T, c pulsar.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := c.Receive(ctx); err == nil {
		t.Errorf("application consumer received %q again (redelivered)", m.Payload())
	}
}

func followMove(t *testing.T, m wire.Move) (wire.MoveResult, time.Duration, error) {
	t.Helper()
	fc := wireClient(t, "east")
	start := time.Now()
	res, err := fc.MoveSubscription(context.Background(), m)
	return res, time.Since(start), err
}

// followAttached is scenarios (1) and (2): an application consumer of a
// 2-partition topic holds partition 0's m-50..99 unacknowledged (md m-49);
// the move takes the subscription to m-79 while it stays attached.
func followAttached(t *testing.T, typ pulsar.SubscriptionType, wtype wire.SubType) {
	UseClusters(t, "east")
	ns := NewNamespace(t, "east")
	topic := Topic(ns, "orders")
	p0 := topic + "-partition-0"
	const sub = "billing"
	CreatePartitioned(t, topic, 2, "east")
	pc := Client(t, "east")
	events := &followEvents{}
	opts := pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: sub, Name: "worker", Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	}
	if typ == pulsar.Failover {
		opts.EventListener = events
	}
	app, err := pc.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ids := followProduce(t, pc, p0, "m", 0, 100)
	followProduce(t, pc, topic+"-partition-1", "p1", 0, 10)
	for _, m := range followReceive(t, app, 110) {
		if i := followIndex(m, "m"); i < 0 || i < 50 {
			if err := app.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	followWaitMarkDelete(t, p0, sub, wireID(ids[49]))
	before := followSubStats(t, p0, sub)
	if len(before.Consumers) != 1 {
		t.Fatalf("consumers before the move: %+v", before.Consumers)
	}
	eventsBefore := events.list()
	mdBefore := followMarkDelete(t, p0, sub)

	res, took, err := followMove(t, wire.Move{Topic: p0, Subscription: sub, Type: wtype, ConsumerName: followName, To: wireID(ids[79])})
	if err != nil {
		t.Fatal(err)
	}
	want := wireID(ids[79])
	if res.MarkDelete != want || !res.Reached() || res.Target != want {
		t.Errorf("move reported mark-delete %v (target %v), want %v", res.MarkDelete, res.Target, want)
	}
	if wtype == wire.Failover && res.ActiveTold && res.Active {
		t.Errorf("the move's consumer was made the active one")
	}
	if wtype != wire.Failover && (!res.HasBefore || res.Before != wireID(ids[49]) || res.Acked != 30) {
		t.Errorf("before %v (%v), %d acked; want %v, 30", res.Before, res.HasBefore, res.Acked, wireID(ids[49]))
	}
	mdAfter := followMarkDelete(t, p0, sub)
	if mdAfter != want.String() {
		t.Errorf("mark-delete after the move %s, want %s", mdAfter, want)
	}
	after := followSubStats(t, p0, sub)
	if len(after.Consumers) != 1 || after.Consumers[0].ConsumerName != "worker" ||
		after.Consumers[0].ConnectedSince != before.Consumers[0].ConnectedSince {
		t.Errorf("consumers after the move %+v, before %+v", after.Consumers, before.Consumers)
	}
	if typ == pulsar.Failover && (before.ActiveConsumerName != "worker" || after.ActiveConsumerName != "worker") {
		t.Errorf("active consumer %q before, %q after the move, want worker", before.ActiveConsumerName, after.ActiveConsumerName)
	}
	t.Logf("move took %s (attached %s, told active %v/%v, broker %s): mark-delete %s -> %s; app connectedSince %s -> %s; unacked %d -> %d; type %s",
		took.Round(10*time.Microsecond), res.Attached.Round(10*time.Microsecond), res.ActiveTold, res.Active, res.ServerVersion,
		mdBefore, mdAfter, before.Consumers[0].ConnectedSince, after.Consumers[0].ConnectedSince,
		before.Consumers[0].UnAckedMessages, after.Consumers[0].UnAckedMessages, after.SubType)

	// The application goes on: the next messages it gets are the new ones,
	// nothing of what it held comes again (a change of the active consumer
	// would rewind and redeliver m-80..99 to it, E2).
	followProduce(t, pc, p0, "m", 100, 110)
	var got []int
	for _, m := range followReceive(t, app, 10) {
		got = append(got, followIndex(m, "m"))
		_ = app.Ack(m)
	}
	if wantNew := []int{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}; !slices.Equal(got, wantNew) {
		t.Errorf("after the move the application received m-%v, want m-%v", got, wantNew)
	}
	followQuiet(t, app, 2*time.Second)
	if ev := events.list(); len(ev) != len(eventsBefore) {
		t.Errorf("application's active-consumer events %v after the move (before: %v)", ev[len(eventsBefore):], eventsBefore)
	}
	final := followSubStats(t, p0, sub)
	if len(final.Consumers) != 1 || final.Consumers[0].ConnectedSince != before.Consumers[0].ConnectedSince {
		t.Errorf("consumers at the end %+v", final.Consumers)
	}
}

// (1) Failover: the application (priority 0) stays the active consumer,
// connected, without an event or a redelivery (E1).
func TestWireFollowFailover(t *testing.T) { followAttached(t, pulsar.Failover, wire.Failover) }

// (2) Shared: individual acks of m-50..79 move the position; the
// application's unacknowledged count drops by them (E3).
func TestWireFollowShared(t *testing.T) { followAttached(t, pulsar.Shared, wire.Shared) }

// (3) An Exclusive subscription with its application attached refuses the
// move's consumer, whatever its type, and the application is unaffected
// (E6).
func TestWireFollowExclusiveRefused(t *testing.T) {
	UseClusters(t, "east")
	ns := NewNamespace(t, "east")
	topic := Topic(ns, "ledger")
	const sub = "audit"
	pc := Client(t, "east")
	app, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Name: "auditor", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ids := followProduce(t, pc, topic, "m", 0, 20)
	for _, m := range followReceive(t, app, 20) {
		if followIndex(m, "m") < 10 {
			_ = app.Ack(m)
		}
	}
	followWaitMarkDelete(t, topic, sub, wireID(ids[9]))
	before := followSubStats(t, topic, sub)
	for _, typ := range []wire.SubType{wire.Failover, wire.Shared, wire.KeyShared} {
		res, took, err := followMove(t, wire.Move{Topic: topic, Subscription: sub, Type: typ, ConsumerName: followName, To: wireID(ids[15])})
		var be *wire.BrokerError
		if !errors.Is(err, wire.ErrSubscriptionBusy) || !errors.As(err, &be) || be.Code != wire.ConsumerBusy {
			t.Fatalf("move as %s: err %v, want ErrSubscriptionBusy (ConsumerBusy)", followTypeNames[typ], err)
		}
		t.Logf("move as %s refused in %s (attached %s): %v", followTypeNames[typ], took.Round(10*time.Microsecond), res.Attached.Round(10*time.Microsecond), err)
	}
	if md := followMarkDelete(t, topic, sub); md != wireID(ids[9]).String() {
		t.Errorf("mark-delete %s after refused moves, want %s", md, wireID(ids[9]))
	}
	after := followSubStats(t, topic, sub)
	if len(after.Consumers) != 1 || after.Consumers[0].ConnectedSince != before.Consumers[0].ConnectedSince {
		t.Errorf("consumers after the refused moves %+v, before %+v", after.Consumers, before.Consumers)
	}
	t.Logf("app connectedSince %s -> %s", before.Consumers[0].ConnectedSince, after.Consumers[0].ConnectedSince)
	followProduce(t, pc, topic, "m", 20, 25)
	var got []int
	for _, m := range followReceive(t, app, 5) {
		got = append(got, followIndex(m, "m"))
	}
	if !slices.Equal(got, []int{20, 21, 22, 23, 24}) {
		t.Errorf("after the refused moves the application received m-%v, want m-20..24", got)
	}
}

// (4) Nobody attached, the subscription's type known from its last
// application: the move works, leaves no consumer behind and keeps the
// type; the application's next consumer starts after the target (E7).
func TestWireFollowNoConsumer(t *testing.T) {
	UseClusters(t, "east")
	ns := NewNamespace(t, "east")
	pc := Client(t, "east")
	for _, tc := range []struct {
		typ   pulsar.SubscriptionType
		wtype wire.SubType
		name  string
	}{
		{pulsar.Failover, wire.Failover, "Failover"},
		{pulsar.Shared, wire.Shared, "Shared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := Topic(ns, "idle-"+strings.ToLower(tc.name))
			const sub = "reports"
			opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Name: "reporter", Type: tc.typ,
				SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
			app, err := pc.Subscribe(opts)
			if err != nil {
				t.Fatal(err)
			}
			ids := followProduce(t, pc, topic, "m", 0, 100)
			for _, m := range followReceive(t, app, 10) {
				_ = app.Ack(m)
			}
			followWaitMarkDelete(t, topic, sub, wireID(ids[9]))
			app.Close()
			before := followSubStats(t, topic, sub)
			if len(before.Consumers) != 0 || before.SubType != tc.name {
				t.Fatalf("before the move: type %q, consumers %+v", before.SubType, before.Consumers)
			}
			res, took, err := followMove(t, wire.Move{Topic: topic, Subscription: sub, Type: tc.wtype, ConsumerName: followName, To: wireID(ids[79])})
			if err != nil {
				t.Fatal(err)
			}
			want := wireID(ids[79])
			if res.MarkDelete != want || !res.Reached() {
				t.Errorf("move reported mark-delete %v, want %v", res.MarkDelete, want)
			}
			md := followMarkDelete(t, topic, sub)
			if md != want.String() {
				t.Errorf("mark-delete after the move %s, want %s", md, want)
			}
			after := followSubStats(t, topic, sub)
			if len(after.Consumers) != 0 || after.SubType != tc.name {
				t.Errorf("after the move: type %q, consumers %+v", after.SubType, after.Consumers)
			}
			t.Logf("move took %s (attached %s, %d acked, told active %v/%v): mark-delete %s -> %s; backlog %d -> %d",
				took.Round(10*time.Microsecond), res.Attached.Round(10*time.Microsecond), res.Acked, res.ActiveTold, res.Active,
				wireID(ids[9]), md, before.MsgBacklog, after.MsgBacklog)
			app, err = pc.Subscribe(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			if m := followReceive(t, app, 1)[0]; followIndex(m, "m") != 80 {
				t.Errorf("the application's next consumer got %q first, want m-80", m.Payload())
			}
		})
	}
}

// Key_Shared: the move's consumer must match the applications'
// allowOutOfOrderDelivery (the broker reads the key shared meta): the
// other setting is refused, the same one moves the position (E4).
func TestWireFollowKeyShared(t *testing.T) {
	UseClusters(t, "east")
	ns := NewNamespace(t, "east")
	topic := Topic(ns, "keyed")
	const sub = "per-key"
	pc := Client(t, "east")
	app, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Name: "keyworker", Type: pulsar.KeyShared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	ids := followProduce(t, pc, topic, "m", 0, 100)
	for _, m := range followReceive(t, app, 100) {
		if followIndex(m, "m") < 50 {
			_ = app.Ack(m)
		}
	}
	followWaitMarkDelete(t, topic, sub, wireID(ids[49]))
	before := followSubStats(t, topic, sub)
	move := wire.Move{Topic: topic, Subscription: sub, Type: wire.KeyShared, ConsumerName: followName, To: wireID(ids[79])}
	move.KeySharedAllowOutOfOrder = true
	if _, _, err := followMove(t, move); !errors.Is(err, wire.ErrSubscriptionBusy) {
		t.Fatalf("move with allowOutOfOrderDelivery: err %v, want ErrSubscriptionBusy", err)
	}
	move.KeySharedAllowOutOfOrder = false
	res, took, err := followMove(t, move)
	if err != nil {
		t.Fatal(err)
	}
	if res.MarkDelete != wireID(ids[79]) || res.Acked != 30 {
		t.Errorf("move reported mark-delete %v, %d acked; want %v, 30", res.MarkDelete, res.Acked, wireID(ids[79]))
	}
	after := followSubStats(t, topic, sub)
	if len(after.Consumers) != 1 || after.Consumers[0].ConnectedSince != before.Consumers[0].ConnectedSince {
		t.Errorf("consumers after the move %+v, before %+v", after.Consumers, before.Consumers)
	}
	t.Logf("move took %s (attached %s): mark-delete %s -> %s; app connectedSince %s -> %s; allowOutOfOrderDelivery %v",
		took.Round(10*time.Microsecond), res.Attached.Round(10*time.Microsecond), wireID(ids[49]), followMarkDelete(t, topic, sub),
		before.Consumers[0].ConnectedSince, after.Consumers[0].ConnectedSince, after.AllowOutOfOrderDelivery)
	followProduce(t, pc, topic, "m", 100, 105)
	var got []int
	for _, m := range followReceive(t, app, 5) {
		got = append(got, followIndex(m, "m"))
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{100, 101, 102, 103, 104}) {
		t.Errorf("after the move the application received m-%v, want m-100..104", got)
	}
}
