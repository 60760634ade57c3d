package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTargetTopicTerminatedIdle: west's copy of the topic is terminated
// while the sidecar has nothing to send (issue 34, also). The broker
// closes the sidecar's producer and refuses it back for good; west still
// answers a lookup. Before, the partition watched its dead producer in
// silence (still counted connected) until the next message; earlier
// still it logged that it "stepped down" because the remote was
// unreachable. Now, once the step-down bound passes (twice keep_alive:
// 60 s), the session ends with one line naming the terminated topic, no
// step-down, and the next message stops the partition as in
// TestTargetTopicTerminated.
func TestTargetTopicTerminatedIdle(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "termidle")
	east := Client(t, "east")
	produceUnbatched(t, east, topic, "before", 0, 10)
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, "topics: [termidle]", "west"))
	const cursor = "geo-sidecar.repl.west"
	Eventually(t, 60*time.Second, func() error {
		if b := backlogOf(t, "east", topic, cursor); b != 0 {
			return fmt.Errorf("east's cursor for west has a backlog of %d", b)
		}
		return nil
	})
	if _, err := Admin(t, "west").Topics().Terminate(*mustTopicName(t, topic)); err != nil {
		t.Fatalf("terminate %s on west: %v", topic, err)
	}
	terminated := time.Now()
	Eventually(t, 120*time.Second, func() error {
		if n := countLines(t, s.LogPath, "partition session failed", "the producer on the remote gave up", "TopicTerminatedError"); n != 1 {
			return fmt.Errorf("%d lines saying the session ended on the terminated topic", n)
		}
		return nil
	})
	t.Logf("the session ended %.1f s after the termination", time.Since(terminated).Seconds())
	if n := countLines(t, s.LogPath, "stepped down"); n != 0 {
		t.Errorf("%d 'stepped down' lines, want none (west answers)", n)
	}
	if v := s.Metric("geo_sidecar_connected_partitions"); v != 0 {
		t.Errorf("connected_partitions = %v with the producer given up, want 0", v)
	}
	produceUnbatched(t, east, topic, "after", 0, 1)
	Eventually(t, 60*time.Second, func() error {
		if v := s.Metric("geo_sidecar_partitions_stopped", `reason="target-terminated"`); v != 1 {
			return fmt.Errorf("partitions_stopped{reason=target-terminated} = %v", v)
		}
		return nil
	})
	if line := stopLine(t, s.LogPath, "target-terminated"); !strings.Contains(line, "target topic is terminated") {
		t.Errorf("stop line %s does not name the terminated topic", line)
	}
	if b := backlogOf(t, "east", topic, cursor); b != 1 {
		t.Errorf("east's cursor for west has a backlog of %d, want the 1 message not copied", b)
	}
}
