package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The continuous verifier inside the sidecar (sidecar.verify, issue 24
// part 2) against real clusters, with the sidecar copying east to west:
// on a clean copy its verified-through age falls to a few seconds and it
// counts nothing; then faults the replicator itself cannot see, injected
// from outside it, each move their own counter by exactly one:
//
//   - duplicated: a copy's bytes written again to west by another wire
//     producer;
//   - divergent: a pulsar-client-go message on west carrying a copy's
//     origin properties on another payload;
//   - and GeoSidecarCopyFault (deploy/prometheus) fires on what the
//     sidecar exported (promtool over its scrapes);
//   - missing: with the sidecar stopped, one message skipped on its
//     replication cursor (pulsar-admin topics skip), so it is never
//     copied; the sidecar started again verifies from a little before
//     its last copy on west (verify.AnchorBack) and finds the hole.

// verifyFound is the sidecar's verify_found_total of kind.
func verifyFound(s *Sidecar, kind string) float64 {
	return s.Metric("geo_sidecar_verify_found_total", `kind="`+kind+`"`)
}

// verifyAge is the sidecar's verified-through age of topic (t/ns/topic),
// and whether the series is there.
func verifyAge(s *Sidecar, topicLabel string) (float64, bool) {
	return s.Samples("geo_sidecar_verify_verified_through_age_seconds", `topic="`+topicLabel+`"`)
}

// verifyFaults is the sidecar's counts by kind, for messages.
func verifyFaults(s *Sidecar) string {
	var b strings.Builder
	for _, k := range []string{"missing", "duplicated", "divergent", "out-of-order", "target-only"} {
		fmt.Fprintf(&b, "%s=%v ", k, verifyFound(s, k))
	}
	return strings.TrimSpace(b.String())
}

// startVerifying starts a sidecar copying topic short of ns from east to
// west with the continuous verifier every second, watches the duplicated
// kind's alert (one kind's series only: the rule fires per kind, and
// firing expects exactly one alert), and returns once the verifier's
// first walk of every partition is done (one round after the first age
// of topic label is exported, all had theirs).
func startVerifying(t *testing.T, ns, short, label string) (*Sidecar, *alertWatch) {
	t.Helper()
	listen := FreeAddr(t)
	cfg := Config(listen, []string{"east", "west"}, entry("east", ns, "topics: ["+short+"]", "west"))
	cfg = strings.Replace(cfg, "sidecar:\n", "sidecar:\n  verify:\n    interval: 1s\n", 1)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	side := StartSidecarFile(t, path, listen)
	alerts := watchAlerts(t, side, `geo_sidecar_verify_found_total{kind="duplicated"`)
	Eventually(t, 20*time.Second, func() error {
		if _, ok := verifyAge(side, label); !ok {
			return fmt.Errorf("no verified-through age of %s yet", label)
		}
		return nil
	})
	time.Sleep(1500 * time.Millisecond)
	return side, alerts
}

func TestVerifyContinuous(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "cv")
	part0 := topic + "-partition-0"
	label := strings.TrimPrefix(topic, "persistent://")
	CreatePartitioned(t, topic, 2, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	wwest := wireClient(t, "west")

	start := time.Now()
	side, alerts := startVerifying(t, ns, "cv", label)

	// Clean: the age falls to a few seconds once the copy is made, and
	// nothing is found.
	produceUnbatched(t, east, topic, "c", 0, 50)
	Eventually(t, 30*time.Second, func() error {
		age, ok := verifyAge(side, label)
		if read := side.Metric("geo_sidecar_verify_read_messages_total"); !ok || age > maxVerifyAge || read < 100 {
			return fmt.Errorf("age %v s (series: %v), %v messages read", age, ok, read)
		}
		return nil
	})
	if f := verifyFaults(side); f != "missing=0 duplicated=0 divergent=0 out-of-order=0 target-only=0" {
		t.Fatalf("clean copy: %s", f)
	}
	t.Logf("clean copy verified %.1f s after the sidecar started", time.Since(start).Seconds())

	// Duplicated and divergent, on the sidecar's copy.
	copies := readRaw(t, wwest, part0, 10)
	sendRaw(t, wwest, part0, "e2e-injector", copies[3])
	md, err := wire.ParseMetadata(copies[5].Metadata)
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{}
	for _, kv := range md.Properties {
		props[kv.Key] = kv.Value
	}
	if props[marker.PropOriginID] == "" {
		t.Fatalf("copy without an origin: %v", md.Properties)
	}
	ProduceWith(t, west, pulsar.ProducerOptions{Topic: part0, DisableBatching: true},
		&pulsar.ProducerMessage{Payload: []byte("not what east holds"), Properties: props})
	// More copies after the faults, so that each partition on west ends
	// with the sidecar's copies again.
	produceUnbatched(t, east, topic, "d", 0, 10)
	Eventually(t, 20*time.Second, func() error {
		if verifyFound(side, "duplicated") != 1 || verifyFound(side, "divergent") != 1 {
			return fmt.Errorf("found %s", verifyFaults(side))
		}
		return nil
	})
	foundTick := alerts.now()
	time.Sleep(3 * time.Second) // three more rounds: nothing counted twice
	if f := verifyFaults(side); f != "missing=0 duplicated=1 divergent=1 out-of-order=0 target-only=0" {
		t.Errorf("after a duplicate and a divergent copy: %s", f)
	}
	// The operations kit's rule fires on what this sidecar exported (a
	// scrape after the fault was found).
	for alerts.now() <= foundTick {
		time.Sleep(500 * time.Millisecond)
	}
	if err := alerts.firing(t, "GeoSidecarCopyFault", alerts.now(), map[string]string{"source": "east", "target": "west", "kind": "duplicated"}); err != nil {
		t.Error(err)
	}
	alerts.close()
	if age, _ := verifyAge(side, label); age > maxVerifyAge {
		t.Errorf("age %v s after the faults: verified-through should move on past them", age)
	}

	// Missing: one message skipped on the stopped sidecar's cursor.
	side.Stop()
	produceUnbatched(t, east, topic, "m", 0, 10)
	tn, err := utils.GetTopicName(part0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Admin(t, "east").Subscriptions().SkipMessages(*tn, "geo-sidecar.repl.west", 1); err != nil {
		t.Fatalf("skip a message on the replication cursor: %v", err)
	}
	side = side.Restart()
	Eventually(t, 45*time.Second, func() error {
		if verifyFound(side, "missing") != 1 {
			return fmt.Errorf("found %s", verifyFaults(side))
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	// The restarted verifier walks each partition from AnchorBack (100)
	// entries before west's end: the duplicate and the divergent copy
	// are among them and are counted again by this process, once each.
	if f := verifyFaults(side); f != "missing=1 duplicated=1 divergent=1 out-of-order=0 target-only=0" {
		t.Errorf("after a message skipped on the cursor: %s", f)
	}
	if age, _ := verifyAge(side, label); age > maxVerifyAge {
		t.Errorf("age %v s after the loss: verified-through should move on past it", age)
	}
	t.Logf("whole test %.1f s", time.Since(start).Seconds())
}

// maxVerifyAge is "a few seconds": the verified-through age of a copy
// that keeps up, at a 1 s interval on a loaded test bed.
const maxVerifyAge = 5

// TestVerifyContinuousSessionRestart (issue 34 item 1): the verifier
// keeps a partition's walk while the partition's session restarts. The
// sidecar's cursor on east is made a standby for a few rounds (a Failover
// consumer whose name sorts first takes the subscription, as another
// instance would, then leaves: the session ends and starts again, its
// cursor inactive meanwhile, as after a failed send or a cursor
// reconnect but for longer than the 0.2 to 10 s backoff needs to be
// seen); meanwhile a copy of an entry more than verify.AnchorBack entries
// back is written again to west. The walk goes on from where it stopped
// once the cursor is active again: the duplicate is counted, the age
// series stays through the restart, and GeoSidecarCopyFault fires. (A
// verifier that forgot the partition would start again 100 entries
// before west's end and take the copy for one before its range.)
func TestVerifyContinuousSessionRestart(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "cr")
	part0 := topic + "-partition-0"
	label := strings.TrimPrefix(topic, "persistent://")
	CreatePartitioned(t, topic, 1, "east", "west")
	east := Client(t, "east")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")

	start := time.Now()
	side, alerts := startVerifying(t, ns, "cr", label)

	const n = 150 // more than verify.AnchorBack
	produceUnbatched(t, east, topic, "c", 0, n)
	Eventually(t, 60*time.Second, func() error {
		age, ok := verifyAge(side, label)
		if read := side.Metric("geo_sidecar_verify_read_messages_total"); !ok || age > maxVerifyAge || read < 2*n {
			return fmt.Errorf("age %v s (series: %v), %v messages read", age, ok, read)
		}
		return nil
	})
	if f := verifyFaults(side); f != "missing=0 duplicated=0 divergent=0 out-of-order=0 target-only=0" {
		t.Fatalf("clean copy: %s", f)
	}
	copies := readRaw(t, wwest, part0, 10)

	// The sidecar's cursor made a standby: its session ends (errStandby)
	// and the next one waits inactive.
	const sub, holderName = "geo-sidecar.repl.west", "0-e2e-holder"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, err := wire.Subscribe(ctx, weast, wire.ConsumerOptions{Topic: part0, Subscription: sub, Name: holderName,
		Permits: 1, NoTopicCreation: true})
	if err != nil {
		t.Fatalf("attach %s to %s: %v", holderName, sub, err)
	}
	Eventually(t, 20*time.Second, func() error {
		if a := subStatsOf(t, "east", part0, sub).ActiveConsumerName; a != holderName {
			return fmt.Errorf("active consumer %q", a)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // three verifier rounds with the partition inactive here
	sendRaw(t, wwest, part0, "e2e-injector", copies[3])
	produceUnbatched(t, east, topic, "d", 0, 10) // copied once the sidecar is active again
	time.Sleep(2 * time.Second)
	if _, ok := verifyAge(side, label); !ok {
		t.Error("age series gone while the session restarts")
	}
	holder.Close()
	Eventually(t, 20*time.Second, func() error {
		if a := subStatsOf(t, "east", part0, sub).ActiveConsumerName; a == holderName || a == "" {
			return fmt.Errorf("active consumer %q", a)
		}
		return nil
	})

	Eventually(t, 30*time.Second, func() error {
		if verifyFound(side, "duplicated") != 1 {
			return fmt.Errorf("found %s", verifyFaults(side))
		}
		return nil
	})
	foundTick := alerts.now()
	time.Sleep(3 * time.Second) // three more rounds: nothing counted twice
	if f := verifyFaults(side); f != "missing=0 duplicated=1 divergent=0 out-of-order=0 target-only=0" {
		t.Errorf("after a duplicate written during a session restart: %s", f)
	}
	for alerts.now() <= foundTick {
		time.Sleep(500 * time.Millisecond)
	}
	if err := alerts.firing(t, "GeoSidecarCopyFault", alerts.now(), map[string]string{"source": "east", "target": "west", "kind": "duplicated"}); err != nil {
		t.Error(err)
	}
	Eventually(t, 30*time.Second, func() error {
		if age, ok := verifyAge(side, label); !ok || age > maxVerifyAge {
			return fmt.Errorf("age %v s (series: %v): verified-through should move on past the duplicate", age, ok)
		}
		return nil
	})
	t.Logf("whole test %.1f s", time.Since(start).Seconds())
}
