package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestTargetUnloadUnderLoadWithDedup is the soak's finding with seed
// 6491954228745623628 (issue 38): duplicates on a target with
// deduplication on, each at an unload of the target topic while batches
// were in flight.
//
// The broker closes a producer at an unload by sending CLOSE_PRODUCER at
// once (Producer.disconnect), while sends already handed to the managed
// ledger still complete and are answered with SEND_RECEIPT under the
// closed producer's id. The reloaded topic then rebuilds its
// deduplication record from the last snapshot (every
// brokerDeduplicationEntriesInterval entries) and the entries stored
// after it, which are keyed by the producer name in their metadata: the
// origin's, so the sidecar's record is the snapshot's, below the entries
// the old topic persisted last. A producer that dropped those late
// receipts with the closed session sent the entries again on the reloaded
// topic, above that record, and the broker stored them twice.
//
// One-way east to west, deduplication on west, a batching producer at
// about 500 msg/s on east, and the west topic unloaded every second or
// so (30 times) while the load runs. A consumer on west then counts
// each message.
func TestTargetUnloadUnderLoadWithDedup(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	// Retention, so that west keeps what it stored until the check reads
	// it: without a subscription there, each unload's new ledger let the
	// broker delete the one before (the first run found 8,967 of 12,000
	// "lost" so).
	if err := Admin(t, "west").Namespaces().SetRetention(ns, utils.NewRetentionPolicies(60, 64)); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "unloaded")
	east, west := Client(t, "east"), Client(t, "west")
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))

	const n, rate, unloads = 20_000, 500, 30
	load := startLoad(t, east, topic, "u", n, rate)
	load.waitSent(t, 300)
	// The copy is under way (the west topic exists, the sidecar's
	// producer is open) before the first unload.
	Eventually(t, time.Minute, func() error {
		if v := s.Metric("geo_sidecar_replicated_messages_total"); v < 100 {
			return fmt.Errorf("replicated %v", v)
		}
		return nil
	})
	tn := mustTopicName(t, topic)
	done := 0
	for ; done < unloads; done++ {
		if load.sent.Load() >= n-2*rate {
			break // no load left to be in flight at the next one
		}
		if err := Admin(t, "west").Topics().Unload(*tn); err != nil {
			t.Fatalf("unload %d of west's topic: %v", done+1, err)
		}
		time.Sleep(time.Second)
	}
	load.wait(t)
	if done < unloads/2 {
		t.Fatalf("only %d unloads ran while the load did (want %d)", done, unloads)
	}

	got := drain(t, west, topic, "check", n, 3*time.Minute, 3*time.Second)
	missing, dups, breaks := checkCopies(t, got, "u", n, true)
	t.Logf("target unloaded %d times under %d msg/s (batched), dedup on west: %d written, %d on west, %d missing, %d duplicates, %d out of order; %.0f unproven duplicate receipts, %.0f skipped as already on the target",
		done, rate, n, len(got), missing, dups, breaks,
		s.Metric("geo_sidecar_duplicates_unproven_total"),
		s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`))
}
