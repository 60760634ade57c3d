package e2e

// The broker entry filter (deploy/entryfilter) that hides geo-sidecar's
// markers from applications. cluster.sh builds its NAR and every test-bed
// broker can load it (entryFiltersDirectory, allowOverrideEntryFilters); it
// applies to the namespaces whose entry-filter policy names it, so the rest
// of the suite sees markers as before.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// entryFilterName is the name in deploy/entryfilter's entry_filter.yaml.
const entryFilterName = "geo-sidecar-markers"

// propOriginCluster is the origin property the sidecar puts on its copies
// (marker.PropOriginCluster): on a marker's copy, a single message,
// consumers see it among the message's properties.
const propOriginCluster = "geo-sidecar.origin-cluster"

// errFilterNotLoaded: the broker does not know the marker filter.
var errFilterNotLoaded = errors.New("the broker has not loaded the entry filter")

// postEntryFilter names the marker filter in ns's entry-filter policy on
// cluster. A broker that did not load the filter refuses the name
// (errFilterNotLoaded).
func postEntryFilter(cluster, ns string) error {
	url := Get(cluster).AdminURL + "/admin/v2/namespaces/" + ns + "/entryFilters"
	body := fmt.Sprintf(`{"entryFilterNames":%q}`, entryFilterName)
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), "not found"):
		return fmt.Errorf("%w: %s %s", errFilterNotLoaded, resp.Status, b)
	default:
		return fmt.Errorf("%s %s", resp.Status, b)
	}
}

// ensureEntryFilterLoaded restarts (cluster.sh down, up) those of the named
// clusters whose broker does not know the filter: a shared test-bed
// cluster started before cluster.sh configured it. A restart starts it with
// the current standalone.conf and NAR.
func ensureEntryFilterLoaded(t *testing.T, names ...string) {
	t.Helper()
	probe := NewNamespace(t, names...)
	var stale []string
	for _, n := range names {
		err := postEntryFilter(n, probe)
		switch {
		case errors.Is(err, errFilterNotLoaded):
			stale = append(stale, n)
		case err != nil:
			t.Fatalf("set the entry filter of %s on %s: %v", probe, n, err)
		}
	}
	if len(stale) == 0 {
		return
	}
	DisruptClusters(t, stale...)
	t.Logf("restarting %v: started before cluster.sh configured the entry filter", stale)
	if err := Down(stale...); err != nil {
		t.Fatal(err)
	}
	if err := Up(stale...); err != nil {
		t.Fatal(err)
	}
	awaitClusters(t, names...)
}

// setNamespaceEntryFilter names the marker filter in ns's entry-filter
// policy on cluster and waits until the policy reads back.
func setNamespaceEntryFilter(t *testing.T, cluster, ns string) {
	t.Helper()
	url := Get(cluster).AdminURL + "/admin/v2/namespaces/" + ns + "/entryFilters"
	if err := postEntryFilter(cluster, ns); err != nil {
		t.Fatalf("set the entry filter of %s on %s: %v", ns, cluster, err)
	}
	Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), entryFilterName) {
			return fmt.Errorf("%s's entry filters on %s: %s %s", ns, cluster, resp.Status, b)
		}
		return nil
	})
}

// seen is what a consumer received: data messages by payload, and markers,
// told apart by the marker property (counted, never skipped: this consumer
// is an application without the skip helper).
type seen struct {
	data      []string
	local     int // markers written in this cluster
	forwarded int // copies of another cluster's markers
}

func (s seen) markers() int { return s.local + s.forwarded }

func (s seen) String() string {
	return fmt.Sprintf("%d data messages, %d markers (%d written here, %d forwarded copies)",
		len(s.data), s.markers(), s.local, s.forwarded)
}

// appConsumer is a plain application consumer: a Shared subscription,
// acknowledging everything it receives.
type appConsumer struct {
	cons pulsar.Consumer
	stop chan struct{}
	done chan error

	mu   sync.Mutex
	got  seen
	last time.Time
}

func startAppConsumer(t *testing.T, c pulsar.Client, topic, sub string) *appConsumer {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe %s on %s: %v", sub, topic, err)
	}
	a := &appConsumer{cons: cons, stop: make(chan struct{}), done: make(chan error, 1), last: time.Now()}
	go func() { a.done <- a.loop() }()
	t.Cleanup(func() { a.close() })
	return a
}

func (a *appConsumer) loop() error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		m, err := a.cons.Receive(ctx)
		cancel()
		select {
		case <-a.stop:
			return nil
		default:
		}
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			return err
		}
		if err := a.cons.Ack(m); err != nil {
			return err
		}
		a.mu.Lock()
		switch {
		case !marker.Is(m):
			a.got.data = append(a.got.data, string(m.Payload()))
		case m.Properties()[propOriginCluster] != "":
			a.got.forwarded++
		default:
			a.got.local++
		}
		a.last = time.Now()
		a.mu.Unlock()
	}
}

func (a *appConsumer) snapshot() (seen, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.got
	s.data = append([]string(nil), a.got.data...)
	return s, time.Since(a.last)
}

// await waits until want data messages came and then nothing for idle.
func (a *appConsumer) await(t *testing.T, want int, idle, timeout time.Duration) seen {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, quiet := a.snapshot()
		if len(s.data) >= want && quiet >= idle {
			return s
		}
		if time.Now().After(deadline) {
			t.Logf("after %s: %s of %d", timeout, s, want)
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// close stops the consumer and detaches it from its subscription.
func (a *appConsumer) close() error {
	select {
	case <-a.stop:
		return nil
	default:
	}
	close(a.stop)
	err := <-a.done
	a.cons.Close()
	return err
}

// TestEntryFilterHidesMarkers: with the filter named in the namespace's
// policy, an application's plain consumer receives no marker, neither on
// the replicated subscription it consumes in east nor on a subscription of
// its own in west, while the replicated subscription still comes in step
// in west (the sidecar's cursors and history reader are let through).
// The control namespace, without the filter, shows the same consumers
// receiving markers.
func TestEntryFilterHidesMarkers(t *testing.T) {
	awaitClusters(t, "east", "west")
	ensureEntryFilterLoaded(t, "east", "west")
	for _, filtered := range []bool{true, false} {
		name := map[bool]string{true: "filtered", false: "control"}[filtered]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := runEntryFilterScenario(t, filtered)
			t.Logf("%s: east orders-sub (replicated, consumed in east): %s; west audit: %s; "+
				"west orders-sub after the switch: %s; in step %v after %.1fs; updates applied in west: %.0f; "+
				"east geo-sidecar-testbed.tap (let through by the broker setting): %s",
				name, res.east, res.audit, res.after, res.inStep, res.inStepAfter.Seconds(), res.updates, res.tap)
			if !res.inStep {
				t.Errorf("orders-sub never got in step in west")
			}
			if res.updates == 0 {
				t.Errorf("no subscription update was applied in west: subscription sync did not run")
			}
			if missing, _ := tallyIDs(res.published, res.east.data); missing != 0 {
				t.Errorf("east orders-sub missed %d of %d published messages", missing, len(res.published))
			}
			if missing, _ := tallyIDs(res.published, res.audit.data); missing != 0 {
				t.Errorf("west audit missed %d of %d published messages", missing, len(res.published))
			}
			if len(res.after.data) > res.bound {
				t.Errorf("west orders-sub delivered %d messages again after the switch, more than %d: "+
					"the subscription was not carried over", len(res.after.data), res.bound)
			}
			if res.tap.markers() == 0 {
				t.Errorf("geo-sidecar-testbed.tap received no marker: the filter did not read geoSidecarMarkerSubscriptionPrefixes from the broker's configuration")
			}
			if !filtered {
				if res.east.markers()+res.audit.markers()+res.after.markers() == 0 {
					t.Errorf("without the filter the consumers received no marker: the control shows nothing")
				}
				return
			}
			for _, c := range []struct {
				where string
				s     seen
			}{{"east orders-sub", res.east}, {"west audit", res.audit}, {"west orders-sub", res.after}} {
				if c.s.local != 0 {
					t.Errorf("%s received %d markers written in its cluster through the filter", c.where, c.s.local)
				}
				if c.s.forwarded != 0 {
					t.Errorf("%s received %d forwarded markers through the filter", c.where, c.s.forwarded)
				}
			}
		})
	}
}

type entryFilterResult struct {
	published               []string
	east, audit, after, tap seen
	inStep                  bool
	inStepAfter             time.Duration
	bound                   int
	updates                 float64
}

// runEntryFilterScenario replicates a 2-partition topic east<->west keeping
// orders-sub in step, publishes in both regions while an application
// consumes orders-sub in east and its own audit subscription in west, then
// switches orders-sub to west.
func runEntryFilterScenario(t *testing.T, filtered bool) entryFilterResult {
	const (
		perRegion  = 1000
		over       = 10 * time.Second
		partitions = 2
	)
	ns := NewNamespace(t, "east", "west")
	if filtered {
		// Before any topic exists: a subscription's dispatcher takes the
		// filters in force when it is made.
		setNamespaceEntryFilter(t, "east", ns)
		setNamespaceEntryFilter(t, "west", ns)
	}
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, partitions, "east", "west")
	var cfg strings.Builder
	for _, d := range [][2]string{{"east", "west"}, {"west", "east"}} {
		fmt.Fprintf(&cfg, "  - source: %s\n    namespace: %s\n    topics: [orders]\n    targets: [%s]\n"+
			"    subscriptions: [orders-sub]\n", d[0], ns, d[1])
	}
	east, west := Client(t, "east"), Client(t, "west")
	eastApp := startAppConsumer(t, east, topic, "orders-sub")
	audit := startAppConsumer(t, west, topic, "audit")
	// A subscription under the second prefix that standalone.conf.in gives
	// the filter (geoSidecarMarkerSubscriptionPrefixes): it sees markers
	// only if the filter read the broker's setting.
	tap := startAppConsumer(t, east, topic, "geo-sidecar-testbed.tap")
	// The sidecar starts once both subscriptions exist: orders-sub is
	// tracked from its first position.
	s := StartSidecar(t, []string{"east", "west"}, cfg.String())

	published := append(ids("east", perRegion), ids("west", perRegion)...)
	pe := publishPaced(t, east, topic, "east", perRegion, over)
	pw := publishPaced(t, west, topic, "west", perRegion, over)
	pe.wait(t)
	pw.wait(t)

	var res entryFilterResult
	res.published = published
	// Everything arrives in both regions; markers keep coming a little
	// while (the updates that follow the acknowledgements).
	res.east = eastApp.await(t, len(published), 5*time.Second, 2*time.Minute)
	res.audit = audit.await(t, len(published), 5*time.Second, 2*time.Minute)
	if err := eastApp.close(); err != nil {
		t.Errorf("east orders-sub consumer: %v", err)
	}
	if err := audit.close(); err != nil {
		t.Errorf("west audit consumer: %v", err)
	}
	res.tap, _ = tap.snapshot()
	if err := tap.close(); err != nil {
		t.Errorf("east tap consumer: %v", err)
	}
	res.inStepAfter, res.inStep = awaitInStep(t, Admin(t, "east"), Admin(t, "west"), topic, "orders-sub", time.Minute)
	res.updates = s.Metric("geo_sidecar_subscription_updates_received_total", `outcome="applied"`) +
		s.Metric("geo_sidecar_subscription_updates_received_total", `outcome="created"`)
	after := startAppConsumer(t, west, topic, "orders-sub")
	res.after = after.await(t, 0, 5*time.Second, time.Minute)
	if err := after.close(); err != nil {
		t.Errorf("west orders-sub consumer: %v", err)
	}
	res.bound = dupBound(float64(len(published))/over.Seconds(), 0, partitions, true)
	return res
}

// TestReaderMarkDeletePassesFilteredEntries (issue 20, items 4 and 5): the
// read-back knows that a window's last entries will never come (an entry
// filter rejects them, or they are Pulsar's own markers) from its
// reader's mark-delete position: the broker acknowledges the entries it
// does not dispatch, so once the reader acknowledged what it received,
// GET_LAST_MESSAGE_ID's consumer_mark_delete_position reaches the end. A
// reader whose name the filter does not exempt stands for both cases.
func TestReaderMarkDeletePassesFilteredEntries(t *testing.T) {
	ensureEntryFilterLoaded(t, "west")
	ns := NewNamespace(t, "west")
	setNamespaceEntryFilter(t, "west", ns)
	topic := Topic(ns, "tail")
	west := Client(t, "west")
	ProduceWith(t, west, pulsar.ProducerOptions{Topic: topic, DisableBatching: true},
		&pulsar.ProducerMessage{Payload: []byte("a")}, &pulsar.ProducerMessage{Payload: []byte("b")})
	// Two markers at the end, as a marker writer stores them.
	for range 2 {
		ProduceWith(t, west, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, Name: "geo-sidecar.markers.e2e-" + fmt.Sprint(time.Now().UnixNano())},
			&pulsar.ProducerMessage{Payload: []byte("m"), Properties: map[string]string{marker.Property: "10"}})
	}
	ctx := context.Background()
	ww := wireClient(t, "west")
	probe, err := wire.Subscribe(ctx, ww, wire.ConsumerOptions{Topic: topic, Subscription: "app-probe", NonDurable: true, InitialPosition: wire.Latest, Permits: 1, NoTopicCreation: true})
	if err != nil {
		t.Fatal(err)
	}
	last, ok, err := probe.LastMessageID(ctx)
	probe.Close()
	if err != nil || !ok {
		t.Fatalf("last message id: %v %v", ok, err)
	}
	start := wire.MessageID{Ledger: last.Ledger, Entry: last.Entry - 3, Partition: -1, BatchIndex: 0}
	r, err := wire.Subscribe(ctx, ww, wire.ConsumerOptions{Topic: topic, Subscription: "app-reader", NonDurable: true, StartMessageID: &start, Permits: 100, NoTopicCreation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 2 {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := r.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if e.ID.Entry > last.Entry-2 {
			t.Fatalf("received %v, a marker the filter should hide from this reader", e.ID)
		}
		if err := r.Ack(e.ID); err != nil {
			t.Fatal(err)
		}
	}
	Eventually(t, 10*time.Second, func() error {
		md, ok, err := r.MarkDelete(ctx)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("the broker sent no consumer_mark_delete_position")
		case md.Ledger != last.Ledger || md.Entry < last.Entry:
			return fmt.Errorf("mark-delete %d:%d, want %d:%d", md.Ledger, md.Entry, last.Ledger, last.Entry)
		}
		return nil
	})
}

// TestReadBackBehindFilteredMarker (issue 20, item 5): with the marker
// filter on the target (as docs/replicated-subscriptions.md recommends) and the target's newest
// entry a marker, a session start's read-back finishes at once. Its
// readers were named outside the cursor prefix the filter exempts, so they
// waited 30 s for the marker, logged "cannot read back every copy" and
// sent again whatever the read had not reached.
func TestReadBackBehindFilteredMarker(t *testing.T) {
	ensureEntryFilterLoaded(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	setNamespaceEntryFilter(t, "west", ns)
	topic := Topic(ns, "orders")
	east, west := Client(t, "east"), Client(t, "west")
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, "topics: [orders]", "west"))
	first := ProduceN(t, east, topic, "first", 100)
	if got := Payloads(Consume(t, west, topic, "check", len(first), 60*time.Second)); len(got) != len(first) {
		t.Fatalf("west has %d of %d messages before the restart", len(got), len(first))
	}
	s.Stop()
	// The newest entry on west: a marker, as a marker writer stores it.
	ProduceWith(t, west, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, Name: "geo-sidecar.markers.e2e"},
		&pulsar.ProducerMessage{Payload: []byte("m"), Properties: map[string]string{marker.Property: "10"}})
	second := ProduceN(t, east, topic, "second", 100)
	s = s.Restart()
	got := Payloads(drain(t, west, topic, "check", len(second), 60*time.Second, 2*time.Second))
	if !slices.Equal(got, second) {
		t.Errorf("west has %d messages after the restart, want the %d new ones once each", len(got), len(second))
	}
	log, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "cannot read back every copy") {
		t.Errorf("the read-back did not finish: %s", firstLine(string(log), "cannot read back"))
	}
}

// firstLine is the first line of text containing sub.
func firstLine(text, sub string) string {
	for line := range strings.Lines(text) {
		if strings.Contains(line, sub) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
