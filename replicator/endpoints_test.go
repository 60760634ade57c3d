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
