package replicator

import (
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The producer settings that loss, order and the read-back depend on. No
// unit test exercises a real producer, so these are checked here: a send
// timeout, for one, would pass every fake-based test and leave gaps on a
// real remote.
func TestProducerOptions(t *testing.T) {
	e := &pulsarEndpoints{topic: "persistent://t/ns/x-partition-1", producerName: "geo-sidecar.east-->west",
		maxPending: 500, tickDelay: batchDelayFallback}
	o := e.producerOptions()
	checks := []struct {
		what string
		ok   bool
	}{
		{"no send timeout (a timed-out send leaves a gap behind later ones)", o.SendTimeout < 0},
		{"the fixed producer name (read-back, deduplication record, one writer)", o.Name == "geo-sidecar.east-->west"},
		{"the partition itself, not the partitioned topic", o.Topic == "persistent://t/ns/x-partition-1"},
		{"no compression (the read-back parses the batches)", o.CompressionType == pulsar.NoCompression},
		{"at most max_pending_messages in flight (the read-back looks that far back)", o.MaxPendingMessages == 500},
		{"batches no larger than the in-flight window", o.BatchingMaxMessages == 500},
		{"capped reconnect backoff", o.BackOffPolicyFunc != nil},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("producer options: want %s; got %+v", c.what, o)
		}
	}
}

// The entry pipe's producer: the partition, its window, and the producer
// name of the epoch of the entries it sends (see entrySeq), epoch 0's
// being the name of the versions before epochs.
func TestEntryProducerOptions(t *testing.T) {
	e := &wireEndpoints{topic: "persistent://t/ns/x-partition-1", producerName: "geo-sidecar.east-->west", maxPending: 500}
	for _, tt := range []struct {
		epoch uint64
		name  string
	}{
		{0, "geo-sidecar.east-->west"},
		{1, "geo-sidecar.east-->west.epoch1"},
		{2, "geo-sidecar.east-->west.epoch2"},
		{512, "geo-sidecar.east-->west.epoch512"},
	} {
		o := e.producerOptions(tt.epoch, nil)
		if o.Name != tt.name || o.Topic != e.topic || o.MaxPending != 500 {
			t.Errorf("epoch %d: producer %q on %q with %d pending, want %q on %q with 500", tt.epoch, o.Name, o.Topic, o.MaxPending, tt.name, e.topic)
		}
	}
}
