package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// javaMsg is one line of `Fidelity.java dump`: a message as Pulsar's Java
// client reads it.
type javaMsg struct {
	Head                string            `json:"head"` // first bytes of the payload, for messages
	SHA256              string            `json:"sha256"`
	Size                int               `json:"size"`
	HasKey              bool              `json:"hasKey"`
	Key                 *string           `json:"key"`
	KeyBytes            *string           `json:"keyBytes"` // base64
	HasBase64EncodedKey bool              `json:"hasBase64EncodedKey"`
	OrderingKey         *string           `json:"orderingKey"` // base64
	Properties          map[string]string `json:"properties"`
	EventTime           int64             `json:"eventTime"`
	PublishTime         int64             `json:"publishTime"`
	ProducerName        string            `json:"producerName"`
	SequenceID          int64             `json:"sequenceId"`
	ReplicatedFrom      string            `json:"replicatedFrom"`
	Ledger              int64             `json:"ledger"`
	Entry               int64             `json:"entry"`
	BatchIndex          int               `json:"batchIndex"`
	BatchSize           int               `json:"batchSize"`
	DeliverAt           int64             `json:"deliverAt"` // Unix ms, 0 when unset
	Compression         string            `json:"compression"`
	ReplicateTo         []string          `json:"replicateTo"`
}

func (m javaMsg) entryID() string { return fmt.Sprintf("%d:%d", m.Ledger, m.Entry) }

// javaProgram runs a single-file Java program of e2e/pulsar (Fidelity.java,
// Txn.java) with the test bed's classpath; the client's log goes to a file
// of the test.
type javaProgram struct {
	classpath, source, log4j, logFile string
}

func newJavaFidelity(t *testing.T) *javaProgram { return newJavaProgram(t, "Fidelity.java") }

// newJavaProgram runs e2e/pulsar/<file>.
func newJavaProgram(t *testing.T, file string) *javaProgram {
	t.Helper()
	out, err := exec.Command(ScriptPath(), "classpath").Output()
	if err != nil {
		t.Fatalf("cluster.sh classpath: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		t.Fatal("cluster.sh classpath printed nothing")
	}
	cp, err := os.ReadFile(lines[len(lines)-1])
	if err != nil {
		t.Fatalf("classpath file: %v", err)
	}
	dir := filepath.Dir(ScriptPath())
	j := &javaProgram{classpath: strings.TrimSpace(string(cp)), source: filepath.Join(dir, file),
		log4j: filepath.Join(dir, "log4j2.xml"), logFile: filepath.Join(t.TempDir(), "java-client.log")}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(j.logFile); err == nil && len(b) > 0 {
				t.Logf("Java client log (last 4 KiB):\n%s", tail(b, 4096))
			}
		}
	})
	return j
}

// run runs the program with args and returns the JSON lines it printed.
func (j *javaProgram) run(args ...string) ([][]byte, error) {
	cmd := exec.Command("java", append([]string{"-cp", j.classpath, "-Dlog4j.configurationFile=" + j.log4j,
		"-Dpulsar.log.file=" + j.logFile, "-XX:TieredStopAtLevel=1", j.source}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(j.source), strings.Join(args, " "), err, tail(stdout.Bytes(), 2048), tail(stderr.Bytes(), 4096))
	}
	var lines [][]byte
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := sc.Bytes(); bytes.HasPrefix(l, []byte("{")) {
			lines = append(lines, bytes.Clone(l))
		}
	}
	return lines, sc.Err()
}

// dump reads topic on cluster from the start: until n messages or
// timeout, then whatever else comes within 2 s.
func (j *javaProgram) dump(cluster, topic string, n int, timeout time.Duration) ([]javaMsg, error) {
	lines, err := j.run("dump", Get(cluster).ServiceURL, topic, fmt.Sprint(n), fmt.Sprint(int(timeout.Seconds())))
	if err != nil {
		return nil, err
	}
	var out []javaMsg
	for _, l := range lines {
		var m javaMsg
		if err := json.Unmarshal(l, &m); err != nil {
			return nil, fmt.Errorf("dump of %s: %w in %s", cluster, err, l)
		}
		out = append(out, m)
	}
	return out, nil
}

// TestEntryPipeJavaFidelity covers, with Pulsar's Java client, what
// TestEntryPipeFidelity cannot write with pulsar-client-go: a SNAPPY batch
// and SNAPPY single messages, binary keys and ordering keys that are not
// UTF-8 (partition_key_b64_encoded), in a batch and alone, delivery times
// (deliverAt, deliverAfter), Java's replicate_to (disableReplication,
// replicationClusters), and an ordinary batch with properties and event
// times. Every copy on west is compared field by field with its original
// on east as the Java client reads both, and every entry's stored metadata
// through the admin API (one entry on east, one entry on west, batch size
// and compression unchanged).
//
// Delivery time: the Java client exposes deliver_at_time (through
// MessageImpl's metadata), so it is compared as a field like the others.
// It is also checked by what it is for: a Shared subscription on west must
// not receive a copy before its delivery time, and must receive it after.
// Messages due 20 s after they were written keep that short; one due in an
// hour must not arrive at all.
func TestEntryPipeJavaFidelity(t *testing.T) {
	start := time.Now()
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "java-fidelity")
	j := newJavaFidelity(t)
	// The sidecar runs before anything is written, so that copies follow
	// their originals within seconds (the delivery-time check needs them
	// on west well before they are due).
	StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	shared := watchShared(t, topic)

	var produced struct{ Produced, LocalOnly int }
	lines, err := j.run("produce", Get("east").ServiceURL, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || json.Unmarshal(lines[0], &produced) != nil || produced.Produced == 0 {
		t.Fatalf("Fidelity.java produce printed %q, want one JSON summary line", lines)
	}
	wantCopies := produced.Produced - produced.LocalOnly
	produceTook := time.Since(start)

	// Both dumps at once: each JVM takes seconds to start.
	var origin []javaMsg
	var eastErr error
	eastDone := make(chan struct{})
	go func() {
		defer close(eastDone)
		origin, eastErr = j.dump("east", topic, produced.Produced, time.Minute)
	}()
	copies, err := j.dump("west", topic, wantCopies, 90*time.Second)
	<-eastDone
	dumpsTook := time.Since(start) - produceTook
	if err != nil || eastErr != nil {
		t.Fatalf("dumps: west: %v; east: %v", err, eastErr)
	}
	if len(origin) != produced.Produced {
		t.Fatalf("east has %d messages, Fidelity.java wrote %d", len(origin), produced.Produced)
	}

	// What must be copied, in east's order: everything but the messages
	// whose replicate_to leaves west out.
	var want []javaMsg
	var local []string
	for _, m := range origin {
		if len(m.ReplicateTo) > 0 && !slices.Contains(m.ReplicateTo, "west") {
			local = append(local, m.Head)
			continue
		}
		want = append(want, m)
	}
	if len(local) != produced.LocalOnly {
		t.Errorf("east has %d messages whose replicate_to leaves west out (%q), Fidelity.java wrote %d", len(local), local, produced.LocalOnly)
	}
	if len(copies) != len(want) {
		t.Errorf("west has %d messages, want %d: %s", len(copies), len(want), heads(copies))
	}

	bySum := map[string]javaMsg{}
	for _, m := range want {
		bySum[m.SHA256] = m
	}
	westEntry := map[string]string{} // east entry -> west entry
	eastEntry := map[string]string{} // west entry -> east entry
	fields, orderOK := 0, true
	for i, g := range copies {
		o, ok := bySum[g.SHA256]
		if !ok {
			t.Errorf("west message %d (%q) is not one east should copy (replicate_to %v)", i, g.Head, g.ReplicateTo)
			continue
		}
		if orderOK && i < len(want) && want[i].SHA256 != g.SHA256 {
			t.Errorf("west message %d is %q, east's %d-th copyable message is %q: order differs (first difference)", i, g.Head, i, want[i].Head)
			orderOK = false
		}
		fields += compareMsg(t, o, g)
		if we, ok := westEntry[o.entryID()]; ok && we != g.entryID() {
			t.Errorf("%q: east entry %s went to west entries %s and %s: a batch was split", o.Head, o.entryID(), we, g.entryID())
		}
		if ee, ok := eastEntry[g.entryID()]; ok && ee != o.entryID() {
			t.Errorf("%q: west entry %s holds messages of east entries %s and %s", o.Head, g.entryID(), ee, o.entryID())
		}
		westEntry[o.entryID()], eastEntry[g.entryID()] = g.entryID(), o.entryID()
	}

	// Each entry's stored metadata, as the admin API shows it on both sides.
	snappy, headers := compareEntries(t, topic, want, westEntry)

	// Delivery times on a Shared subscription of west.
	delayed := shared.check(t, copies)

	t.Logf("entry pipe fidelity (Java client): %d messages written on east, %d copied (%d kept local by replicate_to), %d fields per message compared (%d in all); %d entries' stored metadata compared (%d admin-API headers); %s; %s; sidecar start and produce %s, dumps %s, in all %s",
		len(origin), len(copies), len(local), fields/max(len(copies), 1), fields, len(westEntry), headers, snappy, delayed,
		produceTook.Round(time.Second), dumpsTook.Round(time.Second), time.Since(start).Round(time.Second))
}

func heads(ms []javaMsg) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%q ", m.Head)
	}
	return b.String()
}

// compareMsg reports every field of copy g that differs from origin o and
// returns how many fields it compared.
func compareMsg(t *testing.T, o, g javaMsg) int {
	t.Helper()
	str := func(p *string) string {
		if p == nil {
			return "<none>"
		}
		return *p
	}
	checks := []struct {
		field      string
		orig, copy any
	}{
		{"payload size", o.Size, g.Size},
		{"hasKey", o.HasKey, g.HasKey},
		{"key", str(o.Key), str(g.Key)},
		{"keyBytes (base64)", str(o.KeyBytes), str(g.KeyBytes)},
		{"hasBase64EncodedKey", o.HasBase64EncodedKey, g.HasBase64EncodedKey},
		{"orderingKey (base64)", str(o.OrderingKey), str(g.OrderingKey)},
		{"properties", o.Properties, appProps(g.Properties)},
		{"eventTime", o.EventTime, g.EventTime},
		{"publishTime", o.PublishTime, g.PublishTime},
		{"producerName", o.ProducerName, g.ProducerName},
		{"sequenceId", o.SequenceID, g.SequenceID},
		{"deliverAt", o.DeliverAt, g.DeliverAt},
		{"compression", o.Compression, g.Compression},
		{"replicateTo", o.ReplicateTo, g.ReplicateTo},
		{"batchIndex", o.BatchIndex, g.BatchIndex},
		{"batchSize", o.BatchSize, g.BatchSize},
		{"replicatedFrom", "east", g.ReplicatedFrom},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.orig, c.copy) {
			t.Errorf("%q (east %s): %s on west is %v, east's is %v", o.Head, o.entryID(), c.field, c.copy, c.orig)
		}
	}
	if o.ReplicatedFrom != "" {
		t.Errorf("%q: east's original says it was replicated from %q", o.Head, o.ReplicatedFrom)
	}
	return len(checks)
}

// entryHeaders is the stored metadata of one entry as the admin API's
// get-message-by-id shows it (X-Pulsar-* response headers), without the
// headers that differ between an original and its copy by design.
func entryHeaders(t *testing.T, cluster, topic, entry string) (http.Header, string) {
	t.Helper()
	var ledger, id int64
	if _, err := fmt.Sscanf(entry, "%d:%d", &ledger, &id); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/admin/v2/persistent/%s/ledger/%d/entry/%d", Get(cluster).AdminURL,
		strings.TrimPrefix(topic, "persistent://"), ledger, id)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("entry %s on %s: %v", entry, cluster, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	h := http.Header{}
	for k, v := range resp.Header {
		if strings.HasPrefix(k, "X-Pulsar-") {
			h[k] = v
		}
	}
	from := h.Get("X-Pulsar-Replicated-From")
	h.Del("X-Pulsar-Message-Id")      // the position: each cluster's own
	h.Del("X-Pulsar-Replicated-From") // compared on its own
	// Entry-level properties: the copy adds geo-sidecar's origin ones.
	if p := h.Get("X-Pulsar-Property"); p != "" {
		var props map[string]string
		if err := json.Unmarshal([]byte(p), &props); err != nil {
			t.Fatalf("entry %s on %s: X-Pulsar-PROPERTY %q: %v", entry, cluster, p, err)
		}
		b, _ := json.Marshal(appProps(props))
		h.Set("X-Pulsar-Property", string(b))
	}
	return h, from
}

// compareEntries compares the stored metadata of each east entry that was
// copied with its copy's, and returns a line on the SNAPPY batch and how
// many headers it compared.
func compareEntries(t *testing.T, topic string, want []javaMsg, westEntry map[string]string) (snappy string, headers int) {
	t.Helper()
	snappy = "no SNAPPY batch seen"
	done := map[string]bool{}
	for _, m := range want {
		e := m.entryID()
		w, ok := westEntry[e]
		if done[e] || !ok {
			continue
		}
		done[e] = true
		oh, _ := entryHeaders(t, "east", topic, e)
		gh, from := entryHeaders(t, "west", topic, w)
		if from != "east" {
			t.Errorf("entry %s (%q) on west (%s): stored replicated_from %q, want east", e, m.Head, w, from)
		}
		for _, k := range slices.Sorted(maps.Keys(mergeKeys(oh, gh))) {
			headers++
			if ov, gv := oh.Get(k), gh.Get(k); ov != gv {
				t.Errorf("entry %s (%q): %s on west (%s) is %q, east's is %q", e, m.Head, k, w, gv, ov)
			}
		}
		if m.ProducerName == "java-snappy-batched" {
			n, c := gh.Get("X-Pulsar-Num-Batch-Message"), gh.Get("X-Pulsar-Compression")
			if c != "SNAPPY" || n != fmt.Sprint(m.BatchSize) || m.BatchSize != 20 {
				t.Errorf("SNAPPY batch: west's entry %s has %s messages, compression %q; east's %s has %d, SNAPPY", w, n, c, e, m.BatchSize)
			}
			snappy = fmt.Sprintf("SNAPPY batch of %s messages is one entry on west (%s, %s bytes compressed from %s)",
				n, c, gh.Get("X-Pulsar-Batch-Size"), gh.Get("X-Pulsar-Uncompressed-Size"))
		}
	}
	if snappy == "no SNAPPY batch seen" {
		t.Errorf("the SNAPPY batch from east is not on west")
	}
	return snappy, headers
}

func mergeKeys(a, b http.Header) http.Header {
	out := http.Header{}
	for k := range a {
		out[k] = nil
	}
	for k := range b {
		out[k] = nil
	}
	return out
}

// sharedWatch records when each message reaches a Shared subscription on
// west (the only kind the broker holds back until its delivery time).
type sharedWatch struct {
	mu      sync.Mutex
	arrived map[string]time.Time // payload head -> receive time
	cancel  context.CancelFunc
	done    chan struct{}
}

func watchShared(t *testing.T, topic string) *sharedWatch {
	t.Helper()
	cons, err := Client(t, "west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "delivery-time-check",
		Type: pulsar.Shared, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("Shared consumer on west: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &sharedWatch{arrived: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cons.Close()
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			_ = cons.Ack(m)
			p := m.Payload()
			w.mu.Lock()
			w.arrived[string(p[:min(len(p), 24)])] = time.Now()
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// check waits for the copies due within the test to reach the Shared
// subscription and checks none came before its delivery time, none due
// later came at all, and the others came without delay.
func (w *sharedWatch) check(t *testing.T, copies []javaMsg) string {
	t.Helper()
	// Due within the test: by a minute from now. The broker checks
	// delivery times on a 1 s tick; give it a few.
	soon := time.Now().Add(time.Minute)
	var last time.Time
	expect := 0
	for _, m := range copies {
		at := time.UnixMilli(m.DeliverAt)
		if m.DeliverAt == 0 || at.Before(soon) {
			expect++
			last = later(last, at)
		}
	}
	deadline := later(last, time.Now()).Add(10 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		n := len(w.arrived)
		w.mu.Unlock()
		if n >= expect {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	w.cancel()
	<-w.done
	due, notYet := 0, 0
	lead := time.Duration(-1)
	// A copy was stored on west at the latest when a message after it,
	// with no delivery time, reached the Shared subscription: the sidecar
	// writes in order. That tells whether the copy had to be held back.
	storedBy := make([]time.Time, len(copies))
	var next time.Time
	for i := len(copies) - 1; i >= 0; i-- {
		storedBy[i] = next
		if got, ok := w.arrived[copies[i].Head]; ok && copies[i].DeliverAt == 0 && (next.IsZero() || got.Before(next)) {
			next = got
		}
	}
	for i, m := range copies {
		got, ok := w.arrived[m.Head]
		at := time.UnixMilli(m.DeliverAt)
		switch {
		case m.DeliverAt == 0:
			if !ok {
				t.Errorf("%q (no delivery time) never reached the Shared subscription on west", m.Head)
			}
		case !at.Before(soon):
			notYet++
			if ok {
				t.Errorf("%q: due at %s, reached the Shared subscription on west at %s", m.Head, at.Format(time.StampMilli), got.Format(time.StampMilli))
			}
		default:
			due++
			if !ok {
				t.Errorf("%q: due at %s, never reached the Shared subscription on west (waited until %s)", m.Head, at.Format(time.StampMilli), deadline.Format(time.StampMilli))
			} else if got.Before(at) {
				t.Errorf("%q: due at %s, reached the Shared subscription on west early, at %s", m.Head, at.Format(time.StampMilli), got.Format(time.StampMilli))
			}
			l := time.Duration(0) // not known to have been on west before it was due
			if !storedBy[i].IsZero() {
				l = at.Sub(storedBy[i])
			}
			if lead < 0 || l < lead {
				lead = l
			}
		}
	}
	if due > 0 && lead <= 0 {
		return fmt.Sprintf("delivery times: %d copies due during the test reached west only after they were due, so holding them back was not exercised", due)
	}
	return fmt.Sprintf("delivery times: %d copies on west at least %s before they were due, delivered to a Shared subscription on west on time, not before; %d due in an hour not delivered",
		due, lead.Round(100*time.Millisecond), notYet)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
