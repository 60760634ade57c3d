package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// txnEvent is one line of Txn.java's output.
type txnEvent struct {
	Event    string   `json:"event"`
	At       int64    `json:"at"` // Unix ms
	Payloads []string `json:"payloads"`
	Error    string   `json:"error"`
}

func (e txnEvent) at() time.Time { return time.UnixMilli(e.At) }

// txnWatch records what one subscription receives, and when.
type txnWatch struct {
	mu      sync.Mutex
	got     []string             // payloads in arrival order
	arrived map[string]time.Time // payload -> first arrival
	twice   []string             // payloads that came again
	plain   bool                 // every message so far as a plain one
	cancel  context.CancelFunc
	done    chan struct{}
}

// watchTxn subscribes sub to topic (from the earliest message) and records
// every message until t ends.
func watchTxn(t *testing.T, c pulsar.Client, topic, sub string) *txnWatch {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe %s to %s: %v", sub, topic, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &txnWatch{arrived: map[string]time.Time{}, plain: true, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cons.Close()
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			_ = cons.Ack(m)
			p := string(m.Payload())
			w.mu.Lock()
			if _, ok := w.arrived[p]; ok {
				w.twice = append(w.twice, p)
			} else {
				w.arrived[p] = now
			}
			w.got = append(w.got, p)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// wait waits until the subscription received n messages or timeout
// passed, then settle longer for anything that should not come.
func (w *txnWatch) wait(n int, timeout, settle time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		k := len(w.got)
		w.mu.Unlock()
		if k >= n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(settle)
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

func (w *txnWatch) when(p string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.arrived[p]
	return at, ok
}

// spread is the earliest and latest arrival of payloads after from.
func (w *txnWatch) spread(payloads []string, from time.Time) (lo, hi time.Duration) {
	lo = -1
	for _, p := range payloads {
		at, ok := w.when(p)
		if !ok {
			continue
		}
		d := at.Sub(from)
		if lo < 0 || d < lo {
			lo = d
		}
		hi = max(hi, d)
	}
	return lo, hi
}

// rawEntries reads topic on cluster from the start with the sidecar's own
// binary-protocol client (a reader) until n entries came or 20 s passed,
// and returns each entry's metadata as stored.
func rawEntries(t *testing.T, cluster, topic string, n int) []wire.Metadata {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := wire.Subscribe(ctx, wireClient(t, cluster), wire.ConsumerOptions{Topic: topic,
		Subscription: "txn-raw-reader", Name: "txn-raw-reader", NonDurable: true, InitialPosition: wire.Earliest})
	if err != nil {
		t.Fatalf("raw reader on %s: %v", cluster, err)
	}
	defer cons.Close()
	var out []wire.Metadata
	for len(out) < n {
		e, err := cons.Receive(ctx)
		if err != nil {
			break
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			t.Fatalf("entry %s on %s: %v", e.ID, cluster, err)
		}
		out = append(out, md)
		_ = cons.Release(e)
	}
	return out
}

func prefixed(payloads []string, group string) []string {
	var out []string
	for _, p := range payloads {
		if strings.HasPrefix(p, group+"-") {
			out = append(out, p)
		}
	}
	return out
}

func ms(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }

// TestTransactionsNorthToEast copies a topic written in transactions on
// north (the test bed's cluster with a transaction coordinator) to east on
// the entry path. Txn.java (Pulsar's Java client) writes a committed
// transaction, an aborted one, one left open for holdFor with plain
// messages after it, and one the coordinator aborts at its timeout with
// plain messages after it.
//
// The sidecar reads through a durable subscription, so north's broker
// decides what it sees, as for any consumer: nothing of an open
// transaction, nor anything after it, until the transaction ends (the
// dispatcher reads up to the first open transaction's position), and
// nothing of an aborted one. The test shows that on east: committed
// messages once and in north's order, aborted and timed-out ones never,
// the open transaction's messages and the plain ones after it only once
// it committed; an application subscription on north sees the same. The
// copies carry no transaction id (the entry pipe drops it, as Pulsar's
// replicator does): read raw with the sidecar's own client, north's
// transactional entries carry one and east's copies none.
//
// pulsar-client-go (v0.21) sends the transaction id in its SEND command
// but not in the message metadata, so its transactional entries are
// stored as plain ones: north's dispatcher cannot tell that they belong to
// an aborted transaction and delivers them to every subscription, the
// sidecar's included. East then holds what a subscription on north sees,
// aborted messages included; the second half of the test asserts exactly
// that equality and reports what it saw.
func TestTransactionsNorthToEast(t *testing.T) {
	start := time.Now()
	if err := Up("north"); err != nil {
		t.Fatal(err)
	}
	const holdFor, txnTimeout = 10, 5 // seconds
	ns := NewNamespace(t, "north", "east")
	topic, goTopic := Topic(ns, "txn"), Topic(ns, "txn-go")
	CreatePartitioned(t, topic, 0, "north", "east")
	CreatePartitioned(t, goTopic, 0, "north", "east")
	north, east := Client(t, "north"), Client(t, "east")
	onNorth, onEast := watchTxn(t, north, topic, "app"), watchTxn(t, east, topic, "app")
	goNorth, goEast := watchTxn(t, north, goTopic, "app"), watchTxn(t, east, goTopic, "app")
	s := StartSidecar(t, []string{"north", "east"}, entry("north", ns, all, "east"))
	// Both cursors open before anything is written, so that arrival times
	// on east tell when north's broker let the sidecar read.
	Eventually(t, 30*time.Second, func() error {
		for _, tp := range []string{topic, goTopic} {
			st, err := Admin(t, "north").Topics().GetStats(*mustTopicName(t, tp))
			if err != nil {
				return err
			}
			if _, ok := st.Subscriptions["geo-sidecar.repl.east"]; !ok {
				return fmt.Errorf("no cursor on %s yet", tp)
			}
		}
		return nil
	})

	// Java client.
	j := newJavaProgram(t, "Txn.java")
	lines, err := j.run("produce", Get("north").ServiceURL, topic, fmt.Sprint(holdFor), fmt.Sprint(txnTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ev := map[string]txnEvent{}
	for _, l := range lines {
		var e txnEvent
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("Txn.java printed %s: %v", l, err)
		}
		ev[e.Event] = e
	}
	for _, name := range []string{"committed", "aborted", "open-sent", "plain-after-open-sent", "open-committing",
		"open-committed", "timedout-begun", "timedout-sent", "plain-after-timeout-sent", "timedout-commit-refused", "plain-final-sent"} {
		if _, ok := ev[name]; !ok {
			t.Fatalf("Txn.java did not report %q (printed %q)", name, lines)
		}
	}
	var want []string // north's order of what commits or was never in a transaction
	for _, name := range []string{"committed", "open-sent", "plain-after-open-sent", "plain-after-timeout-sent", "plain-final-sent"} {
		want = append(want, ev[name].Payloads...)
	}
	never := append(slices.Clone(ev["aborted"].Payloads), ev["timedout-sent"].Payloads...)

	got := onEast.wait(len(want), 60*time.Second, 3*time.Second)
	seenNorth := onNorth.wait(len(want), 5*time.Second, 0)
	if !slices.Equal(got, want) {
		t.Errorf("east received %q,\nwant %q (committed and plain messages once each, in north's order; aborted and timed-out ones never)", got, want)
	}
	if !slices.Equal(seenNorth, want) {
		t.Errorf("a subscription on north received %q,\nwant %q", seenNorth, want)
	}
	for _, p := range never {
		if _, ok := onEast.when(p); ok {
			t.Errorf("%q (aborted or timed out) reached east", p)
		}
	}
	if len(onEast.twice) > 0 {
		t.Errorf("east received %q twice", onEast.twice)
	}
	if e := ev["timedout-commit-refused"].Error; e == "committed, unexpectedly" {
		t.Errorf("the timed-out transaction committed %d s after its timeout", 3)
	}

	// When: the open transaction's messages and the plain ones after it
	// not before its commit; the plain ones after the timed-out one not
	// before the coordinator could have aborted it.
	committing := ev["open-committing"].at()
	for _, p := range append(slices.Clone(ev["open-sent"].Payloads), ev["plain-after-open-sent"].Payloads...) {
		for side, w := range map[string]*txnWatch{"east": onEast, "north's subscription": onNorth} {
			if at, ok := w.when(p); ok && at.Before(committing) {
				t.Errorf("%q reached %s at %s, before its transaction committed (%s)", p, side, at.Format(time.StampMilli), committing.Format(time.StampMilli))
			}
		}
	}
	timeoutAt := ev["timedout-begun"].at().Add(txnTimeout*time.Second - time.Second)
	for _, p := range ev["plain-after-timeout-sent"].Payloads {
		if at, ok := onEast.when(p); ok && at.Before(timeoutAt) {
			t.Errorf("%q reached east at %s, before the transaction ahead of it could have timed out (%s)", p, at.Format(time.StampMilli), timeoutAt.Format(time.StampMilli))
		}
	}
	commitLo, commitHi := onEast.spread(ev["committed"].Payloads, ev["committed"].at())
	heldLo, heldHi := onEast.spread(ev["plain-after-open-sent"].Payloads, ev["plain-after-open-sent"].at())
	afterLo, afterHi := onEast.spread(ev["plain-after-open-sent"].Payloads, ev["open-committed"].at())
	toLo, toHi := onEast.spread(ev["plain-after-timeout-sent"].Payloads, ev["plain-after-timeout-sent"].at())
	toBegunLo, _ := onEast.spread(ev["plain-after-timeout-sent"].Payloads, ev["timedout-begun"].at())
	finalLo, finalHi := onEast.spread(ev["plain-final-sent"].Payloads, ev["plain-final-sent"].at())
	northHeldLo, _ := onNorth.spread(ev["plain-after-open-sent"].Payloads, ev["plain-after-open-sent"].at())

	// As stored: north's transactional entries carry a transaction id,
	// east's copies none.
	n := 0
	rawNorth := rawEntries(t, "north", topic, 21)
	rawEast := rawEntries(t, "east", topic, 21)
	for _, md := range rawNorth {
		if txn := md.ProducerName != "plain"; md.HasTxnID != txn {
			t.Errorf("north: an entry of producer %s has a transaction id: %v, want %v", md.ProducerName, md.HasTxnID, txn)
		} else if txn {
			n++
		}
	}
	if len(rawEast) != len(rawNorth) || len(rawNorth) != 21 {
		t.Errorf("read %d entries raw on north and %d on east, want 21 on each (a batch of 10, 20 single messages)", len(rawNorth), len(rawEast))
	}
	for _, md := range rawEast {
		if md.HasTxnID || md.ReplicatedFrom != "north" {
			t.Errorf("east: a copy of producer %s has a transaction id: %v (%d:%d), replicated_from %q", md.ProducerName, md.HasTxnID, md.TxnIDMostBits, md.TxnIDLeastBits, md.ReplicatedFrom)
		}
	}
	t.Logf("Java client: east received %d messages as north's subscription did, in order, once each; %d aborted or timed out never (commit of the timed-out one: %s); "+
		"%d transactional entries on north carry a transaction id, their copies on east none",
		len(got), len(never), ev["timedout-commit-refused"].Error, n)
	t.Logf("arrival on east: committed %s-%s after the commit; plain messages behind the open transaction held back %s-%s (north's own subscription %s), arriving %s-%s after its commit (held %d s); "+
		"plain messages behind the timed-out transaction (%d s) %s-%s after they were written (%s after it began); plain ones after that %s-%s",
		ms(commitLo), ms(commitHi), ms(heldLo), ms(heldHi), ms(northHeldLo), ms(afterLo), ms(afterHi), holdFor,
		txnTimeout, ms(toLo), ms(toHi), ms(toBegunLo), ms(finalLo), ms(finalHi))

	// pulsar-client-go.
	goClient, err := pulsar.NewClient(pulsar.ClientOptions{URL: Get("north").ServiceURL, OperationTimeout: 30 * time.Second,
		EnableTransaction: true, Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		t.Fatalf("pulsar-client-go with transactions on north: %v", err)
	}
	defer goClient.Close()
	prod, err := goClient.CreateProducer(pulsar.ProducerOptions{Topic: goTopic, Name: "go-txn", DisableBatching: true, SendTimeout: -1})
	if err != nil {
		t.Fatalf("producer on %s: %v", goTopic, err)
	}
	defer prod.Close()
	ctx := context.Background()
	goSend := func(txn pulsar.Transaction, group string, k int) []string {
		var out []string
		for i := range k {
			p := fmt.Sprintf("%s-%d", group, i)
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(p), Key: group, Transaction: txn}); err != nil {
				t.Fatalf("send %s: %v", p, err)
			}
			out = append(out, p)
		}
		return out
	}
	newTxn := func() pulsar.Transaction {
		txn, err := goClient.NewTransaction(time.Minute)
		if err != nil {
			t.Fatalf("new transaction: %v", err)
		}
		return txn
	}
	t1 := newTxn()
	goWant := goSend(t1, "go-committed", 3)
	if err := t1.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	t2 := newTxn()
	goAborted := goSend(t2, "go-aborted", 3)
	if err := t2.Abort(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	t3 := newTxn()
	goWant = append(goWant, goSend(t3, "go-open", 3)...)
	plainSent := time.Now()
	goWant = append(goWant, goSend(nil, "go-plain-after-open", 3)...)
	time.Sleep(5 * time.Second)
	goCommitting := time.Now()
	if err := t3.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	goWant = append(goWant, goSend(nil, "go-plain-final", 3)...)

	total := len(goWant) + len(goAborted)
	goSeenNorth := goNorth.wait(total, 30*time.Second, 2*time.Second)
	goGot := goEast.wait(len(goSeenNorth), 30*time.Second, 2*time.Second)
	if !slices.Equal(goGot, goSeenNorth) {
		t.Errorf("pulsar-client-go: east received %q, a subscription on north %q: they differ", goGot, goSeenNorth)
	}
	if len(goEast.twice) > 0 {
		t.Errorf("pulsar-client-go: east received %q twice", goEast.twice)
	}
	for _, p := range goWant {
		if !slices.Contains(goGot, p) {
			t.Errorf("pulsar-client-go: %q (committed or plain) did not reach east", p)
		}
	}
	for _, p := range prefixed(goWant, "go-plain-after-open") {
		if at, ok := goEast.when(p); ok && at.Before(goCommitting) {
			t.Errorf("pulsar-client-go: %q reached east at %s, before the transaction ahead of it committed (%s)", p, at.Format(time.StampMilli), goCommitting.Format(time.StampMilli))
		}
	}
	goHeldLo, goHeldHi := goEast.spread(prefixed(goWant, "go-plain-after-open"), plainSent)
	abortedSeen := 0
	for _, p := range goAborted {
		if slices.Contains(goGot, p) {
			abortedSeen++
		}
	}
	goRaw := rawEntries(t, "north", goTopic, len(goSeenNorth))
	goTxnIDs := 0
	for _, md := range goRaw {
		if md.HasTxnID {
			goTxnIDs++
		}
	}
	t.Logf("pulsar-client-go: north's subscription and east both received %d messages (%d of %d aborted ones among them); %d of north's %d stored entries carry a transaction id; "+
		"plain messages behind its open transaction held back %s-%s (5 s open)",
		len(goGot), abortedSeen, len(goAborted), goTxnIDs, len(goRaw), ms(goHeldLo), ms(goHeldHi))
	t.Logf("sidecar: %.0f messages copied, %.0f skipped; test took %s",
		s.Metric("geo_sidecar_replicated_messages_total"), s.Metric("geo_sidecar_skipped_messages_total"), time.Since(start).Round(time.Second))
}
