package batch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// smm encodes a SingleMessageMetadata as Pulsar's clients do: properties
// (field 1), partition_key (2), payload_size (3), event_time (5),
// sequence_id (8).
func smm(props [][2]string, key string, payloadSize int, seq uint64) []byte {
	var b []byte
	for _, p := range props {
		var kv []byte
		kv = protowire.AppendTag(kv, 1, protowire.BytesType)
		kv = protowire.AppendString(kv, p[0])
		kv = protowire.AppendTag(kv, 2, protowire.BytesType)
		kv = protowire.AppendString(kv, p[1])
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, kv)
	}
	if key != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, key)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(payloadSize)))
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	b = protowire.AppendVarint(b, 1700000000000)
	b = protowire.AppendTag(b, 8, protowire.VarintType)
	b = protowire.AppendVarint(b, seq)
	return b
}

// build makes an uncompressed batch of the messages.
func build(msgs ...Message) []byte {
	var b []byte
	for _, m := range msgs {
		b = Append(b, m.Metadata, m.Payload)
	}
	return b
}

func sample(n int) []Message {
	var out []Message
	for i := range n {
		p := []byte(fmt.Sprintf("message-%d", i))
		if i%3 == 1 {
			p = nil // an empty payload
		}
		if i%3 == 2 {
			p = bytes.Repeat([]byte("compressible "), 40)
		}
		var props [][2]string
		if i%2 == 0 {
			props = [][2]string{{"app", fmt.Sprint(i)}, {"geo-sidecar.replayed-late", "false"}}
		}
		out = append(out, Message{Metadata: smm(props, fmt.Sprintf("k%d", i%2), len(p), uint64(i)), Payload: p})
	}
	return out
}

func TestSplit(t *testing.T) {
	good := sample(3)
	raw := build(good...)
	noSize := append([]byte(nil), good[0].Metadata[:0]...)
	noSize = protowire.AppendTag(noSize, 5, protowire.VarintType)
	noSize = protowire.AppendVarint(noSize, 1)
	negative := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), ^uint64(0))
	wrongType := protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), "x")
	for _, tc := range []struct {
		name string
		raw  []byte
		n    int
		ok   bool
	}{
		{"three", raw, 3, true},
		{"none", nil, 0, true},
		{"fewer said", raw, 2, false},
		{"more said", raw, 4, false},
		{"negative count", raw, -1, false},
		{"truncated", raw[:len(raw)-1], 3, false},
		{"a byte more", append(slices.Clone(raw), 0), 3, false},
		{"metadata length past the end", []byte{0, 0, 1, 0, 1, 2}, 1, false},
		{"no payload_size", build(Message{Metadata: noSize}), 1, false},
		{"negative payload_size", build(Message{Metadata: negative}), 1, false},
		{"payload_size not a varint", build(Message{Metadata: wrongType}), 1, false},
		{"metadata not protobuf", build(Message{Metadata: []byte{0xff}}), 1, false},
		{"payload past the end", build(Message{Metadata: smm(nil, "", 10, 0), Payload: []byte("short")}), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Split(tc.raw, tc.n)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("err %v is not ErrMalformed", err)
			}
			if tc.ok && tc.n == 3 {
				for i := range got {
					if !bytes.Equal(got[i].Metadata, good[i].Metadata) || !bytes.Equal(got[i].Payload, good[i].Payload) {
						t.Errorf("message %d: %+v, want %+v", i, got[i], good[i])
					}
				}
			}
		})
	}
}

// TestFlag: with every codec Pulsar's clients write, every message of the
// flagged batch keeps its metadata bytes and payload and carries the
// properties last; the entry's new size is the flagged batch's.
func TestFlag(t *testing.T) {
	flags := [][2]string{{"geo-sidecar.replayed-late", "true"}, {"geo-sidecar.parked-from", "persistent://t/ns/a-partition-1"}}
	for _, codec := range []int32{None, LZ4, ZLIB, ZSTD, Snappy} {
		for _, n := range []int{1, 2, 7, 100} {
			t.Run(fmt.Sprintf("%s/%d", CodecName(codec), n), func(t *testing.T) {
				msgs := sample(n)
				raw := build(msgs...)
				payload, err := Compress(codec, raw)
				if err != nil {
					t.Fatal(err)
				}
				out, size, err := Flag(codec, payload, uint32(len(raw)), n, flags...)
				if err != nil {
					t.Fatal(err)
				}
				flagged, err := Decompress(codec, out, size)
				if err != nil {
					t.Fatalf("the flagged batch does not decompress: %v", err)
				}
				got, err := Split(flagged, n)
				if err != nil {
					t.Fatal(err)
				}
				for i, m := range got {
					if !bytes.HasPrefix(m.Metadata, msgs[i].Metadata) || !bytes.Equal(m.Payload, msgs[i].Payload) {
						t.Fatalf("message %d changed: %x %q, was %x %q", i, m.Metadata, m.Payload, msgs[i].Metadata, msgs[i].Payload)
					}
					props, err := Properties(m.Metadata)
					if err != nil {
						t.Fatal(err)
					}
					own, _ := Properties(msgs[i].Metadata)
					if want := append(own, flags...); !slices.Equal(props, want) {
						t.Errorf("message %d: properties %v, want %v", i, props, want)
					}
				}
				if codec != None && n == 100 && len(out) >= int(size) {
					t.Errorf("%s: %d bytes compressed from %d", CodecName(codec), len(out), size)
				}
			})
		}
	}
}

func TestDecompressRefuses(t *testing.T) {
	raw := build(sample(5)...)
	for _, codec := range []int32{LZ4, ZLIB, ZSTD, Snappy} {
		c, err := Compress(codec, raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			payload []byte
			size    uint32
		}{
			{"size said smaller", c, uint32(len(raw) - 1)},
			{"size said larger", c, uint32(len(raw) + 1)},
			{"truncated", c[:len(c)/2], uint32(len(raw))},
			{"garbage", bytes.Repeat([]byte{0xa5}, 64), uint32(len(raw))},
			{"beyond MaxSize", c, MaxSize + 1},
		} {
			t.Run(CodecName(codec)+"/"+tc.name, func(t *testing.T) {
				if _, err := Decompress(codec, tc.payload, tc.size); !errors.Is(err, ErrMalformed) {
					t.Errorf("err %v, want ErrMalformed", err)
				}
			})
		}
	}
	if _, err := Decompress(9, raw, uint32(len(raw))); !errors.Is(err, ErrCodec) {
		t.Errorf("codec 9: %v, want ErrCodec", err)
	}
	if _, err := Compress(9, raw); !errors.Is(err, ErrCodec) {
		t.Errorf("codec 9: %v, want ErrCodec", err)
	}
}

// FuzzFlag feeds Flag what a producer may have written: it never panics,
// and what it accepts decompresses to exactly n messages, each flagged.
func FuzzFlag(f *testing.F) {
	raw := build(sample(3)...)
	for _, codec := range []int32{None, LZ4, ZLIB, ZSTD, Snappy} {
		c, _ := Compress(codec, raw)
		f.Add(byte(codec), uint8(3), uint16(len(raw)), c)
	}
	f.Add(byte(ZSTD), uint8(1), uint16(100), []byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add(byte(LZ4), uint8(1), uint16(65535), []byte{0xf0, 0xff})
	f.Fuzz(func(t *testing.T, codec byte, n uint8, size uint16, payload []byte) {
		flag := [2]string{"geo-sidecar.replayed-late", "true"}
		out, newSize, err := Flag(int32(codec%6), payload, uint32(size), int(n), flag)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrCodec) {
				t.Fatalf("err %v: neither ErrMalformed nor ErrCodec", err)
			}
			return
		}
		flagged, err := Decompress(int32(codec%6), out, newSize)
		if err != nil {
			t.Fatalf("accepted, but the result does not decompress: %v", err)
		}
		msgs, err := Split(flagged, int(n))
		if err != nil {
			t.Fatalf("accepted, but the result does not split: %v", err)
		}
		for i, m := range msgs {
			props, err := Properties(m.Metadata)
			if err != nil || len(props) == 0 || props[len(props)-1] != flag {
				t.Fatalf("message %d: properties %v, %v", i, props, err)
			}
		}
	})
}
