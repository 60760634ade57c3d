package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// produceUnbatched writes "<prefix>-<i>" for i in [from, to) to topic, one
// entry per message, as fast as the broker takes them.
func produceUnbatched(t *testing.T, c pulsar.Client, topic, prefix string, from, to int) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{
		Topic: topic, DisableBatching: true, MaxPendingMessages: 5000, SendTimeout: -1,
	})
	if err != nil {
		t.Fatalf("producer on %s: %v", topic, err)
	}
	defer p.Close()
	errc := make(chan error, 1)
	for i := from; i < to; i++ {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			})
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("flush %s: %v", topic, err)
	}
	select {
	case err := <-errc:
		t.Fatalf("send to %s: %v", topic, err)
	default:
	}
}

// TestRestartDeepInLedgerWithDedup is the scenario of the sequence id
// defect: a restart of the sidecar after a source ledger grew past entry
// 131,071, with deduplication on the target. Sequence ids used to pack the
// entry id into 17 bits and fall back to "previous + 1" beyond it; a new
// process started that count at 0, below what the target had recorded for
// the sidecar's producer name, and the target dropped every new message as
// a duplicate while the source was acknowledged.
func TestRestartDeepInLedgerWithDedup(t *testing.T) {
	UseClusters(t, "east", "west") // the second lane (.ci/e2e.sh): the first one kills and restarts west
	ns := NewNamespace(t, "east", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "deep")
	east, west := Client(t, "east"), Client(t, "west")

	// One ledger: Pulsar keeps a ledger open for at least 10 minutes, so
	// these entries get ids 0..134,999 in one ledger.
	const first, more = 135_000, 1_000
	produceUnbatched(t, east, topic, "m", 0, first)
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	Eventually(t, 3*time.Minute, func() error {
		if v := s.Metric("geo_sidecar_replicated_messages_total"); v < first {
			return fmt.Errorf("replicated %v of %d", v, first)
		}
		return nil
	})
	s.Stop()

	// The next entries are past id 131,071 in the same ledger.
	produceUnbatched(t, east, topic, "m", first, first+more)
	last, err := Admin(t, "east").Topics().GetLastMessageID(*mustTopicName(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	if last.EntryID < 1<<17 {
		t.Fatalf("last entry on east is %d:%d: the scenario needs entry ids past 131,071 in one ledger", last.LedgerID, last.EntryID)
	}
	s = s.Restart()
	// Not a verdict (the defect acknowledged the lost messages as
	// duplicates, so they never counted as replicated): the count on west
	// below is.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if s.Metric("geo_sidecar_replicated_messages_total") >= more {
			break
		}
	}

	// Counted by a consumer on west (the broker's msgInCounter would also
	// count what its deduplication dropped).
	// 136,000 messages to read: 2 minutes were not enough at load average
	// 50 (135,100 read while west held all 136,000: internal stats'
	// entriesAddedCounter, its deduplication cursor at the last entry).
	got := drain(t, west, topic, "check", first+more, 6*time.Minute, 2*time.Second)
	missing, dups, breaks := checkCopies(t, got, "m", first+more, true)
	t.Logf("restart deep in a ledger (last source entry %d:%d), dedup on west: %d written, %d on west, %d missing, %d duplicates, %d out of order; after the restart: %.0f replicated, %.0f skipped as already on the target, %.0f unproven duplicate receipts",
		last.LedgerID, last.EntryID, first+more, len(got), missing, dups, breaks,
		s.Metric("geo_sidecar_replicated_messages_total"),
		s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`),
		s.Metric("geo_sidecar_duplicates_unproven_total"))
}

// orderBreaks counts the messages "<prefix>-<i>" that arrived after one with
// a higher i: 0 when the copies are in the origin's order. A message
// repeated right after itself is not counted (tally counts duplicates).
func orderBreaks(got []pulsar.Message, prefix string) int {
	breaks, highest := 0, -1
	for _, m := range got {
		var i int
		if _, err := fmt.Sscanf(string(m.Payload()), prefix+"-%d", &i); err != nil {
			continue
		}
		if i < highest {
			breaks++
		}
		highest = max(highest, i)
	}
	return breaks
}
