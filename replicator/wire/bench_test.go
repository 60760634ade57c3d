package wire

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// BenchmarkPatchAndFrame is the per-entry CPU of the forwarding path
// without I/O: parse the metadata, append the origin, frame with CRC-32C.
func BenchmarkPatchAndFrame(b *testing.B) {
	for _, size := range []int{1 << 10, 128 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			md := MetadataBuilder{ProducerName: "producer-1", SequenceID: 1, PublishTime: 1700000000000,
				Properties: []KeyValue{{"a", "b"}}, NumMessagesInBatch: 127, Compression: 1}.Append(nil)
			payload := bytes.Repeat([]byte("x"), size)
			cmd := AppendCommand(nil, &Send{ProducerID: 1, SequenceID: 1, NumMessages: 127})
			var patched, frame []byte
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseMetadata(md); err != nil {
					b.Fatal(err)
				}
				patched, _ = PatchMetadata(patched[:0], md, Patch{ReplicatedFrom: "east",
					Properties: []KeyValue{{"geo-sidecar.origin-id", "123:456"}}})
				frame = AppendPayloadFrame(frame[:0], cmd, patched, payload)
			}
		})
	}
}

func BenchmarkReadFrame(b *testing.B) {
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	frame := AppendPayloadFrame(nil, AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(1, 2)}), md, make([]byte, 1024))
	r := bytes.NewReader(frame)
	var buf []byte
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(frame)
		var f Frame
		var err error
		f, buf, err = ReadFrame(r, buf, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeCommand(f.Command); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProducerLoopback sends 1 KiB entries to the fake broker over
// loopback and waits for every receipt: the client side's cost per entry
// with the network in the loop.
func BenchmarkProducerLoopback(b *testing.B) {
	t := &testing.T{}
	fb := newFakeBroker(t)
	c, err := NewClient(ClientOptions{ServiceURL: fb.url()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	p, err := CreateProducer(ctx, c, ProducerOptions{Topic: "t", Name: "bench", MaxPending: 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	payload := make([]byte, 1024)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		if err := p.Send(ctx, Outgoing{Metadata: md, Payload: payload, NumMessages: 1, SequenceID: seq}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkForwardChecksums is the checksum work of forwarding one entry:
// the MESSAGE's checked on the way in (ParseFrame), then the SEND's built
// under new metadata, from the payload's CRC the check learnt (known) or
// over the payload again (unknown: an Outgoing without PayloadCRC).
func BenchmarkForwardChecksums(b *testing.B) {
	for _, size := range []int{1 << 10, 128 << 10} {
		for _, known := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/known=%v", size, known), func(b *testing.B) {
				md := MetadataBuilder{ProducerName: "producer-1", SequenceID: 1, PublishTime: 1700000000000, NumMessagesInBatch: 127}.Append(nil)
				frame := AppendPayloadFrame(nil, AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(1, 2)}), md, bytes.Repeat([]byte("x"), size))[4:]
				patched := MetadataBuilder{ProducerName: "copy", SequenceID: 1, PublishTime: 1700000000000, NumMessagesInBatch: 127, ReplicatedFrom: "east"}.Append(nil)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					f, err := ParseFrame(frame)
					if err != nil {
						b.Fatal(err)
					}
					pc := f.PayloadCRC
					pc.Known = pc.Known && known
					_ = payloadChecksumFrom(patched, f.Payload, pc)
				}
			})
		}
	}
}
