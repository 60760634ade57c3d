package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRC32CCombine: the combined CRC of two parts is the CRC of their
// concatenation, for empty parts, one byte, lengths around the powers of
// two the combination decomposes, and an entry's size.
func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 255, 256, 4095, 4096, 4097, 128 << 10, 5 << 20}
	for _, la := range []int{0, 1, 4, 37, 300} {
		for _, lb := range sizes {
			a, b := make([]byte, la), make([]byte, lb)
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			want := crc32.Checksum(append(append([]byte(nil), a...), b...), castagnoli)
			got := crc32cCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), lb)
			if got != want {
				t.Errorf("combine(%d bytes, %d bytes) = %08x, want %08x", la, lb, got, want)
			}
		}
	}
}

// TestPayloadChecksumFrom: the SEND's checksum built from the payload's
// CRC is the one computed over the whole payload section.
func TestPayloadChecksumFrom(t *testing.T) {
	md := MetadataBuilder{ProducerName: "p", SequenceID: 7, PublishTime: 3, NumMessagesInBatch: 100}.Append(nil)
	for _, n := range []int{0, 1, 1000, 128 << 10} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 31)
		}
		pc := PayloadCRC{Sum: crc32.Checksum(payload, castagnoli), Known: true}
		if got, want := payloadChecksumFrom(md, payload, pc), payloadChecksum(md, payload); got != want {
			t.Errorf("%d-byte payload: checksum from its CRC %08x, computed %08x", n, got, want)
		}
	}
}

func BenchmarkCRC32CCombine(b *testing.B) {
	for b.Loop() {
		_ = crc32cCombine(0x12345678, 0x9abcdef0, 128<<10)
	}
}

// TestFramePayloadCRC: a MESSAGE frame parsed gives its payload's own CRC,
// and a SEND of the same payload under new metadata, framed from that
// CRC, parses (its checksum verified) like one framed from the bytes.
func TestFramePayloadCRC(t *testing.T) {
	cmd := AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(3, 4)})
	for _, n := range []int{0, 5, splitCRCAbove, splitCRCAbove + 1, 64 << 10} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + 1)
		}
		md := MetadataBuilder{ProducerName: "origin", SequenceID: 1, PublishTime: 2}.Append(nil)
		f, err := ParseFrame(AppendPayloadFrame(nil, cmd, md, payload)[4:])
		if err != nil {
			t.Fatal(err)
		}
		want := PayloadCRC{Sum: crc32.Checksum(payload, castagnoli), Known: true}
		if n <= splitCRCAbove {
			want = PayloadCRC{} // small: checked in one pass, not learnt
		}
		if !f.Checksummed || f.PayloadCRC != want {
			t.Fatalf("%d-byte payload: checksummed %v, payload CRC %+v, want %+v", n, f.Checksummed, f.PayloadCRC, want)
		}
		patched := MetadataBuilder{ProducerName: "copy", SequenceID: 9, PublishTime: 2, ReplicatedFrom: "east"}.Append(nil)
		send := AppendCommand(nil, &Send{ProducerID: 1, SequenceID: 9, NumMessages: 1})
		frame := appendPayloadHead(nil, send, patched, len(f.Payload), payloadChecksumFrom(patched, f.Payload, f.PayloadCRC))
		frame = append(frame, f.Payload...)
		g, err := ParseFrame(frame[4:])
		if err != nil {
			t.Fatalf("%d-byte payload: the SEND framed from the payload's CRC: %v", n, err)
		}
		if string(g.Payload) != string(payload) || string(g.Metadata) != string(patched) {
			t.Fatalf("%d-byte payload: the SEND's sections differ", n)
		}
	}
}
