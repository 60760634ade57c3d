package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// setSubscriptionTypes sets (types not nil) or removes (nil) the
// subscription types namespace ns allows on cluster (Pulsar's
// subscriptionTypesEnabled policy: a subscribe of another type is
// refused with NotAllowed). pulsaradmin has no call for it.
func setSubscriptionTypes(t *testing.T, cluster, ns string, types []string) {
	t.Helper()
	url := Get(cluster).AdminURL + "/admin/v2/namespaces/" + ns + "/subscriptionTypesEnabled"
	method, body := http.MethodDelete, []byte(nil)
	if types != nil {
		method, body = http.MethodPost, []byte(`["`+strings.Join(types, `","`)+`"]`)
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, b)
	}
}

// entriesOn is how many entries topic holds on cluster.
func entriesOn(t *testing.T, cluster, topic string) int64 {
	t.Helper()
	st, err := Admin(t, cluster).Topics().GetInternalStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatalf("internal stats of %s on %s: %v", topic, cluster, err)
	}
	return st.NumberOfEntries
}

// TestReadBackRefusedWithDedup (issue 34, item 7): the read-back of the
// target fails for good while the target deduplicates and already holds
// copies of entries east's cursor has not acknowledged. west's namespace
// allows Shared subscriptions only, so every read-back reader (a
// non-durable Exclusive subscription) is refused with NotAllowed, while
// the sidecar's producer writes as before.
//
// First the sidecar copies 200 messages with no deduplication record for
// its producer name yet: without the proof it sends under the entries'
// own sequence ids, and nothing waits. Then, the sidecar stopped, east's
// cursor is rewound to the start (as when the acknowledgements of copies
// west confirmed were lost) and 50 more messages are written: the
// restarted sidecar must neither skip the 200 (no proof they are there)
// nor send them again (west stored them: before, they went out under
// counted sequence ids, which west took as new, and west held every one
// of them twice, the second copies after the first 200). It sends
// nothing, acknowledges nothing and says so
// (partitions_awaiting_readback 1, one error line). Once west allows
// the readers again, the next read-back finds the 200 copies and the
// partition copies the 50: west holds each of the 250 messages once, in
// east's order.
func TestReadBackRefusedWithDedup(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	setSubscriptionTypes(t, "west", ns, []string{"Shared"})
	topic := Topic(ns, "rbrefused")
	east := Client(t, "east")
	const cursor = "geo-sidecar.repl.west"
	const first, more = 200, 50

	produceUnbatched(t, east, topic, "m", 0, first)
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	Eventually(t, 90*time.Second, func() error {
		if b := backlogOf(t, "east", topic, cursor); b != 0 {
			return fmt.Errorf("east's cursor for west has a backlog of %d", b)
		}
		return nil
	})
	if n := countLines(t, s.LogPath, "cannot read back the remote: sending on without its proof"); n == 0 {
		t.Fatalf("no read-back was refused: west's policy did not take (the test shows nothing)")
	}
	if v := s.Metric("geo_sidecar_partitions_awaiting_readback"); v != 0 {
		t.Errorf("partitions_awaiting_readback = %v with no deduplication record, want 0 (nothing to wait for)", v)
	}
	if n := entriesOn(t, "west", topic); n != first {
		t.Fatalf("west holds %d entries after the first copy, want %d", n, first)
	}
	s.Stop()

	if err := Admin(t, "east").Subscriptions().ResetCursorToTimestamp(*mustTopicName(t, topic), cursor, 0); err != nil {
		t.Fatalf("rewind east's cursor: %v", err)
	}
	produceUnbatched(t, east, topic, "n", 0, more)
	s = s.Restart()
	Eventually(t, 90*time.Second, func() error {
		if v := s.Metric("geo_sidecar_partitions_awaiting_readback", `source="east"`, `target="west"`); v != 1 {
			return fmt.Errorf("partitions_awaiting_readback = %v (west holds %d entries)", v, entriesOn(t, "west", topic))
		}
		return nil
	})
	// Let the sessions that retry the read-back come and go a while.
	time.Sleep(15 * time.Second)
	if n := entriesOn(t, "west", topic); n != first {
		t.Errorf("west holds %d entries while the partition waits, want %d (nothing sent again)", n, first)
	}
	if b := backlogOf(t, "east", topic, cursor); b != first+more {
		t.Errorf("east's cursor has a backlog of %d while the partition waits, want %d (nothing acknowledged)", b, first+more)
	}
	if n := countLines(t, s.LogPath, "sends nothing until a read-back goes through"); n != 1 {
		t.Errorf("%d error lines saying the partition waits, want 1", n)
	}

	setSubscriptionTypes(t, "west", ns, nil)
	Eventually(t, 120*time.Second, func() error {
		if b := backlogOf(t, "east", topic, cursor); b != 0 {
			return fmt.Errorf("east's cursor for west has a backlog of %d", b)
		}
		if v := s.Metric("geo_sidecar_partitions_awaiting_readback"); v != 0 {
			return fmt.Errorf("partitions_awaiting_readback = %v", v)
		}
		return nil
	})
	if n := entriesOn(t, "west", topic); n != first+more {
		t.Errorf("west holds %d entries, want %d", n, first+more)
	}
	got := Payloads(Consume(t, Client(t, "west"), topic, "check", first+more+1, 10*time.Second))
	var want []string
	for i := range first {
		want = append(want, fmt.Sprintf("m-%d", i))
	}
	for i := range more {
		want = append(want, fmt.Sprintf("n-%d", i))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("west holds %d messages, want m-0 … m-%d, n-0 … n-%d once each, in order; got %v", len(got), first-1, more-1, got)
	}
	if v := s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`); v != first {
		t.Errorf("skipped as already copied = %v, want %d", v, first)
	}
}
