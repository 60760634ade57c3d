package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// TestTransplantedOriginIsNoProof is issue 20 item 2: east copies to west
// and to north. While east->west is stopped, north receives copies of 100
// new east messages; they are not batched, so their origin properties,
// signature included, are message properties anyone who reads north
// sees. An attacker who can read north and produce to west republishes
// them on west with other payloads. When east->west resumes, its
// read-back must not take those entries for its copies: all 100 real
// messages reach west. (With a signature over partition, origin and
// position alone, 100 of 100 were skipped as already copied.) Then a
// plain restart with east's cursor rewound over the 100 shows the genuine
// copies are still recognised: none arrives twice.
func TestTransplantedOriginIsNoProof(t *testing.T) {
	if err := Up("north"); err != nil {
		t.Fatal(err)
	}
	ns := NewNamespace(t, "east", "west", "north")
	topic := Topic(ns, "transplant")
	east, west, north := Client(t, "east"), Client(t, "west"), Client(t, "north")
	toWest := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	StartSidecar(t, []string{"east", "north"}, entry("east", ns, all, "north"))

	// Both links work, and the check subscription on west sees everything.
	const warm, n = 10, 100
	produceUnbatched(t, east, topic, "warm", 0, warm)
	onWest := newCollector(t, west, topic, "check")
	onNorth := newCollector(t, north, topic, "attacker")
	onWest.await(t, "warm", warm, 60*time.Second)
	onNorth.await(t, "warm", warm, 60*time.Second)

	toWest.Stop()
	before := time.Now() // a cursor reset to here redelivers the real messages
	time.Sleep(1100 * time.Millisecond)
	produceUnbatched(t, east, topic, "real", 0, n)
	copies := onNorth.await(t, "real", n, 60*time.Second)

	// The attacker: north's copies' properties, other payloads, on west.
	var forged []*pulsar.ProducerMessage
	for _, m := range copies {
		props := m.Properties()
		if props[marker.PropOriginSig] == "" || props[marker.PropOriginID] == "" {
			t.Fatalf("north's copy %q shows no signed origin in its properties: %v", m.Payload(), props)
		}
		forged = append(forged, &pulsar.ProducerMessage{
			Payload:    []byte(strings.Replace(string(m.Payload()), "real", "forged", 1)),
			Properties: props,
		})
	}
	ProduceWith(t, west, pulsar.ProducerOptions{Topic: topic, DisableBatching: true}, forged...)
	onWest.await(t, "forged", n, 30*time.Second)

	toWest = toWest.Restart()
	got := onWest.wait("real", n, 90*time.Second)
	missing, dups := tally(got, "real", n)
	t.Logf("after the transplant: %d of %d real messages on west (%d lost, %d duplicates); %.0f skipped as already copied",
		n-missing, n, missing, dups, toWest.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`))
	if missing > 0 || dups > 0 {
		t.Fatalf("%d of %d real messages lost on west, %d duplicated: the transplanted origins were taken as proof", missing, n, dups)
	}

	// Genuine copies are still proof: rewind east's cursor over the 100
	// (they are on west, in the read-back's reach) and restart.
	toWest.Stop()
	tn := mustTopicName(t, topic)
	if err := Admin(t, "east").Subscriptions().ResetCursorToTimestamp(*tn, "geo-sidecar.repl.west", before.UnixMilli()); err != nil {
		t.Fatalf("rewind east's cursor for west: %v", err)
	}
	toWest = toWest.Restart()
	Eventually(t, 60*time.Second, func() error {
		if b := backlogOf(t, "east", topic, "geo-sidecar.repl.west"); b != 0 {
			return fmt.Errorf("east's cursor for west has a backlog of %d", b)
		}
		return nil
	})
	skipped := toWest.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`)
	again := onWest.wait("real", 2*n, 5*time.Second) // whatever comes: nothing should
	_, dups = tally(again, "real", n)
	t.Logf("after a rewound restart: %.0f skipped as already copied, %d duplicates on west", skipped, dups)
	if dups > 0 {
		t.Errorf("%d real messages arrived on west twice: genuine copies were not recognised", dups)
	}
	if skipped < n {
		t.Errorf("%.0f entries skipped as already copied, want the %d genuine copies", skipped, n)
	}
}

// collector accumulates what a subscription receives (markers left out).
type collector struct {
	c     pulsar.Client
	topic string
	sub   string
	got   []pulsar.Message
	t     *testing.T
}

func newCollector(t *testing.T, c pulsar.Client, topic, sub string) *collector {
	col := &collector{c: c, topic: topic, sub: sub, t: t}
	_ = Consume(t, c, topic, sub, 0, time.Second) // create the subscription at the earliest message
	return col
}

// wait receives until n messages with payloads starting with prefix+"-"
// were collected or timeout passed, and returns those.
func (c *collector) wait(prefix string, n int, timeout time.Duration) []pulsar.Message {
	deadline := time.Now().Add(timeout)
	for {
		c.got = append(c.got, Consume(c.t, c.c, c.topic, c.sub, 1<<20, 2*time.Second)...)
		var out []pulsar.Message
		for _, m := range c.got {
			if strings.HasPrefix(string(m.Payload()), prefix+"-") {
				out = append(out, m)
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
	}
}

// await is wait that fails the test with fewer than n.
func (c *collector) await(t *testing.T, prefix string, n int, timeout time.Duration) []pulsar.Message {
	t.Helper()
	got := c.wait(prefix, n, timeout)
	if len(got) < n {
		t.Fatalf("%s on %s: %d of %d %q messages", c.sub, c.topic, len(got), n, prefix)
	}
	return got
}
