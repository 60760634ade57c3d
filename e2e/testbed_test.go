package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestTestBedProduceConsume proves each cluster is a working Pulsar: 1,000
// messages in, the same 1,000 out, in order.
func TestTestBedProduceConsume(t *testing.T) {
	for _, name := range []string{"east", "west"} {
		t.Run(name, func(t *testing.T) {
			ns := NewNamespace(t, name)
			topic := Topic(ns, "bed")
			c := Client(t, name)
			want := ProduceN(t, c, topic, name, 1000)
			got := Payloads(Consume(t, c, topic, "bed-check", 1000, 60*time.Second))
			if !slices.Equal(got, want) {
				t.Fatalf("%s: consumed %d messages, want %d in order", name, len(got), len(want))
			}
		})
	}
}

// TestBuiltinGeoReplication proves the test bed can wire Pulsar's own
// geo-replication (the benchmark's peer): messages produced on east arrive
// on west.
func TestBuiltinGeoReplication(t *testing.T) {
	ns := fmt.Sprintf("builtin%d/ns", time.Now().UnixNano())
	if err := Script("geo", "east", "west", ns); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "geo")
	west := Client(t, "west")
	// Subscribe on west first so the topic and subscription exist before
	// replication delivers.
	_ = Consume(t, west, topic, "geo-check", 0, time.Second)
	want := ProduceN(t, Client(t, "east"), topic, "geo", 200)
	var got []string
	Eventually(t, 60*time.Second, func() error {
		got = append(got, Payloads(Consume(t, west, topic, "geo-check", len(want)-len(got), 2*time.Second))...)
		if len(got) < len(want) {
			return fmt.Errorf("west has %d of %d replicated messages", len(got), len(want))
		}
		return nil
	})
	if !slices.Equal(got, want) {
		t.Fatalf("west received %d messages not equal to the %d sent", len(got), len(want))
	}
}
