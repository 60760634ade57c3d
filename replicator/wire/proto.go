package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file holds the protobuf plumbing shared by the commands
// (command.go, command_gen.go) and metadata.go: a field iterator that
// validates wire types, and append helpers. Decoders keep the first error
// and never panic on any input.

// field is one decoded protobuf field. For varint and fixed fields v holds
// the value; for length-delimited fields b aliases the input.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// forEachField calls fn for every field of the message b, in order, and
// returns a bitmask of the field numbers below 64 it saw. Groups are
// skipped. Any framing error is ErrMalformed.
func forEachField(b []byte, fn func(f field) error) (uint64, error) {
	var seen uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return seen, malformed("field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return seen, malformed("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		if num < 64 {
			seen |= 1 << uint(num)
		}
		if typ == protowire.StartGroupType {
			continue
		}
		if err := fn(f); err != nil {
			return seen, err
		}
	}
	return seen, nil
}

// need returns ErrMalformed naming the first required field missing from
// seen.
func need(msg string, seen uint64, nums ...protowire.Number) error {
	for _, n := range nums {
		if seen&(1<<uint(n)) == 0 {
			return malformed("%s: required field %d missing", msg, n)
		}
	}
	return nil
}

func wrongType(f field, want string) error {
	return malformed("field %d: wire type %d, want %s", f.num, f.typ, want)
}

func (f field) uint64() (uint64, error) {
	if f.typ != protowire.VarintType {
		return 0, wrongType(f, "varint")
	}
	return f.v, nil
}

func (f field) int64() (int64, error) {
	v, err := f.uint64()
	return int64(v), err
}

// int32 decodes a protobuf int32, which is sign-extended to 64 bits on the
// wire.
func (f field) int32() (int32, error) {
	v, err := f.uint64()
	return int32(v), err
}

func (f field) uint32() (uint32, error) {
	v, err := f.uint64()
	return uint32(v), err
}

func (f field) bool() (bool, error) {
	v, err := f.uint64()
	return v != 0, err
}

func (f field) bytes() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, wrongType(f, "length-delimited")
	}
	return f.b, nil
}

func (f field) string() (string, error) {
	b, err := f.bytes()
	return string(b), err
}

// Setters used by decoders: they store the value and return the error, so a
// decoder's switch stays one line per field.

func setU64(dst *uint64, f field) (err error) { *dst, err = f.uint64(); return }
func setI64(dst *int64, f field) (err error)  { *dst, err = f.int64(); return }
func setI32(dst *int32, f field) (err error)  { *dst, err = f.int32(); return }
func setU32(dst *uint32, f field) (err error) { *dst, err = f.uint32(); return }
func setBool(dst *bool, f field) (err error)  { *dst, err = f.bool(); return }
func setStr(dst *string, f field) (err error) { *dst, err = f.string(); return }

// setBytes copies, so the decoded value does not alias a reused read buffer.
func setBytes(dst *[]byte, f field) error {
	b, err := f.bytes()
	if err == nil {
		*dst = append([]byte{}, b...)
	}
	return err
}

// Append helpers.

func appendU64(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendI64(b []byte, num protowire.Number, v int64) []byte { return appendU64(b, num, uint64(v)) }

// appendI32 encodes a protobuf int32: negative values take ten bytes, as
// protobuf requires.
func appendI32(b []byte, num protowire.Number, v int32) []byte {
	return appendU64(b, num, uint64(int64(v)))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	return appendU64(b, num, protowire.EncodeBool(v))
}

func appendStr(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendMsg appends a sub-message produced by enc. The length prefix is
// reserved for the common small case and fixed up afterwards.
func appendMsg(b []byte, num protowire.Number, enc func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = append(b, 0) // one-byte length, grown below if needed
	b = enc(b)
	n := len(b) - at - 1
	if n < 128 {
		b[at] = byte(n)
		return b
	}
	size := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, size-1)...)
	copy(b[at+size:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

// KeyValue is a string pair (message properties).
type KeyValue struct {
	Key, Value string
}

func (kv *KeyValue) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&kv.Key, f)
		case 2:
			return setStr(&kv.Value, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("KeyValue", seen, 1, 2)
}

func (kv KeyValue) appendTo(b []byte) []byte {
	b = appendStr(b, 1, kv.Key)
	return appendStr(b, 2, kv.Value)
}

// decodeSub decodes the sub-message in f with dec.
func decodeSub(f field, what string, dec func([]byte) error) error {
	b, err := f.bytes()
	if err != nil {
		return err
	}
	if err := dec(b); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
