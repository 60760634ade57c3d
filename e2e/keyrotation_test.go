package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMarkerKeyRotation follows the three rotation steps of
// docs/guarantees.md on real clusters (east->west, deduplication off on
// west, so a copy not recognised shows up as a duplicate) and checks what
// each step promises of the copies' signed origins:
//
//   - old key signing: 100 "old" messages are copied;
//   - step 2, the new key signs and the old one is accepted: with east's
//     cursor rewound over the old copies, the restarted sidecar recognises
//     all of them (none arrives twice), and copies 100 "new" messages;
//   - step 3, the old key dropped: rewound again, the new copies are
//     recognised and the old ones, whose signature nothing accepts any
//     more, are sent once more, as docs/guarantees.md says.
//
// Without the accepted key in step 2 the old copies would be sent again
// there too; the third step shows that it is the accepted key, not some
// other check, that made them count.
func TestMarkerKeyRotation(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "rotate")
	east, west := Client(t, "east"), Client(t, "west")
	dir := t.TempDir()
	oldKey, newKey := filepath.Join(dir, "old.key"), filepath.Join(dir, "new.key")
	for f, k := range map[string]string{oldKey: "rotation-old-key-0123456789abcdef", newKey: "rotation-new-key-fedcba9876543210"} {
		if err := os.WriteFile(f, []byte(k+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// start runs east->west with signs as the marker key and, if set,
	// accepts as the accepted key.
	start := func(signs, accepts string) *Sidecar {
		t.Helper()
		listen := FreeAddr(t)
		cfg := ConfigFor(listen, []Cluster{Get("east"), Get("west")}, entry("east", ns, all, "west"))
		keys := "  marker_key_file: " + signs + "\n"
		if accepts != "" {
			keys += "  marker_key_accepted_file: " + accepts + "\n"
		}
		cfg = strings.Replace(cfg, "  marker_key_file: "+MarkerKeyFile+"\n", keys, 1)
		f := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return StartSidecarFile(t, f, listen)
	}
	const n = 100
	const cursor = "geo-sidecar.repl.west"
	onWest := newCollector(t, west, topic, "check")
	// rewind moves east's cursor for west back before the first message
	// and restarts the sidecar with the given keys, waiting until the
	// cursor has passed everything again.
	before := time.Now()
	time.Sleep(1100 * time.Millisecond)
	tn := mustTopicName(t, topic)
	rewind := func(s *Sidecar, signs, accepts string) *Sidecar {
		t.Helper()
		s.Stop()
		if err := Admin(t, "east").Subscriptions().ResetCursorToTimestamp(*tn, cursor, before.UnixMilli()); err != nil {
			t.Fatalf("rewind east's cursor for west: %v", err)
		}
		s = start(signs, accepts)
		Eventually(t, 60*time.Second, func() error {
			if b := backlogOf(t, "east", topic, cursor); b != 0 {
				return fmt.Errorf("east's cursor for west has a backlog of %d", b)
			}
			return nil
		})
		return s
	}

	s := start(oldKey, "")
	produceUnbatched(t, east, topic, "old", 0, n)
	onWest.await(t, "old", n, 60*time.Second)

	// Step 2: the new key signs, the old one is accepted.
	s = rewind(s, newKey, oldKey)
	produceUnbatched(t, east, topic, "new", 0, n)
	onWest.await(t, "new", n, 60*time.Second)
	got := onWest.wait("old", 2*n, 5*time.Second) // whatever comes: nothing should
	missing, dups := tally(got, "old", n)
	skipped := s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`)
	t.Logf("step 2 (new key signs, old accepted), rewound: %.0f skipped as already copied, old copies: %d missing, %d duplicates", skipped, missing, dups)
	if missing > 0 || dups > 0 {
		t.Fatalf("copies signed with the accepted old key: %d missing, %d sent twice; want none", missing, dups)
	}
	if skipped < n {
		t.Errorf("%.0f entries skipped as already copied, want the %d copies signed with the old key", skipped, n)
	}

	// Step 3: the old key dropped.
	s = rewind(s, newKey, "")
	newGot := onWest.wait("new", 2*n, 5*time.Second)
	oldGot := onWest.wait("old", 2*n, 10*time.Second)
	_, newDups := tally(newGot, "new", n)
	_, oldDups := tally(oldGot, "old", n)
	skipped = s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`)
	t.Logf("step 3 (old key dropped), rewound: %.0f skipped as already copied; new copies %d duplicates, old copies %d duplicates", skipped, newDups, oldDups)
	if newDups > 0 {
		t.Errorf("%d copies signed with the new key were sent twice: the marker key's own copies were not recognised", newDups)
	}
	if oldDups != n {
		t.Errorf("%d of the %d copies signed with the dropped key were sent again, want all: a signature under no configured key must prove nothing", oldDups, n)
	}
}
