package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The two permanent refusals that retried for ever (issue 21, item 4),
// on real clusters: a target topic terminated while the sidecar copies
// it, and a schema deleted on the source after its messages were
// written.

// stopLine is the one log line that names the partition's stop, with
// the fields an operator needs.
func stopLine(t *testing.T, path, reason string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "this partition stops here") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"reason":"`+reason+`"`) {
		t.Fatalf("stop lines %q, want one with reason %s", lines, reason)
	}
	t.Logf("stop line: %s", lines[0])
	return lines[0]
}

// TestTargetTopicTerminated: west's copy of the topic is terminated while
// the sidecar copies it. A terminated topic takes no message ever again,
// so with either on_refused the partition stops at the first message
// produced after it (skip would drop them all): one error line naming the
// pair, the partition and "target topic is terminated",
// partitions_stopped{reason="target-terminated"}, and east's cursor keeps
// every message not copied. Before, each session ended with an ordinary
// error and was retried every 10 s for ever.
func TestTargetTopicTerminated(t *testing.T) {
	UseClusters(t, "east", "west")
	for _, onRefused := range []string{"stop", "skip"} {
		t.Run("on_refused="+onRefused, func(t *testing.T) {
			ns := NewNamespace(t, "east", "west")
			topic := Topic(ns, "term")
			east := Client(t, "east")
			produceUnbatched(t, east, topic, "before", 0, 10)
			s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, "topics: [term]\n    on_refused: "+onRefused, "west"))
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
			produceUnbatched(t, east, topic, "after", 0, 10)
			Eventually(t, 60*time.Second, func() error {
				if v := s.Metric("geo_sidecar_partitions_stopped", `reason="target-terminated"`); v != 1 {
					return fmt.Errorf("partitions_stopped{reason=target-terminated} = %v", v)
				}
				return nil
			})
			line := stopLine(t, s.LogPath, "target-terminated")
			for _, want := range []string{"target topic is terminated", `"source":"east"`, `"target":"west"`, `"partition":"` + topic + `"`} {
				if !strings.Contains(line, want) {
					t.Errorf("stop line %s lacks %s", line, want)
				}
			}
			if n := countLines(t, s.LogPath, "partition session failed"); n != 0 {
				t.Errorf("%d 'partition session failed' lines, want none (not retried)", n)
			}
			if v := s.Metric("geo_sidecar_skipped_messages_total", `reason="target-terminated"`); v != 0 {
				t.Errorf("skipped_messages_total{reason=target-terminated} = %v, want nothing skipped", v)
			}
			// Nothing lost: every message produced after the termination
			// waits on east's cursor; west holds the 10 before it, once.
			if b := backlogOf(t, "east", topic, cursor); b != 10 {
				t.Errorf("east's cursor for west has a backlog of %d, want the 10 messages not copied", b)
			}
			got := Payloads(Consume(t, Client(t, "west"), topic, "check", 11, 5*time.Second))
			if len(got) != 10 || got[0] != "before-0" || got[9] != "before-9" {
				t.Errorf("west holds %v, want before-0 … before-9", got)
			}
			// A restart with the topic still terminated: the producer is
			// refused as it opens, and the partition stops again at the
			// same message.
			s.Stop()
			s = s.Restart()
			Eventually(t, 60*time.Second, func() error {
				if v := s.Metric("geo_sidecar_partitions_stopped", `reason="target-terminated"`); v != 1 {
					return fmt.Errorf("after the restart: partitions_stopped{reason=target-terminated} = %v", v)
				}
				return nil
			})
			if line := stopLine(t, s.LogPath, "target-terminated"); !strings.Contains(line, "create producer") {
				t.Errorf("stop line after the restart %s, want the producer's creation refused", line)
			}
			if b := backlogOf(t, "east", topic, cursor); b != 10 {
				t.Errorf("after the restart east's cursor for west has a backlog of %d, want 10", b)
			}
		})
	}
}

// TestSourceSchemaDeleted: an Avro topic on east whose schema is deleted
// after its messages were written and before the sidecar starts. Pulsar
// serves no version of a deleted schema (its GetSchema answers "Topic not
// found or no-schema"), so the copies could never name their schema on
// west: with on_refused: stop the partition stops at the first such
// message (one error line with its position and schema version,
// partitions_stopped{reason="source-schema-missing"}, the cursor keeping
// them); with skip they are skipped and counted and the plain messages
// after them are copied.
func TestSourceSchemaDeleted(t *testing.T) {
	UseClusters(t, "east", "west")
	for _, onRefused := range []string{"stop", "skip"} {
		t.Run("on_refused="+onRefused, func(t *testing.T) {
			ns := NewNamespace(t, "east", "west")
			topic := Topic(ns, "avro")
			east := Client(t, "east")
			// Batching on: pulsar-client-go (v0.21) writes the schema
			// version only into batches' metadata. Each synchronous Send
			// is a batch of its own.
			p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(avroV1, nil)})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Value: &orderV1{ID: int32(i), Item: fmt.Sprintf("v1-%d", i)}}); err != nil {
					t.Fatal(err)
				}
			}
			p.Close()
			short := strings.TrimPrefix(topic, "persistent://")
			if err := Admin(t, "east").Schemas().DeleteSchema(short); err != nil {
				t.Fatalf("delete the schema of %s on east: %v", topic, err)
			}
			if _, err := Admin(t, "east").Schemas().GetSchemaInfoByVersion(short, 0); err == nil {
				t.Fatalf("east still serves version 0 of the deleted schema")
			}
			// Plain messages after them (no schema now).
			produceUnbatched(t, east, topic, "plain", 0, 3)
			s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, "topics: [avro]\n    on_refused: "+onRefused, "west"))
			const cursor = "geo-sidecar.repl.west"
			if onRefused == "skip" {
				got := Payloads(Consume(t, Client(t, "west"), topic, "check", 3, 60*time.Second))
				if fmt.Sprint(got) != "[plain-0 plain-1 plain-2]" {
					t.Errorf("west holds %v, want the 3 plain messages", got)
				}
				if v := s.Metric("geo_sidecar_skipped_messages_total", `reason="source-schema-missing"`); v != 5 {
					t.Errorf("skipped_messages_total{reason=source-schema-missing} = %v, want 5", v)
				}
				if v := s.Metric("geo_sidecar_partitions_stopped"); v != 0 {
					t.Errorf("partitions_stopped = %v, want 0 with skip", v)
				}
				return
			}
			Eventually(t, 60*time.Second, func() error {
				if v := s.Metric("geo_sidecar_partitions_stopped", `reason="source-schema-missing"`); v != 1 {
					return fmt.Errorf("partitions_stopped{reason=source-schema-missing} = %v", v)
				}
				return nil
			})
			line := stopLine(t, s.LogPath, "source-schema-missing")
			for _, want := range []string{"source no longer serves", `"schema_version":"0"`, `"position":"`, `"source":"east"`, `"target":"west"`, `"partition":"` + topic + `"`} {
				if !strings.Contains(line, want) {
					t.Errorf("stop line %s lacks %s", line, want)
				}
			}
			if n := countLines(t, s.LogPath, "partition session failed"); n != 0 {
				t.Errorf("%d 'partition session failed' lines, want none (not retried)", n)
			}
			if b := backlogOf(t, "east", topic, cursor); b != 8 {
				t.Errorf("east's cursor for west has a backlog of %d, want all 8 messages", b)
			}
		})
	}
}
