package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestReadBackPastTargetTrafficAfterReload is the soak's finding with
// seed 1382347120672031276 (issue 38): 30 duplicates on west with
// deduplication on. East's broker was killed (-9) after west had
// confirmed copies of 268:2317..268:2378 whose acknowledgements east had
// not persisted; west had unloaded the topic since (its record for the
// sidecar's producer name fell back to its last snapshot, 268:1912,
// below those copies: the copies keep the origin's producer name, so the
// reload does not rebuild it), and west's own producer wrote 1,341
// entries after them before the sidecar's next session read back. The
// read-back stopped at its window (max_pending_messages + 100 = 1,100
// entries, all of them west's), found no copy, and the session sent the
// 30 messages again under their own sequence ids, above the stale
// record: stored twice, no warning.
//
// Here: east's cursor for west is rewound by 100 copied messages with
// the sidecar stopped (the lost acknowledgements), west's topic is
// unloaded (or not: the record then covers the copies, and says how far
// back they may be, 100 entries past the start, which the usual window
// of 1,100 took for enough; the session sent them again under counted
// ids, with its Warn line), and west's own producer writes 1,500
// entries; then the sidecar starts again, and 50 new messages follow.
// Each of east's 350 messages must be on west once: the read-back reads
// on past west's entries until it reaches a copy from before the
// cursor's start.
func TestReadBackPastTargetTrafficAfterReload(t *testing.T) {
	UseClusters(t, "east", "west")
	for _, reload := range []bool{true, false} {
		t.Run(fmt.Sprintf("reload=%v", reload), func(t *testing.T) { readBackPastTargetTraffic(t, reload) })
	}
}

func readBackPastTargetTraffic(t *testing.T, reload bool) {
	ns := NewNamespace(t, "east", "west")
	if err := Admin(t, "west").Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	if err := Admin(t, "west").Namespaces().SetRetention(ns, utils.NewRetentionPolicies(60, 64)); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "reach")
	tn := mustTopicName(t, topic)
	east, west := Client(t, "east"), Client(t, "west")
	const cursor = "geo-sidecar.repl.west"
	const acked, rewound, later, others = 200, 100, 50, 1500

	produceUnbatched(t, east, topic, "m", 0, acked)
	time.Sleep(1100 * time.Millisecond)
	mid := time.Now()
	time.Sleep(1100 * time.Millisecond)
	produceUnbatched(t, east, topic, "m", acked, acked+rewound)

	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	Eventually(t, 90*time.Second, func() error {
		if b := backlogOf(t, "east", topic, cursor); b != 0 {
			return fmt.Errorf("east's cursor for west has a backlog of %d", b)
		}
		return nil
	})
	if n := entriesOn(t, "west", topic); n != acked+rewound {
		t.Fatalf("west holds %d entries after the first copy, want %d", n, acked+rewound)
	}
	s.Stop()

	if reload {
		// West reloads the topic: its record for the sidecar's producer
		// name is the last snapshot's (none yet: gone), below the copies.
		if err := Admin(t, "west").Topics().Unload(*tn); err != nil {
			t.Fatalf("unload west's topic: %v", err)
		}
	}
	// West's own traffic after the copies, more than the usual window.
	produceUnbatched(t, west, topic, "w", 0, others)
	// East's acknowledgements of the last 100 copies are lost.
	if err := Admin(t, "east").Subscriptions().ResetCursorToTimestamp(*tn, cursor, mid.UnixMilli()); err != nil {
		t.Fatalf("rewind east's cursor for west: %v", err)
	}
	if b := backlogOf(t, "east", topic, cursor); b != rewound {
		t.Fatalf("east's cursor for west has a backlog of %d after the rewind, want %d", b, rewound)
	}
	produceUnbatched(t, east, topic, "m", acked+rewound, acked+rewound+later)

	s = s.Restart()
	const n = acked + rewound + later
	Eventually(t, 90*time.Second, func() error {
		if b := backlogOf(t, "east", topic, cursor); b != 0 {
			return fmt.Errorf("east's cursor for west has a backlog of %d", b)
		}
		return nil
	})
	got := drain(t, west, topic, "check", n+others, 60*time.Second, 3*time.Second)
	missing, dups, breaks := checkCopies(t, got, "m", n, true)
	skipped := s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`)
	t.Logf("%d copied, %d unacknowledged of them, west reloaded %v, then %d entries of west's own: %d of east's on west, %d missing, %d duplicates, %d out of order; %.0f skipped as already on west; west holds %d entries; %d counted sequence ids",
		acked+rewound, rewound, reload, others, len(got)-others, missing, dups, breaks, skipped, entriesOn(t, "west", topic),
		countLines(t, s.LogPath, "entry sent under a counted sequence id"))
	if skipped != rewound {
		t.Errorf("%.0f entries skipped as already on west, want the %d rewound", skipped, rewound)
	}
}
