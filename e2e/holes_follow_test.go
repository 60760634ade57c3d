package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// Ack holes in the continuous follow (issue 39, its last piece): a Shared
// application on east acknowledges every message but every 7th (held
// back, never acknowledged), and the sidecars keep the subscription in
// step, no switchover. With sidecar.positions: servlet the follow carries
// the ranges acknowledged past the mark-delete position too (an acked
// marker), and west's copy acknowledges their copies one by one: a
// consumer on west receives exactly the held-back messages. With the
// admin positions path nothing changes: only the mark-delete position is
// carried, and west delivers everything after it again.

// TestFollowHolesServlet: the case, with the servlet.
func TestFollowHolesServlet(t *testing.T) { testFollowHoles(t, true) }

// TestFollowHolesAdminPath: the same with the admin positions path: the
// fallback, unchanged.
func TestFollowHolesAdminPath(t *testing.T) { testFollowHoles(t, false) }

// startHolesSidecar starts a sidecar for replication, with
// sidecar.positions: servlet when servlet.
func startHolesSidecar(t *testing.T, servlet bool, replication string) *Sidecar {
	t.Helper()
	if servlet {
		return startServletSidecar(t, replication)
	}
	listen := FreeAddr(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(Config(listen, []string{"east", "west"}, replication)), 0o600); err != nil {
		t.Fatal(err)
	}
	return StartSidecarFile(t, path, listen)
}

func testFollowHoles(t *testing.T, servlet bool) {
	UseClusters(t, "east", "west")
	awaitClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	filtered := true
	for _, c := range []string{"east", "west"} {
		if err := postEntryFilter(c, ns); errors.Is(err, errFilterNotLoaded) {
			filtered = false
		} else if err != nil {
			t.Fatalf("entry filter of %s on %s: %v", ns, c, err)
		}
	}
	const sub, parts = "billing", 2
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, parts, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	for _, c := range []pulsar.Client{east, west} {
		switchoverSubscribe(t, c, topic, sub, pulsar.Shared).Close()
	}
	a := startHolesSidecar(t, servlet, oneWay(ns, sub, "east", "west"))
	b := startHolesSidecar(t, servlet, oneWay(ns, sub, "west", "east"))

	produceUnbatched(t, east, topic, switchoverPrefix, 0, switchoverMessages)
	// The application on east: every message received, all but every
	// 7th acknowledged. It stays attached (its held-back messages stay
	// unacknowledged) until west has been read.
	app := &goSwitchoverApp{east: east, west: west, typ: pulsar.Shared}
	held, stop := app.consume(t, topic, sub)
	defer stop()
	slices.Sort(held)

	// West's copy of the subscription, read from its state (internal
	// stats) over the copies: the data copies it has not consumed.
	var unconsumed []int
	wait := 90 * time.Second
	if !servlet {
		wait = 20 * time.Second // what the follow does not carry does not come
	}
	start := time.Now()
	err := untilNil(wait, func() error {
		var err error
		if unconsumed, err = westUnconsumed(t, west, topic, parts, sub); err != nil {
			return err
		}
		if !slices.Equal(unconsumed, held) {
			return fmt.Errorf("west's %s would deliver %d messages (%v), east held back %d", sub, len(unconsumed), unconsumed, len(held))
		}
		return nil
	})
	took := time.Since(start)
	sent := a.Metric("geo_sidecar_markers_written_total", `kind="acked"`)
	applied := b.Metric("geo_sidecar_subscription_ack_holes_received_total", `outcome="applied"`)
	t.Logf("servlet %v: west's %s would deliver %d messages (east held back %d) after %s; acked markers written %v, applied on west %v",
		servlet, sub, len(unconsumed), len(held), took.Round(100*time.Millisecond), sent, applied)
	if servlet && err != nil {
		t.Fatal(err)
	}
	if servlet {
		// Nothing changes on east now: no acked marker more (the entry
		// filter acknowledging the markers written since, the acked
		// markers among them, is no change).
		time.Sleep(5 * time.Second)
		if more := a.Metric("geo_sidecar_markers_written_total", `kind="acked"`) - sent; more != 0 {
			t.Errorf("%v acked markers written in the 5 s after west held the holes, with nothing acknowledged on east", more)
		}
	}
	if !servlet {
		if err == nil {
			t.Error("with the admin positions path west's copy holds the holes: the fallback changed")
		}
		if sent != 0 || applied != 0 {
			t.Errorf("with the admin positions path: %v acked markers written, %v applied; want none", sent, applied)
		}
	}

	// A consumer on west, as after a failover: it receives what west's
	// state left, and never misses a held-back message.
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
	var again, lost, got []int
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
	t.Logf("servlet %v: west received %d messages (held back on east: %d): delivered again %d, lost %d (and %d copies of markers; entry filter loaded: %v)",
		servlet, len(got), len(held), len(again), len(lost), markers, filtered)
	if len(lost) > 0 {
		t.Errorf("lost %v: west's copy consumed messages east's application never acknowledged", lost)
	}
	if servlet && len(again) > 0 {
		t.Errorf("delivered again %v; received %v, held back %v", again, got, held)
	}
	if !servlet && len(again) == 0 {
		t.Error("with the admin positions path nothing was delivered again: the fallback changed, or the test proves nothing")
	}
}

// westUnconsumed is the indexes of the data copies on west's partitions
// of topic that sub has not consumed there (its mark-delete position and
// the ranges acknowledged past it, as internal stats show them), sorted.
func westUnconsumed(t *testing.T, c pulsar.Client, topic string, parts int, sub string) ([]int, error) {
	t.Helper()
	var out []int
	for _, pt := range partitionsOf(topic, parts) {
		tn, err := utils.GetTopicName(pt)
		if err != nil {
			return nil, err
		}
		st, err := Admin(t, "west").Topics().GetInternalStats(*tn)
		if err != nil {
			return nil, fmt.Errorf("internal stats of %s on west: %w", pt, err)
		}
		cur, ok := st.Cursors[sub]
		if !ok {
			return nil, fmt.Errorf("%s on west has no %s", pt, sub)
		}
		md, ok := switchover.ParseEntry(cur.MarkDeletePosition)
		if !ok {
			return nil, fmt.Errorf("%s on west: mark-delete %q", pt, cur.MarkDeletePosition)
		}
		acked, err := switchover.ParseAcked(cur.IndividuallyDeletedMessages)
		if err != nil {
			return nil, err
		}
		state := switchover.State{MarkDelete: md, Acked: acked}
		// Under the sidecar's prefix: the marker entry filter, where
		// loaded, hides the markers from other subscriptions, and a reader
		// whose last entries are markers would wait for them for ever.
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: pt, StartMessageID: pulsar.EarliestMessageID(),
			SubscriptionRolePrefix: "geo-sidecar.e2e-holes"})
		if err != nil {
			return nil, err
		}
		for r.HasNext() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := r.Next(ctx)
			cancel()
			if err != nil {
				r.Close()
				return nil, err
			}
			if marker.Is(m) || !strings.HasPrefix(string(m.Payload()), switchoverPrefix+"-") {
				continue
			}
			p := marker.Position{Ledger: m.ID().LedgerID(), Entry: m.ID().EntryID(), Batch: -1}
			if !state.Consumed(p) {
				out = append(out, switchoverIndex(m.Payload(), switchoverPrefix))
			}
		}
		r.Close()
	}
	slices.Sort(out)
	return out, nil
}

// untilNil calls f until it returns nil or timeout passed, and returns
// its last error.
func untilNil(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
