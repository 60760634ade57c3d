package entrypath

import (
	"bytes"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// benchEntries are the entries the origin benchmarks forward: one 1 KiB
// message, and a batch of 127 such messages (LZ4-flagged: the payload is
// not looked into either way).
var benchEntries = []struct {
	name string
	e    wire.Entry
}{
	{"1KiB", wire.Entry{ID: wire.EntryID(123, 456), NumMessages: 1, Payload: bytes.Repeat([]byte("x"), 1<<10),
		Metadata: wire.MetadataBuilder{ProducerName: "producer-1", SequenceID: 1, PublishTime: 1700000000000,
			Properties: []wire.KeyValue{{Key: "a", Value: "b"}}}.Append(nil)}},
	{"batch127x1KiB", wire.Entry{ID: wire.EntryID(123, 456), NumMessages: 127, Payload: bytes.Repeat([]byte("x"), 127<<10),
		Metadata: wire.MetadataBuilder{ProducerName: "producer-1", SequenceID: 1, PublishTime: 1700000000000,
			Properties: []wire.KeyValue{{Key: "a", Value: "b"}}, NumMessagesInBatch: 127, Compression: 1}.Append(nil)}},
}

// BenchmarkEntryPatch is the entry pipe's per-entry CPU for the origin on
// the sending side: parse the metadata, sign the origin, patch.
func BenchmarkEntryPatch(b *testing.B) {
	for _, tc := range benchEntries {
		b.Run(tc.name, func(b *testing.B) {
			p := benchPartition()
			b.SetBytes(int64(len(tc.e.Payload)))
			b.ReportAllocs()
			for b.Loop() {
				md, err := wire.ParseMetadata(tc.e.Metadata)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.forwardMetadata(tc.e, md.HasTxnID, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEntryReadBack is the read-back's per-entry CPU: what a copy
// proves (copyOf, then the signature check).
func BenchmarkEntryReadBack(b *testing.B) {
	for _, tc := range benchEntries {
		b.Run(tc.name, func(b *testing.B) {
			p := benchPartition()
			patched, err := p.forwardMetadata(tc.e, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			copied := wire.Entry{ID: wire.EntryID(9, 9), Metadata: patched, Payload: tc.e.Payload, NumMessages: tc.e.NumMessages}
			ours := benchProof(p)
			b.SetBytes(int64(len(tc.e.Payload)))
			b.ReportAllocs()
			for b.Loop() {
				if !ours(readBackCopy(copied)) {
					b.Fatal("a genuine copy is not recognised")
				}
			}
		})
	}
}

func benchPartition() *Partition {
	return &Partition{local: "east", remote: "west", topic: "persistent://t/ns/x-partition-0", keys: marker.NewKeys([]byte("0123456789abcdef"))}
}

func benchProof(p *Partition) func(entryCopy) bool {
	return bySignature(p.keys, p.topic, p.remote)
}
