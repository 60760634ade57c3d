package e2e

// Issue 11's second HA corner case: two instances of the sidecar for the
// same pair start together, so both may find no cursor and assume they will
// read the partition from its start (snapshot.Config.Fresh: a third origin
// not seen yet has no message before the cursor). The one that becomes the
// standby then takes over from the other after entries it never read: its
// third-origin watermarks would be too low, and a response naming them
// would let the other side move a subscription past messages that had not
// reached it. Checked on real clusters with the test's own consumers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestHAStartTogether: north copies into east (north->west is down until
// the end, so west holds no north message meanwhile); east and west copy to
// each other and keep app-east and app-west in step; two instances for
// east->west start at the same moment. After part of the traffic the active
// one is killed and the standby takes over mid-ledger, while east and west
// keep publishing and north publishes again. Then app-west fails over from
// west to east (the standby answered west's snapshot requests after the
// takeover: a response naming no north message would have let east's
// app-west skip the north messages west never had) and app-east from east
// to west (the standby is the requester there). Nothing is lost either way.
func TestHAStartTogether(t *testing.T) { haStartTogether(t, false) }

// TestHAStartTogetherAtLedgerStart is TestHAStartTogether with east's topic
// unloaded before the kill: the standby takes over at the first entry of a
// new ledger. It took that entry as the partition's first and answered
// west's requests with no north watermark: 8 snapshots completed while
// north was silent, and app-west lost the 300 north messages of the first
// phase failing over to east, until such an entry counted as a takeover
// (replicator: entryPartition.continues).
func TestHAStartTogetherAtLedgerStart(t *testing.T) { haStartTogether(t, true) }

// haStartEntries is the replication of TestHAStartTogether: east and west
// copy to each other, keeping app-east and app-west in step, and north
// copies into both (so north is a third origin of the east<->west pair);
// northTo is north's entry towards one cluster alone, so that each of its
// links can run in a process of its own.
func haStartEntries(ns string) (full string, northTo func(target string) string) {
	northTo = func(target string) string {
		return fmt.Sprintf("  - source: north\n    namespace: %s\n    %s\n    targets: [%s]\n", ns, all, target)
	}
	return northTo("east") + northTo("west") + syncEntriesWith(ns, "subscriptions: [app-east, app-west]", "east", "west"), northTo
}

// haSnapshotTimeout is the east and west sidecars' snapshot timeout. A
// request whose response names a north watermark west cannot reach (north
// ->west is down) stays pending until it times out, and no other request
// goes out meanwhile: with the default 30 s the survivor would be asked
// nothing while north is silent.
const haSnapshotTimeout = "2s"

// haConfig writes a config for the given clusters and entries with the
// snapshot timeout haSnapshotTimeout; it returns its path and listen
// address.
func haConfig(t *testing.T, clusters []string, entries string) (cfg, listen string) {
	t.Helper()
	listen = FreeAddr(t)
	cfg = filepath.Join(t.TempDir(), "config.yaml")
	text := strings.Replace(Config(listen, clusters, entries),
		"sidecar:\n", "sidecar:\n  snapshot: {timeout: "+haSnapshotTimeout+"}\n", 1)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, listen
}

// startTogether launches n sidecars with the same config at the same moment
// and then waits until each is ready: both look at the partition before
// either has created the cursor.
func startTogether(t *testing.T, n int, clusters []string, entries string, args ...string) []*Sidecar {
	t.Helper()
	var ss []*Sidecar
	for range n {
		cfg, listen := haConfig(t, clusters, entries)
		ss = append(ss, launchSidecar(t, cfg, listen, args...))
	}
	for _, s := range ss {
		s.awaitReady()
	}
	return ss
}

// haPublisher publishes "<region>-<i>" messages, numbered on per region,
// with one batching producer per region, and keeps every id published.
type haPublisher struct {
	t         *testing.T
	prods     map[string]pulsar.Producer
	next      map[string]int
	published []string
}

func newHAPublisher(t *testing.T, clients map[string]pulsar.Client, topic string) *haPublisher {
	t.Helper()
	p := &haPublisher{t: t, prods: map[string]pulsar.Producer{}, next: map[string]int{}}
	for r, c := range clients {
		prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 2000,
			BatchingMaxMessages: batchMax})
		if err != nil {
			t.Fatalf("producer on %s in %s: %v", topic, r, err)
		}
		t.Cleanup(prod.Close)
		p.prods[r] = prod
	}
	return p
}

// publish sends n messages in each of regions, in 10 rounds spread over
// the given time (snapshots are taken meanwhile), each round confirmed.
func (p *haPublisher) publish(regions []string, n int, over time.Duration) {
	p.t.Helper()
	const rounds = 10
	for k := range rounds {
		var failed atomic.Value
		for _, r := range regions {
			for range n*(k+1)/rounds - n*k/rounds {
				id := msgID(r, p.next[r])
				p.next[r]++
				p.published = append(p.published, id)
				p.prods[r].SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(id), Key: "k" + id[len(id)-1:]},
					func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err != nil {
							failed.CompareAndSwap(nil, err)
						}
					})
			}
		}
		for _, r := range regions {
			if err := p.prods[r].Flush(); err != nil {
				p.t.Fatalf("publishing in %s: %v", r, err)
			}
		}
		if err, ok := failed.Load().(error); ok {
			p.t.Fatalf("publishing: %v", err)
		}
		time.Sleep(over / rounds)
	}
}

// cursor is the sidecar's cursor towards remote (the default cursor
// prefix; Config sets none).
func cursor(remote string) string { return "geo-sidecar.repl." + remote }

// awaitCopied waits until each listed cursor (cluster -> remote) has no
// backlog: everything published so far, markers included, is copied.
func awaitCopied(t *testing.T, topic string, links [][2]string) {
	t.Helper()
	Eventually(t, 2*time.Minute, func() error {
		for _, l := range links {
			if b := backlogOf(t, l[0], topic, cursor(l[1])); b != 0 {
				return fmt.Errorf("the %s->%s cursor's backlog is %d (-1: no cursor)", l[0], l[1], b)
			}
		}
		return nil
	})
}

// logged returns the entries of a sidecar's JSON log whose message is msg.
func logged(t *testing.T, s *Sidecar, msg string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// startedFresh reports whether a sidecar's sync took the partition's
// cursor as new at start: its start-up re-read of the history knew every
// third-origin watermark already (none seen), where a sidecar that found
// the cursor had to learn them.
func startedFresh(t *testing.T, s *Sidecar) (fresh, known bool) {
	t.Helper()
	for _, e := range logged(t, s, "partition history re-read") {
		before, _ := e["watermarks_unknown_before"].([]any)
		return len(before) == 0, true
	}
	return false, false
}

func haStartTogether(t *testing.T, newLedger bool) {
	if err := Up("north"); err != nil {
		t.Fatal(err)
	}
	regions := []string{"north", "east", "west"}
	awaitClusters(t, regions...)
	ns := NewNamespace(t, regions...)
	topic := Topic(ns, "orders")
	clients := map[string]pulsar.Client{}
	for _, r := range regions {
		clients[r] = Client(t, r)
	}
	// The applications' subscriptions exist before the first message (and
	// make the topic on east and west).
	startConsumer(t, clients["east"], topic, "app-east", pulsar.Exclusive, 0).stop(t)
	startConsumer(t, clients["west"], topic, "app-west", pulsar.Exclusive, 0).stop(t)

	full, northTo := haStartEntries(ns)
	StartSidecar(t, []string{"north", "east"}, northTo("east"))
	wcfg, wlisten := haConfig(t, regions, full)
	w := StartSidecarFile(t, wcfg, wlisten, "--cluster", "west")
	es := startTogether(t, 2, regions, full, "--cluster", "east", "--log-level", "debug")
	var fresh []bool
	var freshText []string
	for i, s := range es {
		f, ok := startedFresh(t, s)
		fresh = append(fresh, f)
		freshText = append(freshText, fmt.Sprintf("instance %d: fresh %v (known %v)", i, f, ok))
	}
	t.Logf("east->west instances started together: %s", strings.Join(freshText, "; "))

	pub := newHAPublisher(t, clients, topic)
	pub.publish(regions, 300, 3*time.Second)
	awaitCopied(t, topic, [][2]string{{"north", "east"}, {"east", "west"}, {"west", "east"}})
	time.Sleep(3 * time.Second) // the last snapshots' markers
	awaitCopied(t, topic, [][2]string{{"east", "west"}, {"west", "east"}})

	tn := mustTopicName(t, topic)
	if newLedger {
		st, err := Admin(t, "east").Topics().GetInternalStats(*tn)
		if err != nil {
			t.Fatal(err)
		}
		old := st.Ledgers[len(st.Ledgers)-1].LedgerID
		if err := Admin(t, "east").Topics().Unload(*tn); err != nil {
			t.Fatal(err)
		}
		Eventually(t, time.Minute, func() error {
			st, err := Admin(t, "east").Topics().GetInternalStats(*tn)
			if err != nil {
				return err
			}
			if l := st.Ledgers[len(st.Ledgers)-1]; l.LedgerID == old || l.Entries != 0 {
				return fmt.Errorf("east's current ledger is %d with %d entries; before the unload %d", l.LedgerID, l.Entries, old)
			}
			return nil
		})
		time.Sleep(2 * time.Second) // both cursors connected again
	}

	// The active instance is the one that copied the traffic so far.
	active := 0
	if es[1].Metric("geo_sidecar_replicated_messages_total") > es[0].Metric("geo_sidecar_replicated_messages_total") {
		active = 1
	}
	killed, survivor := es[active], es[1-active]
	if !fresh[1-active] {
		t.Logf("note: the standby found the other's cursor at start; this run missed the case it aims at (a standby that took the cursor as new)")
	}
	copiedBefore := [2]float64{killed.Metric("geo_sidecar_replicated_messages_total"), survivor.Metric("geo_sidecar_replicated_messages_total")}
	completedBefore := w.Metric("geo_sidecar_snapshots_completed_total", `source="west"`)
	killed.Kill()

	// North is silent for a while after the takeover: until the survivor
	// reads a north message it knows north's watermark only if it learned
	// it from the history.
	pub.publish([]string{"east", "west"}, 400, 8*time.Second)
	completedQuiet := w.Metric("geo_sidecar_snapshots_completed_total", `source="west"`) - completedBefore
	pub.publish(regions, 200, 3*time.Second)
	awaitCopied(t, topic, [][2]string{{"north", "east"}, {"east", "west"}, {"west", "east"}})
	takeovers := len(logged(t, survivor, "resuming past messages another instance processed: re-learning third-origin watermarks"))
	t.Logf("takeover: instance %d (copied %v messages) killed, instance %d (copied %v before) went on: %v copied since, %d takeovers logged, %v history entries re-read, %v requests unanswered; west's snapshots completed while north was silent: %v",
		active, copiedBefore[0], 1-active, copiedBefore[1],
		survivor.Metric("geo_sidecar_replicated_messages_total")-copiedBefore[1], takeovers,
		survivor.Metric("geo_sidecar_history_entries_read_total"), survivor.Metric("geo_sidecar_snapshot_requests_unanswered_total"),
		completedQuiet)

	// app-west consumes all west holds (no north message: north->west is
	// down), app-east half of what east holds.
	inWest := pub.next["east"] + pub.next["west"]
	beforeWest := startConsumer(t, clients["west"], topic, "app-west", pulsar.Exclusive, inWest).drain(t, inWest, 10*time.Second, 2*time.Minute)
	half := len(pub.published) / 2
	beforeEast := startConsumer(t, clients["east"], topic, "app-east", pulsar.Exclusive, half).drain(t, half, 10*time.Second, 2*time.Minute)
	westInStep, _ := awaitInStep(t, Admin(t, "west"), Admin(t, "east"), topic, "app-west", time.Minute)
	eastInStep, _ := awaitInStep(t, Admin(t, "east"), Admin(t, "west"), topic, "app-east", time.Minute)

	// app-west fails over to east.
	afterEast := startConsumer(t, clients["east"], topic, "app-west", pulsar.Exclusive, 0).drain(t, 1<<30, 5*time.Second, 3*time.Minute)
	// north->west comes up, then app-east fails over to west.
	StartSidecar(t, []string{"north", "west"}, northTo("west"))
	awaitCopied(t, topic, [][2]string{{"north", "west"}})
	afterWest := startConsumer(t, clients["west"], topic, "app-east", pulsar.Exclusive, 0).drain(t, 1<<30, 5*time.Second, 3*time.Minute)

	for _, f := range []struct {
		sub, from, to string
		before, after []string
		inStep        time.Duration
	}{
		{"app-west", "west", "east", beforeWest, afterEast, westInStep},
		{"app-east", "east", "west", beforeEast, afterWest, eastInStep},
	} {
		r := tallyFailover(pub.published, f.before, f.after)
		t.Logf("%s failed over %s->%s: published %d (north %d, east %d, west %d), consumed before %d, after %d, lost %d, duplicates %d; in step after %.1fs",
			f.sub, f.from, f.to, r.Published, pub.next["north"], pub.next["east"], pub.next["west"], r.Before, r.After, r.Lost, r.Duplicates, f.inStep.Seconds())
		if r.Lost != 0 {
			t.Errorf("%s lost %d messages failing over %s->%s (e.g. %s)", f.sub, r.Lost, f.from, f.to, r.LostIDs)
		}
	}
}
