package verify

import (
	"fmt"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// BenchmarkJudgeEntry is the verifier's work on one entry of 128
// messages of 1 KiB (a full batch) and its copy, reads aside: what the
// source and target sides compute and the comparison, with and without
// marker keys, hashing both sides (the command's way) or holding the
// source's content (the continuous verifier's, released every 16
// entries). ns/op over 128 is the cost per message copied.
func BenchmarkJudgeEntry(b *testing.B) {
	mb := wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 1_700_000_000_000, NumMessagesInBatch: 128}
	payload := make([]byte, 128*(1024+20))
	const n = 256
	srcs, cps := make([]wire.Entry, n), make([]wire.Entry, n)
	for i := range n {
		srcs[i] = wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: uint64(i)}, Metadata: mb.Append(nil), Payload: payload, NumMessages: 128}
		cps[i] = forward(b, srcs[i], testKeys, part, nil)
	}
	for _, c := range []struct {
		keys marker.Keys
		hold bool
	}{{marker.Keys{}, false}, {testKeys, false}, {marker.Keys{}, true}, {testKeys, true}} {
		keys := c.keys
		b.Run(fmt.Sprintf("keys=%v/held=%v", !keys.IsZero(), c.hold), func(b *testing.B) {
			b.SetBytes(int64(2 * len(payload)))
			var cmp *Partition
			for i := range b.N {
				if i%n == 0 {
					b.StopTimer()
					cmp = New(Config{Window: ContinuousWindow, Deferred: ContinuousWindow, Authenticated: !keys.IsZero(), MaxFindings: 10, Continuous: true, KeptBytes: ContinuousKept})
					b.StartTimer()
				}
				cmp.AddSource(sourceOf(srcs[i%n], "west", c.hold))
				cmp.AddTarget(targetOf(cps[i%n], keys, part, "east", "west", c.hold))
				if i%16 == 15 {
					cmp.Release() // a walk's end, every 16 entries
				}
			}
			if r := cmp.Snapshot(); r.Faults() != 0 || r.TargetOnly != 0 {
				b.Fatalf("faults: %+v", r)
			}
		})
	}
}
