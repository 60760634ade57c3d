package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/failback"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// geo-sidecar failback against real clusters (issue 39; "east" below is
// the test bed's north: see home): east and west
// replicate both ways, an application consumes on east, east's sidecar
// stops copying (frozen, as a sidecar cut off with its region would)
// while east takes more traffic, and east's broker is killed (kill -9)
// in the middle of it: what east stored past the copy is stranded. West's
// application takes over (it holds every 7th of west's own messages
// back: ack holes), west produces, east comes back and the pair
// west→east copies west's traffic home. Then failback: first without a
// choice (a report, exit 2, nothing changed), then with the choice under
// test and the subscription: the stranded tail it reports must be what
// an outside reader (pulsar-client-go, both clusters) finds, per
// partition, count and positions; after --replay or --park nothing of
// east's is lost; and a consumer on east receives exactly what west's
// application left unacknowledged (plus the tail, under --replay and
// --leave), nothing again.

func TestFailbackReplay(t *testing.T) { testFailback(t, failback.Replay, goFailbackApp{}, false) }
func TestFailbackPark(t *testing.T)   { testFailback(t, failback.Park, goFailbackApp{}, false) }
func TestFailbackLeave(t *testing.T)  { testFailback(t, failback.Leave, goFailbackApp{}, false) }

// TestFailbackJava: the application is written with Pulsar's Java client
// (e2e/pulsar/Failback.java). The tail is replayed first on its own while
// the application still runs on west: it receives exactly the stranded
// messages, each carrying geo-sidecar.replayed-late=true, and consumes
// them; then the subscription comes home, and on east the tail is
// consumed too (it was on west).
func TestFailbackJava(t *testing.T) {
	testFailback(t, failback.Replay, javaFailbackApp{j: newJavaProgram(t, "Failback.java")}, true)
}

// failbackApp is the application.
type failbackApp interface {
	// consume receives every message of sub on cluster until none came
	// for a few seconds, acknowledging each but west's own "w-<i>" whose
	// i is a multiple of holdEvery (0: none held back): the payloads
	// received, those held back, and those flagged replayed late.
	consume(t *testing.T, cluster, topic, sub string, holdEvery int) (received, held, late []string)
}

type goFailbackApp struct{}

func (goFailbackApp) consume(t *testing.T, cluster, topic, sub string, holdEvery int) (received, held, late []string) {
	t.Helper()
	c := switchoverSubscribe(t, Client(t, cluster), topic, sub, pulsar.Shared)
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			return received, held, late
		}
		if _, ok := m.Properties()[marker.Property]; ok {
			_ = c.Ack(m)
			continue
		}
		received = append(received, string(m.Payload()))
		if m.Properties()[marker.PropReplayedLate] == "true" {
			late = append(late, string(m.Payload()))
		}
		if i := switchoverIndex(m.Payload(), "w"); holdEvery > 0 && i >= 0 && i%holdEvery == 0 {
			held = append(held, string(m.Payload()))
			continue
		}
		if err := c.Ack(m); err != nil {
			t.Fatalf("ack on %s: %v", cluster, err)
		}
	}
}

type javaFailbackApp struct{ j *javaProgram }

func (a javaFailbackApp) consume(t *testing.T, cluster, topic, sub string, holdEvery int) (received, held, late []string) {
	t.Helper()
	lines, err := a.j.run("consume", Get(cluster).ServiceURL, topic, sub, "3", fmt.Sprint(holdEvery))
	if err != nil || len(lines) != 1 {
		t.Fatalf("Failback.java consume on %s: %v, %q", cluster, err, lines)
	}
	var out struct{ Received, Held, Late []string }
	if err := json.Unmarshal(lines[0], &out); err != nil {
		t.Fatalf("Failback.java printed %s: %v", lines[0], err)
	}
	return out.Received, out.Held, out.Late
}

// batchProducer is an application that also produces (the Java one):
// count messages "<prefix>-<from>".. as batches compressed with
// compression (the Java client's name: LZ4, ZLIB, ZSTD, SNAPPY).
type batchProducer interface {
	produce(t *testing.T, cluster, topic, prefix string, from, count int, compression string)
}

func (a javaFailbackApp) produce(t *testing.T, cluster, topic, prefix string, from, count int, compression string) {
	t.Helper()
	lines, err := a.j.run("produce", Get(cluster).ServiceURL, topic, prefix, fmt.Sprint(from), fmt.Sprint(count), compression)
	if err != nil || len(lines) != 1 {
		t.Fatalf("Failback.java produce on %s: %v, %q", cluster, err, lines)
	}
}

// sendBatches sends count messages "<prefix>-<from>".. on c's topic with
// a batching producer compressed with ct, all at once then flushed: a
// few entries of several messages each, as pulsar-client-go batches.
func sendBatches(t *testing.T, c pulsar.Client, topic, prefix string, from, count int, ct pulsar.CompressionType) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, CompressionType: ct,
		BatchingMaxPublishDelay: time.Second, BatchingMaxMessages: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	errs := make(chan error, count)
	for i := from; i < from+count; i++ {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i)),
			Properties: map[string]string{"app": "batched"}},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for range count {
		if err := <-errs; err != nil {
			t.Fatalf("send a batch: %v", err)
		}
	}
}

const (
	failbackBefore   = 100 // east's messages copied before the outage
	failbackWest     = 60  // west's own during the outage
	failbackHoldEach = 7   // west's application holds w-i back when i%7 == 0
)

// runFailback runs geo-sidecar failback --json and returns its exit
// status, report and stderr.
func runFailback(t *testing.T, cfg, topic string, args ...string) (int, failback.Report, string) {
	t.Helper()
	return runJSON[failback.Report](t, append([]string{"failback", "--config", cfg, "--topic", topic, "--from", home, "--to", "west",
		"--quiet", "1s", "--json"}, args...)...)
}

// outsideMsg is a message as an outside reader sees it.
type outsideMsg struct {
	partition     string
	ledger, entry int64
	payload       string
	props         map[string]string
}

func (m outsideMsg) at() string { return fmt.Sprintf("%d:%d", m.ledger, m.entry) }

// readOutside reads every message of each partition with pulsar-client-go
// readers, from the first to the last.
func readOutside(t *testing.T, c pulsar.Client, partitions []string) []outsideMsg {
	t.Helper()
	var out []outsideMsg
	for _, part := range partitions {
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: part, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatalf("reader of %s: %v", part, err)
		}
		for r.HasNext() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := r.Next(ctx)
			cancel()
			if err != nil {
				r.Close()
				t.Fatalf("read %s: %v", part, err)
			}
			out = append(out, outsideMsg{partition: part, ledger: m.ID().LedgerID(), entry: m.ID().EntryID(),
				payload: string(m.Payload()), props: m.Properties()})
		}
		r.Close()
	}
	return out
}

// home is the region that fails and comes back: north, which only the
// first e2e lane uses (.ci/e2e.sh), so killing it stops no other lane's
// test; east and west are shared by all three lanes. West, the region
// that takes over, is not disrupted and is held by no lock here, as the
// tests that only read and write it.
//
// GEO_E2E_FAILBACK_HOME names another (a private test bed of east and
// west only: GEO_E2E_FAILBACK_HOME=east).
var home = func() string {
	if h := os.Getenv("GEO_E2E_FAILBACK_HOME"); h != "" {
		return h
	}
	return "north"
}()

func testFailback(t *testing.T, choice string, app failbackApp, lateFirst bool) {
	if err := Up(home); err != nil {
		t.Fatal(err)
	}
	DisruptClusters(t, home)
	awaitClusters(t, home, "west")
	ns := NewNamespace(t, home, "west")
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, 2, home, "west")
	partitions := []string{topic + "-partition-0", topic + "-partition-1"}
	const sub = "billing"
	east, west := Client(t, home), Client(t, "west")
	for _, c := range []pulsar.Client{east, west} {
		switchoverSubscribe(t, c, topic, sub, pulsar.Shared).Close()
	}
	repl := fmt.Sprintf("  - source: %s\n    namespace: %s\n    %s\n    targets: [west]\n    subscriptions: [%s]\n", home, ns, all, sub) +
		entry("west", ns, all, home)
	// One sidecar per region, as deployed: east's goes down with east.
	sEast := StartSidecar(t, []string{home, "west"}, repl, "--cluster", home)
	sWest := StartSidecar(t, []string{home, "west"}, repl, "--cluster", "west")

	// Before the outage: east's application consumes what east produces,
	// and the copy is complete.
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	send := func(p pulsar.Producer, prefix string, i int, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))})
		return err
	}
	for i := range failbackBefore {
		if err := send(p, "e", i, 10*time.Second); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	if got, _, _ := app.consume(t, home, topic, sub, 0); len(got) != failbackBefore {
		t.Fatalf("the application on east received %d of %d", len(got), failbackBefore)
	}
	Eventually(t, 60*time.Second, func() error {
		if code, _, errOut := runVerify(t, sEast.ConfigPath, topic, "--from", home, "--to", "west", "--complete"); code != 0 {
			return fmt.Errorf("verify --complete exit %d: %s", code, errOut)
		}
		return nil
	})

	// The outage: east's sidecar stops copying, east takes more traffic,
	// and east's broker is killed while its producer still sends.
	next := failbackBefore
	for range 20 { // copied
		if err := send(p, "e", next, 10*time.Second); err != nil {
			t.Fatalf("send: %v", err)
		}
		next++
	}
	Eventually(t, 30*time.Second, func() error {
		if code, _, errOut := runVerify(t, sEast.ConfigPath, topic, "--from", home, "--to", "west", "--complete"); code != 0 {
			return fmt.Errorf("verify --complete exit %d: %s", code, errOut)
		}
		return nil
	})
	sEast.Freeze()
	for range 30 { // stored on east, never copied
		if err := send(p, "e", next, 10*time.Second); err != nil {
			t.Fatalf("send: %v", err)
		}
		next++
	}
	// And batches, as applications send them (pulsar-client-go's codecs,
	// and with the Java application the Java client's Snappy): a late
	// copy must flag every message of a batch, each message's own
	// properties being what consumers see.
	for _, ct := range []pulsar.CompressionType{pulsar.LZ4, pulsar.ZLib, pulsar.ZSTD} {
		sendBatches(t, east, topic, "e", next, 10, ct)
		next += 10
	}
	if jp, ok := app.(batchProducer); ok {
		jp.produce(t, home, topic, "e", next, 10, "SNAPPY")
		next += 10
	}
	var confirmed atomic.Int64
	stopped := make(chan struct{})
	go func() { // mid-traffic
		defer close(stopped)
		for i := next; ; i++ {
			if send(p, "e", i, 3*time.Second) != nil {
				return
			}
			confirmed.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := Kill(home); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = Up(home)
		}
	})
	<-stopped
	sEast.Kill()
	t.Logf("east killed after %d messages sent during the outage (%d confirmed mid-traffic)", next-failbackBefore+int(confirmed.Load()), confirmed.Load())
	go p.Close()

	// West takes over: its application consumes everything west has,
	// holding west's every 7th back, while west produces.
	wp, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range failbackWest {
		if err := send(wp, "w", i, 10*time.Second); err != nil {
			t.Fatalf("send on west: %v", err)
		}
	}
	wp.Close()
	received, held, _ := app.consume(t, "west", topic, sub, failbackHoldEach)
	westOwn := 0
	for _, r := range received {
		if strings.HasPrefix(r, "w-") {
			westOwn++
		}
	}
	if westOwn != failbackWest {
		t.Fatalf("the application on west received %d of west's %d", westOwn, failbackWest)
	}
	// West's applications stop (the application above closed): the
	// failback's precondition.

	// East comes back; the pair west→east copies west's traffic home.
	if err := Up(home); err != nil {
		t.Fatal(err)
	}
	restarted = true
	t.Logf("east back %.0f s after the kill", time.Since(killedAt).Seconds())
	backAt := time.Now()
	Eventually(t, 120*time.Second, func() error {
		if code, _, errOut := runVerify(t, sWest.ConfigPath, topic, "--from", "west", "--to", home, "--complete"); code != 0 {
			return fmt.Errorf("verify west→east --complete exit %d: %s", code, errOut)
		}
		return nil
	})

	// The outside reader's stranded tail: east's messages with no copy on
	// west, per partition.
	eastMsgs := readOutside(t, east, partitions)
	onWest := map[string]bool{}
	for _, m := range readOutside(t, west, partitions) {
		onWest[m.payload] = true
	}
	type tail struct {
		n           int // entries (a batch's messages share one)
		first, last string
		payloads    []string
	}
	want := map[string]*tail{}
	// Stranded messages, entries, messages in batches, and messages with
	// their own property app=batched (pulsar-client-go's batches).
	total, entries, batched, ownProps := 0, 0, 0, 0
	for _, m := range eastMsgs {
		if !strings.HasPrefix(m.payload, "e-") || onWest[m.payload] {
			continue
		}
		tl := want[m.partition]
		if tl == nil {
			tl = &tail{first: m.at()}
			want[m.partition] = tl
		}
		if tl.n == 0 || tl.last != m.at() {
			tl.n++
			entries++
		}
		tl.last = m.at()
		tl.payloads = append(tl.payloads, m.payload)
		total++
		if m.props["app"] == "batched" {
			ownProps++
		}
	}
	perEntry := map[string]int{}
	for _, m := range eastMsgs {
		perEntry[m.partition+" "+m.at()]++
	}
	for _, w := range want {
		for _, pl := range w.payloads {
			for _, m := range eastMsgs {
				if m.payload == pl && perEntry[m.partition+" "+m.at()] > 1 {
					batched++
				}
			}
		}
	}
	t.Logf("outside reader: %d messages on east, %d stranded (not on west) in %d entries, %d of them in batches of several", len(eastMsgs), total, entries, batched)
	if total < 30 || batched < 30 || entries >= total {
		t.Fatalf("%d messages stranded in %d entries, %d batched: the outage stranded nothing worth testing", total, entries, batched)
	}
	checkTail := func(rep failback.Report) {
		t.Helper()
		if rep.RPO.Entries != int64(entries) || rep.RPO.Messages != int64(total) {
			t.Errorf("failback reports %d entries (%d messages) stranded, the outside reader finds %d (%d)", rep.RPO.Entries, rep.RPO.Messages, entries, total)
		}
		for _, s := range rep.Stranded {
			w := want[s.Partition]
			if w == nil {
				w = &tail{}
			}
			if s.Entries != int64(w.n) || s.First != w.first || s.Last != w.last {
				t.Errorf("%s: failback says %d stranded %s..%s, the outside reader %d %s..%s", s.Partition, s.Entries, s.First, s.Last, w.n, w.first, w.last)
			}
		}
	}

	// Without a choice: the report, exit 2, nothing changed.
	code, rep, errOut := runFailback(t, sWest.ConfigPath, topic, "--subscription", sub)
	checkTail(rep)
	if code != 2 || rep.Copied != 0 || rep.Subscriptions != nil || !strings.Contains(errOut, "choose") {
		t.Errorf("failback without a choice: exit %d, copied %d, subscriptions %v; want 2, 0, none\n%s", code, rep.Copied, rep.Subscriptions, errOut)
	}

	var stranded []string
	for _, w := range want {
		stranded = append(stranded, w.payloads...)
	}
	slices.Sort(stranded)
	tailDone := 0 // stranded entries dealt with before the run with the subscription
	if lateFirst {
		// The tail alone, while the application still runs on west: it
		// receives the stranded messages, flagged, and nothing else but
		// what it held back (delivered again, held back again).
		code, rep, errOut := runFailback(t, sWest.ConfigPath, topic, "--replay")
		checkTail(rep)
		if code != 0 || rep.Copied != int64(entries) || rep.Subscriptions != nil {
			t.Fatalf("failback --replay alone: exit %d, copied %d\n%s", code, rep.Copied, errOut)
		}
		got, _, late := app.consume(t, "west", topic, sub, failbackHoldEach)
		slices.Sort(got)
		slices.Sort(late)
		want := append(append([]string(nil), stranded...), held...)
		slices.Sort(want)
		if !slices.Equal(got, want) || !slices.Equal(late, stranded) {
			t.Errorf("the application on west received %d %v, %d flagged late; want the %d stranded, all flagged, and the %d held back",
				len(got), got, len(late), total, len(held))
		}
		t.Logf("the application on west received the %d stranded messages (and the %d it holds back), %d flagged %s=true",
			len(got)-len(held), len(held), len(late), marker.PropReplayedLate)
		tailDone = entries
	}

	args := []string{"--subscription", sub}
	parkTopic := Topic(ns, "orders-stranded")
	switch choice {
	case failback.Replay:
		args = append(args, "--replay")
	case failback.Park:
		args = append(args, "--park", parkTopic)
	case failback.Leave:
		args = append(args, "--leave")
	}
	// A dry run: the same tail, the plan, nothing changed (the real run
	// below still finds everything to do).
	code, rep, errOut = runFailback(t, sWest.ConfigPath, topic, append(args, "--dry-run")...)
	if tailDone == 0 {
		checkTail(rep)
	}
	if code != 0 || !rep.DryRun || rep.Copied != 0 || rep.Subscriptions == nil || rep.Subscriptions.Again != 0 || rep.Subscriptions.Missed != 0 {
		t.Errorf("failback --%s --dry-run: exit %d, report %+v\n%s", choice, code, rep, errOut)
	}
	if rep.Subscriptions != nil {
		for _, r := range rep.Subscriptions.Results {
			if r.Outcome != switchover.Planned {
				t.Errorf("dry run: %s %s: %s, want %s", r.Partition, r.Subscription, r.Outcome, switchover.Planned)
			}
		}
	}

	code, rep, errOut = runFailback(t, sWest.ConfigPath, topic, args...)
	t.Logf("failback --%s exit %d in %.1f s (%.0f s after east was back): stranded %d entries (%d messages, %.3f s of traffic), copied %d; %s",
		choice, code, rep.Seconds, time.Since(backAt).Seconds(), rep.RPO.Entries, rep.RPO.Messages, rep.RPO.Seconds, rep.Copied, rep.Tail)
	for _, s := range rep.Stranded {
		t.Logf("  %s: %d stranded %s..%s, published %s..%s, copied %d", s.Partition, s.Entries, s.First, s.Last, s.FirstPublishTime, s.LastPublishTime, s.Copied)
	}
	for _, s := range rep.Steps {
		t.Logf("  step %-14s %5.1f s  %s", s.Name, s.Seconds, s.Outcome)
	}
	if rep.Subscriptions != nil {
		for _, r := range rep.Subscriptions.Results {
			t.Logf("  %s %s: %s; west %s; east before %s after %s; mark-delete to %q, %d individually", r.Partition, r.Subscription,
				r.Outcome, r.Source, r.TargetBefore, r.TargetAfter, r.MovedMarkDelete, r.Individually)
			if r.Outcome != switchover.Moved { // the dry run before moved nothing
				t.Errorf("%s %s: %s, want %s", r.Partition, r.Subscription, r.Outcome, switchover.Moved)
			}
		}
	}
	if tailDone == 0 {
		checkTail(rep)
	} else if rep.RPO.Entries != 0 {
		t.Errorf("after the tail was replayed, %d stranded", rep.RPO.Entries)
	}
	if code != 0 || !rep.OK() || rep.Subscriptions == nil || rep.Subscriptions.Again != 0 || rep.Subscriptions.Missed != 0 {
		t.Fatalf("failback --%s: exit %d, report %+v\n%s", choice, code, rep, errOut)
	}
	wantCopied := int64(entries - tailDone)
	if choice == failback.Leave {
		wantCopied = 0
	}
	if rep.Copied != wantCopied {
		t.Errorf("copied %d, want %d", rep.Copied, wantCopied)
	}

	// What became of the tail: on west or in the park topic, each once,
	// flagged; nothing of east's lost.
	westAfter := readOutside(t, west, partitions)
	var late []string
	westHas := map[string]bool{}
	lateOwn := 0 // late copies that kept their own property
	for _, m := range westAfter {
		westHas[m.payload] = true
		if m.props[marker.PropReplayedLate] == "true" {
			late = append(late, m.payload)
			if m.props["app"] == "batched" {
				lateOwn++
			}
		}
	}
	if choice == failback.Replay && lateOwn != ownProps {
		t.Errorf("%d late copies on west kept their message's own property, want %d", lateOwn, ownProps)
	}
	slices.Sort(late)
	switch choice {
	case failback.Replay:
		if !slices.Equal(late, stranded) {
			t.Errorf("west holds %d late copies, want the %d stranded: %v / %v", len(late), len(stranded), late, stranded)
		}
	default:
		if len(late) > 0 {
			t.Errorf("--%s: %d late copies on west", choice, len(late))
		}
	}
	parked := map[string]bool{}
	if choice == failback.Park {
		var got []string
		for _, m := range readOutside(t, east, []string{parkTopic}) {
			got = append(got, m.payload)
			parked[m.payload] = true
			if m.props[marker.PropReplayedLate] != "true" || !slices.Contains(partitions, m.props[marker.PropParkedFrom]) {
				t.Errorf("parked %s without its flags: %v", m.payload, m.props)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, stranded) {
			t.Errorf("the park topic holds %v, want the stranded %v", got, stranded)
		}
	}
	lost := 0
	for _, m := range eastMsgs {
		if strings.HasPrefix(m.payload, "e-") && !westHas[m.payload] && !parked[m.payload] {
			lost++
		}
	}
	if choice != failback.Leave && lost > 0 {
		t.Errorf("%d of east's messages are neither on west nor parked", lost)
	}

	// Again: the tail is found dealt with (replay: copied; park: parked
	// already, not parked twice), the subscriptions in step.
	code, rep, errOut = runFailback(t, sWest.ConfigPath, topic, args...)
	if code != 0 || rep.Subscriptions == nil || rep.Subscriptions.Again != 0 || rep.Subscriptions.Missed != 0 {
		t.Errorf("failback again: exit %d, report %+v\n%s", code, rep, errOut)
	}
	if choice == failback.Replay && rep.RPO.Entries != 0 {
		t.Errorf("failback again after --replay: %d stranded, want 0", rep.RPO.Entries)
	}
	if choice == failback.Park {
		if n := len(readOutside(t, east, []string{parkTopic})); n != total {
			t.Errorf("after a second --park the park topic holds %d, want %d", n, total)
		}
	}

	// East's subscription at west's state: a consumer on east receives
	// exactly what west's application left unacknowledged, and the tail
	// unless parked or consumed on west; nothing twice.
	expect := append([]string(nil), held...)
	if choice != failback.Park && !lateFirst {
		expect = append(expect, stranded...)
	}
	slices.Sort(expect)
	got, _, _ := app.consume(t, home, topic, sub, 0)
	slices.Sort(got)
	t.Logf("a consumer on east receives %d messages (west held back %d, stranded %d)", len(got), len(held), total)
	if !slices.Equal(got, expect) {
		t.Errorf("east's consumer received %d %v\nwant %d %v", len(got), got, len(expect), expect)
	}
}

// TestFailbackOutOfPlace: an entry present on west far out of place is
// not stranded. The pair east→west starts at latest after east's first
// 5 messages (A), copies the next 5 (B), and stops; failback --replay
// copies A late, after B's copies: on west A's copies lie 5 entries out
// of place. Failback again, with a window of 1 entry, must find nothing
// stranded; before the fix it found A stranded (its copies beyond the
// window) and replayed it a second time.
func TestFailbackOutOfPlace(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, 1, "east", "west")
	part := topic + "-partition-0"
	east, west := Client(t, "east"), Client(t, "west")
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(prefix string) {
		for i := range 5 {
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("a") // before set-up: skipped by start: latest
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west")+"    start: latest\n", "--cluster", "east")
	Eventually(t, 30*time.Second, func() error {
		subs, err := Admin(t, "east").Subscriptions().List(*mustTopicName(t, part))
		if err != nil || !slices.Contains(subs, "geo-sidecar.repl.west") {
			return fmt.Errorf("the pair's cursor on %s: %v %v", part, subs, err)
		}
		return nil
	})
	send("b")
	Eventually(t, 30*time.Second, func() error {
		if n := len(readOutside(t, west, []string{part})); n != 5 {
			return fmt.Errorf("west holds %d messages, want B's 5", n)
		}
		return nil
	})
	s.Stop()

	code, rep, errOut := runFailback(t, s.ConfigPath, topic, "--from", "east", "--replay", "--window", "1")
	if code != 0 || rep.RPO.Entries != 5 || rep.Copied != 5 {
		t.Fatalf("failback --replay: exit %d, stranded %d, copied %d; want 0, 5, 5\n%s", code, rep.RPO.Entries, rep.Copied, errOut)
	}
	code, rep, errOut = runFailback(t, s.ConfigPath, topic, "--from", "east", "--replay", "--window", "1")
	if code != 0 || rep.RPO.Entries != 0 || rep.Copied != 0 {
		t.Errorf("failback again, A's copies 5 entries out of place on west and a window of 1: exit %d, stranded %d, copied %d; want 0, 0, 0\n%s",
			code, rep.RPO.Entries, rep.Copied, errOut)
	}
	var got []string
	for _, m := range readOutside(t, west, []string{part}) {
		got = append(got, m.payload)
	}
	if want := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "a-0", "a-1", "a-2", "a-3", "a-4"}; !slices.Equal(got, want) {
		t.Errorf("west holds %v, want %v (each once)", got, want)
	}
}
