package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// geo-sidecar switchover against real clusters (issue 39, first step):
// a Shared application on east acknowledges every message but every 7th
// (held back, never acknowledged), the sidecar copies east to west with
// the subscription kept in step (which carries only its mark-delete
// position), the producer and the application stop, and the switchover
// brings west's subscription to east's exact state, holes included. A
// consumer on west then receives exactly the held-back messages: none
// delivered again, none lost. Pulsar's replicated subscriptions would
// deliver everything after the mark-delete position again.

const (
	switchoverPrefix    = "order"
	switchoverMessages  = 140
	switchoverHoldEvery = 7
)

// runSwitchover runs geo-sidecar switchover --json and returns its exit
// status, report and stderr.
func runSwitchover(t *testing.T, cfg, topic, sub string, args ...string) (int, switchover.Report, string) {
	t.Helper()
	return runJSON[switchover.Report](t, append([]string{"switchover", "--config", cfg, "--topic", topic, "--from", "east", "--to", "west",
		"--subscription", sub, "--quiet", "1s", "--json"}, args...)...)
}

// switchoverIndex is the index in a payload "prefix-i", or -1.
func switchoverIndex(payload []byte, prefix string) int {
	s, ok := strings.CutPrefix(string(payload), prefix+"-")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return i
}

// switchoverSubscribe attaches a consumer of sub on c, acknowledging
// with the broker's response, so that an acknowledgement returned is one
// the broker holds.
func switchoverSubscribe(t *testing.T, c pulsar.Client, topic, sub string, typ pulsar.SubscriptionType) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: typ,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true})
	if err != nil {
		t.Fatalf("subscribe %s to %s: %v", sub, topic, err)
	}
	return cons
}

// switchoverPrecise is each subscription's precise backlog on cluster,
// summed over topic's partitions.
func switchoverPrecise(t *testing.T, cluster, topic string) (map[string]int64, error) {
	st, err := Admin(t, cluster).Topics().GetPartitionedStatsWithOption(*mustTopicName(t, topic), false,
		utils.GetStatsOptions{GetPreciseBacklog: true})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, s := range st.Subscriptions {
		out[name] = s.MsgBacklog
	}
	return out, nil
}

// TestSwitchoverSharedHoles: the first row.
func TestSwitchoverSharedHoles(t *testing.T) { testSwitchover(t, pulsar.Shared, nil) }

// TestSwitchoverFailover, TestSwitchoverExclusive, TestSwitchoverKeyShared:
// the same with the other types (an application of theirs may acknowledge
// individually too). The move attaches as Shared: nothing is attached on
// west, so the broker admits any type.
func TestSwitchoverFailover(t *testing.T)  { testSwitchover(t, pulsar.Failover, nil) }
func TestSwitchoverExclusive(t *testing.T) { testSwitchover(t, pulsar.Exclusive, nil) }
func TestSwitchoverKeyShared(t *testing.T) { testSwitchover(t, pulsar.KeyShared, nil) }

// TestSwitchoverJava: the application is written with Pulsar's Java
// client (e2e/pulsar/Switchover.java), Shared.
func TestSwitchoverJava(t *testing.T) {
	testSwitchover(t, pulsar.Shared, func() switchoverApp {
		return javaSwitchoverApp{j: newJavaProgram(t, "Switchover.java"), typ: "Shared"}
	})
}

// switchoverApp is the application: it consumes on east holding every
// 7th message back, and drains what west delivers.
type switchoverApp interface {
	// consume returns the indexes held back, and a func that stops the
	// application when it is still attached (nil when it stopped).
	consume(t *testing.T, topic, sub string) (held []int, stop func())
	// drain receives and acknowledges what west delivers now: the
	// messages' indexes, and how many copies of markers came.
	drain(t *testing.T, topic, sub string) (got []int, markers int, err error)
	// detach stops the application on west.
	detach()
}

func testSwitchover(t *testing.T, typ pulsar.SubscriptionType, newApp func() switchoverApp) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	// Applications run with the marker entry filter (deploy/entryfilter);
	// where the test-bed broker has not loaded it, the markers' copies
	// reach the consumers and are told apart below (marker.Property).
	filtered := true
	for _, c := range []string{"east", "west"} {
		if err := postEntryFilter(c, ns); errors.Is(err, errFilterNotLoaded) {
			filtered = false
		} else if err != nil {
			t.Fatalf("entry filter of %s on %s: %v", ns, c, err)
		}
	}
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, 2, "east", "west")
	const sub = "billing"
	east, west := Client(t, "east"), Client(t, "west")

	// The subscription on both sides before anything is published.
	for _, c := range []pulsar.Client{east, west} {
		switchoverSubscribe(t, c, topic, sub, typ).Close()
	}
	s := StartSidecar(t, []string{"east", "west"},
		fmt.Sprintf("  - source: east\n    namespace: %s\n    %s\n    targets: [west]\n    subscriptions: [%s]\n", ns, all, sub))

	var app switchoverApp = &goSwitchoverApp{east: east, west: west, typ: typ}
	if newApp != nil {
		app = newApp()
	}
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range switchoverMessages {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", switchoverPrefix, i))}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	p.Close() // the producer stops: the switchover's precondition

	// The application on east: every message received, all but every
	// 7th acknowledged.
	held, stop := app.consume(t, topic, sub)
	if stop != nil {
		// While it is attached, its state may change: the switchover
		// refuses before it reads anything (exit 2, nothing moved).
		if code, rep, errOut := runSwitchover(t, s.ConfigPath, topic, sub); code != 2 || len(rep.Results) != 0 || !strings.Contains(errOut, "consumers attached") {
			t.Errorf("switchover with the application attached on east: exit %d, %d results, want 2 and none\n%s", code, len(rep.Results), errOut)
		}
		stop() // the application stops on east
	}
	slices.Sort(held)
	if len(held) != switchoverMessages/switchoverHoldEvery {
		t.Fatalf("held back %d messages, want %d", len(held), switchoverMessages/switchoverHoldEvery)
	}

	// The copy complete (the switchover proves it too).
	Eventually(t, 60*time.Second, func() error {
		code, _, errOut := runVerify(t, s.ConfigPath, topic, "--from", "east", "--to", "west", "--complete")
		if code != 0 {
			return fmt.Errorf("verify --complete exit %d: %s", code, errOut)
		}
		return nil
	})

	// A dry run plans the same and moves nothing (the run after it
	// still finds west behind: before.again below).
	code, rep, errOut := runSwitchover(t, s.ConfigPath, topic, sub, "--dry-run")
	if code != 0 || !rep.DryRun || rep.Again != 0 || rep.Missed != 0 || len(rep.Results) != 2 || rep.Results[0].Outcome != switchover.Planned {
		t.Errorf("switchover --dry-run: exit %d, report %+v\n%s", code, rep, errOut)
	}

	code, rep, errOut = runSwitchover(t, s.ConfigPath, topic, sub)
	t.Logf("switchover exit %d in %.1f s: again %d, missed %d, refused %d; next: %s", code, rep.Seconds, rep.Again, rep.Missed, rep.Refused, rep.Next)
	for _, r := range rep.Results {
		t.Logf("  %s %s: %s; source %s; target before %s (again %d) after %s; moved mark-delete %q, %d individually",
			r.Partition, r.Subscription, r.Outcome, r.Source, r.TargetBefore, r.Before.Again, r.TargetAfter, r.MovedMarkDelete, r.Individually)
	}
	if code != 0 || !rep.OK() || rep.Again != 0 || rep.Missed != 0 || len(rep.Results) != 2 {
		t.Errorf("switchover exit %d, report %+v\n%s", code, rep, errOut)
	}
	before := 0
	for _, r := range rep.Results {
		before += r.Before.Again
	}
	if before == 0 {
		t.Errorf("west's subscription was in step with east's before the switchover: the test proves nothing")
	}

	// Again: nothing left to move, the same verdict.
	code, rep, errOut = runSwitchover(t, s.ConfigPath, topic, sub)
	if code != 0 || rep.Again != 0 || rep.Missed != 0 {
		t.Errorf("switchover again: exit %d, report %+v\n%s", code, rep, errOut)
	}
	for _, r := range rep.Results {
		if r.Outcome != switchover.InStep {
			t.Errorf("switchover again: %s %s: %s, want %s", r.Partition, r.Subscription, r.Outcome, switchover.InStep)
		}
	}

	// A consumer on west receives exactly the held-back messages.
	count, markers := map[int]int{}, 0
	Eventually(t, 60*time.Second, func() error {
		got, m, err := app.drain(t, topic, sub)
		if err != nil {
			return err
		}
		for _, i := range got {
			count[i]++
		}
		markers += m
		backlogs, err := switchoverPrecise(t, "west", topic)
		if err != nil {
			return err
		}
		if b := backlogs[sub]; b != 0 {
			return fmt.Errorf("backlog of %s on west %d, received %d messages", sub, b, len(count))
		}
		return nil
	})
	var again, lost []int
	var got []int
	for i, n := range count {
		got = append(got, i)
		if n > 1 || !slices.Contains(held, i) {
			again = append(again, i)
		}
	}
	for _, i := range held {
		if count[i] == 0 {
			lost = append(lost, i)
		}
	}
	slices.Sort(got)
	slices.Sort(again)
	t.Logf("west received %d messages (held back on east: %d): delivered again %d, lost %d (and %d copies of markers; entry filter loaded: %v)",
		len(got), len(held), len(again), len(lost), markers, filtered)
	if len(again) > 0 || len(lost) > 0 {
		t.Errorf("delivered again %v, lost %v; received %v, held back %v", again, lost, got, held)
	}

	// West has now consumed the held-back messages, east has not: a
	// switchover east to west now would take west's position back. It
	// refuses, says what would be missed, exit 1, and moves nothing.
	app.detach()
	code, rep, errOut = runSwitchover(t, s.ConfigPath, topic, sub)
	if code != 1 || rep.Missed != len(held) || rep.Refused != 2 {
		t.Errorf("switchover once west consumed more: exit %d, missed %d, refused %d; want 1, %d, 2\n%+v\n%s", code, rep.Missed, rep.Refused, len(held), rep, errOut)
	}
	for _, r := range rep.Results {
		if r.Outcome != switchover.Refused || r.TargetAfter != r.TargetBefore {
			t.Errorf("%s: %s, target %s then %s: want refused and unchanged", r.Partition, r.Outcome, r.TargetBefore, r.TargetAfter)
		}
	}
}

// goSwitchoverApp is the application written with pulsar-client-go.
type goSwitchoverApp struct {
	east, west pulsar.Client
	typ        pulsar.SubscriptionType
	cons       pulsar.Consumer // on west, kept across drains
}

func (a *goSwitchoverApp) consume(t *testing.T, topic, sub string) ([]int, func()) {
	t.Helper()
	app := switchoverSubscribe(t, a.east, topic, sub, a.typ)
	var held []int
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for got := 0; got < switchoverMessages; {
		m, err := app.Receive(ctx)
		if err != nil {
			t.Fatalf("application on east after %d messages: %v", got, err)
		}
		if _, ok := m.Properties()[marker.Property]; ok {
			continue
		}
		got++
		i := switchoverIndex(m.Payload(), switchoverPrefix)
		if i < 0 {
			t.Fatalf("application on east received %q", m.Payload())
		}
		if i%switchoverHoldEvery == 0 {
			held = append(held, i)
			continue
		}
		if err := app.Ack(m); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	return held, app.Close
}

func (a *goSwitchoverApp) detach() {
	if a.cons != nil {
		a.cons.Close()
	}
}

func (a *goSwitchoverApp) drain(t *testing.T, topic, sub string) ([]int, int, error) {
	t.Helper()
	if a.cons == nil {
		a.cons = switchoverSubscribe(t, a.west, topic, sub, a.typ)
		t.Cleanup(a.cons.Close)
	}
	var got []int
	markers := 0
	for {
		rctx, rcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		m, err := a.cons.Receive(rctx)
		rcancel()
		if err != nil {
			return got, markers, nil
		}
		if err := a.cons.Ack(m); err != nil {
			return got, markers, fmt.Errorf("ack on west: %v", err)
		}
		if _, ok := m.Properties()[marker.Property]; ok {
			markers++
			continue
		}
		got = append(got, switchoverIndex(m.Payload(), switchoverPrefix))
	}
}

// javaSwitchoverApp is the application written with Pulsar's Java client.
type javaSwitchoverApp struct {
	j   *javaProgram
	typ string
}

func (a javaSwitchoverApp) consume(t *testing.T, topic, sub string) ([]int, func()) {
	t.Helper()
	lines, err := a.j.run("consume", Get("east").ServiceURL, topic, sub, a.typ, fmt.Sprint(switchoverMessages), fmt.Sprint(switchoverHoldEvery))
	if err != nil || len(lines) != 1 {
		t.Fatalf("Switchover.java consume: %v, %q", err, lines)
	}
	var out struct{ Held []int }
	if err := json.Unmarshal(lines[0], &out); err != nil {
		t.Fatalf("Switchover.java consume printed %s: %v", lines[0], err)
	}
	return out.Held, nil
}

func (javaSwitchoverApp) detach() {} // each run closes its consumer

func (a javaSwitchoverApp) drain(t *testing.T, topic, sub string) ([]int, int, error) {
	t.Helper()
	lines, err := a.j.run("drain", Get("west").ServiceURL, topic, sub, a.typ, "3")
	if err != nil || len(lines) != 1 {
		return nil, 0, fmt.Errorf("Switchover.java drain: %v, %q", err, lines)
	}
	var out struct {
		Received []int
		Markers  int
	}
	if err := json.Unmarshal(lines[0], &out); err != nil {
		return nil, 0, fmt.Errorf("Switchover.java drain printed %s: %w", lines[0], err)
	}
	return out.Received, out.Markers, nil
}
