// Package batch reads and rewrites the payload of a batched Pulsar entry.
//
// It exists for geo-sidecar failback's late copies: a copy of an entry
// stranded on the cluster that came back is flagged with a property
// (marker.PropReplayedLate) so that applications can tell it, and a
// consumer sees the properties of a batched entry per message, each
// message's own SingleMessageMetadata inside the (compressed) payload,
// not the entry's MessageMetadata. So the flag must go into every
// message of the batch: the payload is decompressed with the entry's
// codec, a property appended to each message's metadata, and the result
// compressed again with the same codec. Everything else of each message
// is kept byte for byte (the property is appended after the fields it
// has; protobuf readers merge repeated fields, so its other properties
// stay and come first).
//
// The entry pipe never rewrites payloads (it forwards bytes); this
// package is the failback's only, and a decoder of outside input (what
// producers wrote): it is fuzzed, and malformed input gives ErrMalformed,
// never a panic or an allocation beyond MaxSize.
//
// A batch's payload, uncompressed, is its messages one after the other,
// each a 4-byte big-endian length, that many bytes of
// SingleMessageMetadata, and its payload_size (field 3) bytes of payload.
package batch

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed is wrapped by every error about the bytes given (a
// payload that does not decompress, or is not a batch of the size said).
var ErrMalformed = errors.New("batch: malformed")

// ErrCodec: the entry's compression is one this package does not know.
var ErrCodec = errors.New("batch: unknown compression")

// MaxSize bounds an uncompressed batch: Pulsar's default maximum message
// size is 5 MiB; a broker may be configured higher, not this high.
const MaxSize = 128 << 20

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// SingleMessageMetadata fields read.
const (
	fieldProperties  = 1
	fieldPayloadSize = 3
)

// Message is one message of a batch: its SingleMessageMetadata bytes and
// its payload, both aliasing the batch given to Split.
type Message struct {
	Metadata []byte
	Payload  []byte
}

// Split returns the n messages of raw, an uncompressed batch. It is an
// error when raw does not hold exactly n well-formed messages.
func Split(raw []byte, n int) ([]Message, error) {
	if n < 0 || n > len(raw)/4 {
		return nil, malformed("%d messages in %d bytes", n, len(raw))
	}
	out := make([]Message, 0, n)
	for i := 0; i < n; i++ {
		if len(raw) < 4 {
			return nil, malformed("message %d of %d: %d bytes left for its metadata's length", i, n, len(raw))
		}
		size := binary.BigEndian.Uint32(raw)
		raw = raw[4:]
		if uint64(size) > uint64(len(raw)) {
			return nil, malformed("message %d of %d: metadata of %d bytes, %d left", i, n, size, len(raw))
		}
		md := raw[:size]
		raw = raw[size:]
		ps, err := payloadSize(md)
		if err == nil {
			_, err = Properties(md) // well-formed, as the clients' parsers want them
		}
		if err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i, n, err)
		}
		if uint64(ps) > uint64(len(raw)) {
			return nil, malformed("message %d of %d: payload of %d bytes, %d left", i, n, ps, len(raw))
		}
		out = append(out, Message{Metadata: md, Payload: raw[:ps]})
		raw = raw[ps:]
	}
	if len(raw) > 0 {
		return nil, malformed("%d bytes after the %d messages", len(raw), n)
	}
	return out, nil
}

// Append appends to the uncompressed batch dst one message: its
// SingleMessageMetadata md (whose payload_size must be len(payload)) and
// payload.
func Append(dst, md, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(md)))
	return append(append(dst, md...), payload...)
}

// payloadSize reads payload_size from SingleMessageMetadata md, checking
// that md is well-formed protobuf at the top level (the last value wins,
// as protobuf merges a scalar field).
func payloadSize(md []byte) (uint32, error) {
	var (
		size uint64
		seen bool
	)
	for at := 0; at < len(md); {
		num, typ, n := protowire.ConsumeField(md[at:])
		if n < 0 {
			return 0, malformed("SingleMessageMetadata: %v", protowire.ParseError(n))
		}
		if num == fieldPayloadSize {
			if typ != protowire.VarintType {
				return 0, malformed("SingleMessageMetadata: payload_size: wire type %d", typ)
			}
			_, _, tn := protowire.ConsumeTag(md[at:])
			v, _ := protowire.ConsumeVarint(md[at+tn:])
			size, seen = v, true
		}
		at += n
	}
	// int32 on the wire: a negative value is encoded as 10 bytes.
	if !seen || size > MaxSize {
		if !seen {
			return 0, malformed("SingleMessageMetadata: no payload_size")
		}
		return 0, malformed("SingleMessageMetadata: payload_size %d", int64(size))
	}
	return uint32(size), nil
}

// AppendProperties appends to dst the batch raw (n messages,
// uncompressed) with the properties kvs ({key, value} pairs) appended to
// every message's metadata, and returns it. They come after each
// message's own: a reader that keeps the last value of a key (Pulsar's
// clients do) sees theirs.
func AppendProperties(dst, raw []byte, n int, kvs ...[2]string) ([]byte, error) {
	msgs, err := Split(raw, n)
	if err != nil {
		return dst, err
	}
	var props []byte
	for _, p := range kvs {
		var kv []byte
		kv = protowire.AppendTag(kv, 1, protowire.BytesType)
		kv = protowire.AppendString(kv, p[0])
		kv = protowire.AppendTag(kv, 2, protowire.BytesType)
		kv = protowire.AppendString(kv, p[1])
		props = protowire.AppendTag(props, fieldProperties, protowire.BytesType)
		props = protowire.AppendBytes(props, kv)
	}
	if len(raw)+n*len(props) > MaxSize {
		return dst, malformed("%d bytes with the properties: more than %d", len(raw)+n*len(props), MaxSize)
	}
	for _, m := range msgs {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Metadata)+len(props)))
		dst = append(dst, m.Metadata...)
		dst = append(dst, props...)
		dst = append(dst, m.Payload...)
	}
	return dst, nil
}

// Flag returns the payload of a batched entry (n messages, compressed
// with codec, size bytes uncompressed: its MessageMetadata's
// num_messages_in_batch, compression and uncompressed_size) with the
// properties kvs appended to every message's metadata, compressed again
// with codec, and its new uncompressed size. An encrypted payload cannot
// be flagged: the caller must not pass one (it does not decompress).
func Flag(codec int32, payload []byte, size uint32, n int, kvs ...[2]string) ([]byte, uint32, error) {
	raw, err := Decompress(codec, payload, size)
	if err != nil {
		return nil, 0, err
	}
	flagged, err := AppendProperties(make([]byte, 0, len(raw)+n*64), raw, n, kvs...)
	if err != nil {
		return nil, 0, err
	}
	out, err := Compress(codec, flagged)
	if err != nil {
		return nil, 0, err
	}
	return out, uint32(len(flagged)), nil
}

// Properties returns the properties of SingleMessageMetadata md, in
// order, repeated keys included.
func Properties(md []byte) ([][2]string, error) {
	var out [][2]string
	for at := 0; at < len(md); {
		num, typ, n := protowire.ConsumeField(md[at:])
		if n < 0 {
			return nil, malformed("SingleMessageMetadata: %v", protowire.ParseError(n))
		}
		if num == fieldProperties {
			if typ != protowire.BytesType {
				return nil, malformed("SingleMessageMetadata: properties: wire type %d", typ)
			}
			_, _, tn := protowire.ConsumeTag(md[at:])
			b, _ := protowire.ConsumeBytes(md[at+tn : at+n])
			var kv [2]string
			for kat := 0; kat < len(b); {
				knum, ktyp, kn := protowire.ConsumeField(b[kat:])
				if kn < 0 {
					return nil, malformed("KeyValue: %v", protowire.ParseError(kn))
				}
				if (knum == 1 || knum == 2) && ktyp == protowire.BytesType {
					_, _, ktn := protowire.ConsumeTag(b[kat:])
					s, _ := protowire.ConsumeBytes(b[kat+ktn : kat+kn])
					kv[knum-1] = string(s)
				}
				kat += kn
			}
			out = append(out, kv)
		}
		at += n
	}
	return out, nil
}
