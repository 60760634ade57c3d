package marker

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// Errors of Encode and Decode. They are wrapped with details; test them with
// errors.Is. [Reason] maps them to metric label values.
var (
	// ErrMalformed means the bytes are not a well-formed marker: too short,
	// truncated, trailing bytes, a length beyond the remaining input or a
	// limit, a non-minimal varint, invalid UTF-8, an unknown kind, a missing
	// required field, or watermarks not in strictly ascending order. Encode
	// returns it too, for a Marker that breaks the same rules, so anything
	// Encode accepts Decode accepts.
	ErrMalformed = errors.New("malformed marker")
	// ErrUnsupportedVersion means the first byte names a format version this
	// build does not know, perhaps written by a newer sidecar. It is checked
	// before the signature, whose form depends on the version.
	ErrUnsupportedVersion = errors.New("unsupported marker version")
	// ErrBadSignature means the tag does not match the payload under the
	// key: the marker was forged, altered, or signed with another key. No
	// field of such a marker is looked at.
	ErrBadSignature = errors.New("marker signature does not verify")
	// ErrNoKey means Encode or Decode was called with an empty key.
	ErrNoKey = errors.New("no marker key")
)

// Limits of the wire format, enforced by Encode and Decode alike.
const (
	MaxSnapshotIDLen   = 64   // bytes of Marker.SnapshotID
	MaxClusterLen      = 255  // bytes of a cluster name: From, To, watermark keys
	MaxTopicLen        = 2048 // bytes of Marker.Topic
	MaxSubscriptionLen = 1024 // bytes of Marker.Subscription
	MaxWatermarks      = 64   // entries in Marker.Watermarks
	MaxAckedRanges     = 1000 // entries in Marker.Acked
)

// TagLen is the length of the signature tag that ends every payload:
// HMAC-SHA256 truncated to its first 16 bytes.
const TagLen = 16

const (
	version1 = 1
	// Smallest body: version, kind, time, id, from, to, topic, two
	// positions, subscription, watermark count; from and to hold >= 1 byte.
	minBodyLen = 1 + 1 + 1 + 1 + 2 + 2 + 1 + 3 + 3 + 1 + 1
	// Smallest watermark entry: a one-byte name and a position.
	minWatermarkLen = 2 + 3
	// Smallest range of Marker.Acked: two positions.
	minRangeLen = 2 * 3
	// Largest payload the limits allow. Decode rejects longer ones before
	// hashing them, so a flood of huge fake markers costs little.
	maxPositionLen = 2*binary.MaxVarintLen64 + 5
	maxPayloadLen  = 2 + binary.MaxVarintLen64 + // version, kind, time
		1 + MaxSnapshotIDLen + 2*(2+MaxClusterLen) + 2 + MaxTopicLen + // id, from, to, topic
		2*maxPositionLen + 2 + MaxSubscriptionLen + 1 + // local, remote, subscription, count
		MaxWatermarks*(2+MaxClusterLen+maxPositionLen) +
		2 + MaxAckedRanges*2*maxEntryLen + TagLen // acked (kind 14 only: its count takes 2 bytes), tag
	// maxEntryLen is the longest position of a whole entry (batch -1).
	maxEntryLen = 2*binary.MaxVarintLen64 + 1
)

// Range is a run of entries of one partition: those after From, up to
// and including To (Pulsar's open-closed form of acknowledged ranges).
// Both are whole entries (Batch -1), From before To.
type Range struct {
	From, To Position
}

// Marker is one decoded marker. Which fields a kind uses, and which it
// requires (non-empty), is listed per field; a field a kind does not use is
// still encoded and signed, but readers ignore it.
//
// Positions follow one rule: Local is always a position in From's partition,
// Remote always one in To's partition (the same topic partition name in
// another cluster).
type Marker struct {
	Kind Kind
	// SnapshotID identifies the snapshot, a UUID string, at most 64 bytes.
	// Required by request, response and snapshot; it is how S_A matches a
	// response to its pending request.
	SnapshotID string
	// From is the cluster whose sidecar wrote the marker. Required.
	From string
	// To is the cluster the marker is addressed to: B for a request and an
	// update, A for a response. For a snapshot, which is written and read by
	// From alone, To is the remote cluster B that the pair (Local, Remote)
	// relates to. Required. Readers act only on markers addressed to their
	// own cluster (for a snapshot: written by it).
	To string
	// Topic is the full name of the topic partition the marker was written
	// to (for example "persistent://tenant/ns/orders-partition-3"), the same
	// in every cluster. At most 2048 bytes. Readers must check that it
	// names the partition they read the marker from: the signature does not
	// stop a marker from being copied into another topic, and an update or
	// a snapshot applied to the wrong partition would move a subscription
	// to a position that is meaningless there. Empty is allowed by the
	// format but then that check fails; set it on every marker.
	Topic string
	// Local is a position in From's partition. Response: b, where S_B read
	// the request. Snapshot: a, where S_A read the response (with the
	// watermark rule, the position a' >= a where the snapshot completed).
	// Unused by request and update.
	Local Position
	// Remote is a position in To's partition. Snapshot: b, copied from the
	// response. Update: the position to move Subscription on To to, never
	// backwards. Unused by request and response.
	Remote Position
	// Watermarks, in a response, maps each third origin cluster C (neither
	// From nor To) to a position in C's partition: the highest origin
	// position among the C-origin messages that From's partition held at or
	// before Local, or NoneSeen when it held none. See "More than two
	// clusters" in the protocol notes. At
	// most 64 entries, keys 1 to 255 bytes. Encoding sorts the keys, so it is
	// deterministic; Decode returns nil when there are none.
	Watermarks map[string]Position
	// Subscription is the subscription to move. Required by update and
	// acked, at most 1024 bytes.
	Subscription string
	// Acked, in an acked marker (and only there), are the ranges of
	// entries of From's partition that Subscription acknowledged there,
	// in order and apart (each From after the previous To), 1 to
	// MaxAckedRanges of them. Local is then the subscription's mark-delete
	// position: a range may end at or before it (entries consumed up to
	// it), the others lie past it (its ack holes).
	Acked []Range
	// Time is when the marker was written, in Unix milliseconds.
	// Informational; readers may use it to reject absurdly old updates.
	Time int64
}

// Encode returns the signed payload of m under key. The format, version 1,
// is meant to be implemented in other languages too:
//
//	payload   = body tag
//	body      = version kind time id from to topic local remote sub count *watermark [acked]
//	version   = byte 0x01
//	kind      = byte 10..13                     Marker.Kind
//	time      = varint                          Marker.Time
//	id        = string   0..64 bytes            Marker.SnapshotID
//	from      = string   1..255 bytes           Marker.From
//	to        = string   1..255 bytes           Marker.To
//	topic     = string   0..2048 bytes          Marker.Topic
//	local     = position                        Marker.Local
//	remote    = position                        Marker.Remote
//	sub       = string   0..1024 bytes          Marker.Subscription
//	count     = uvarint  0..64                  number of watermarks
//	watermark = string (1..255 bytes) position  key and value, keys in strictly
//	                                            ascending bytewise order
//	acked     = uvarint 1..1000, then that many ranges: in kind 14 only
//	range     = position position               Range.From, Range.To: whole
//	                                            entries (batch -1), From before
//	                                            To, each From at or after the
//	                                            previous To
//	tag       = 16 bytes: the first 16 bytes of HMAC-SHA256(key, body)
//
//	position  = varint ledger, varint entry, varint batch (batch fits an int32)
//	string    = uvarint byte length, then that many bytes of valid UTF-8
//	uvarint   = unsigned LEB128, 7 bits a byte, least significant first, in
//	            as few bytes as possible (protobuf's varint)
//	varint    = the zigzag form of a signed 64-bit integer as a uvarint,
//	            (n << 1) ^ (n >> 63) (protobuf's sint64)
//
// Every field but acked is present in every kind; acked follows the
// watermarks in kind 14 alone, so the other kinds' encodings are those of
// the earlier versions of this code byte for byte. Besides the lengths
// above, the SnapshotID is required (non-empty) by kinds 10 to 12 and
// Subscription by kinds 13 and 14. A reader rejects a payload whose first byte is not 1 (unsupported
// version), then one shorter or longer than these limits allow, then one
// whose tag does not match (compared in constant time), and only then parses
// the body, which must be consumed exactly. The format is canonical: a
// Marker has exactly one encoding, and a reader may insist on it.
//
// Encode fails with [ErrNoKey] for an empty key and with [ErrMalformed] for
// a Marker that breaks the rules above.
func Encode(m Marker, key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, ErrNoKey
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	keys := slices.Sorted(maps.Keys(m.Watermarks))
	// An upper bound: the fixed part takes at most 88 bytes besides the
	// strings, a watermark at most 27 besides its key.
	n := 128 + len(m.SnapshotID) + len(m.From) + len(m.To) + len(m.Topic) + len(m.Subscription)
	for _, k := range keys {
		n += 32 + len(k)
	}
	n += len(m.Acked) * 2 * maxEntryLen
	b := make([]byte, 0, n)
	b = append(b, version1, byte(m.Kind))
	b = binary.AppendVarint(b, m.Time)
	b = appendString(b, m.SnapshotID)
	b = appendString(b, m.From)
	b = appendString(b, m.To)
	b = appendString(b, m.Topic)
	b = appendPosition(b, m.Local)
	b = appendPosition(b, m.Remote)
	b = appendString(b, m.Subscription)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendPosition(b, m.Watermarks[k])
	}
	if m.Kind == KindAcked {
		b = binary.AppendUvarint(b, uint64(len(m.Acked)))
		for _, r := range m.Acked {
			b = appendPosition(b, r.From)
			b = appendPosition(b, r.To)
		}
	}
	return append(b, tag(b, key)...), nil
}

// Decode verifies and decodes a payload written by [Encode] with the same
// key. It fails with [ErrNoKey], [ErrUnsupportedVersion], [ErrBadSignature]
// or [ErrMalformed], and never panics, whatever the input. The signature is
// checked over the raw bytes before any field is parsed.
func Decode(payload []byte, key []byte) (Marker, error) {
	if len(key) == 0 {
		return Marker{}, ErrNoKey
	}
	if len(payload) == 0 {
		return Marker{}, fmt.Errorf("marker: empty payload: %w", ErrMalformed)
	}
	if payload[0] != version1 {
		return Marker{}, fmt.Errorf("marker: version %d: %w", payload[0], ErrUnsupportedVersion)
	}
	if len(payload) < minBodyLen+TagLen {
		return Marker{}, fmt.Errorf("marker: %d bytes is too short: %w", len(payload), ErrMalformed)
	}
	if len(payload) > maxPayloadLen {
		return Marker{}, fmt.Errorf("marker: %d bytes is too long: %w", len(payload), ErrMalformed)
	}
	body, got := payload[:len(payload)-TagLen], payload[len(payload)-TagLen:]
	if !hmac.Equal(got, tag(body, key)) {
		return Marker{}, ErrBadSignature
	}
	return parse(body)
}

// tag returns the truncated HMAC-SHA256 of body under key.
func tag(body, key []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	var sum [sha256.Size]byte
	return mac.Sum(sum[:0])[:TagLen]
}

// check enforces the rules that Encode and Decode share.
func (m *Marker) check() error {
	if !m.Kind.valid() {
		return fmt.Errorf("marker: unknown kind %d: %w", m.Kind, ErrMalformed)
	}
	if err := checkString("snapshot id", m.SnapshotID, 0, MaxSnapshotIDLen); err != nil {
		return err
	}
	if err := checkString("from", m.From, 1, MaxClusterLen); err != nil {
		return err
	}
	if err := checkString("to", m.To, 1, MaxClusterLen); err != nil {
		return err
	}
	if err := checkString("topic", m.Topic, 0, MaxTopicLen); err != nil {
		return err
	}
	if err := checkString("subscription", m.Subscription, 0, MaxSubscriptionLen); err != nil {
		return err
	}
	if m.Kind >= KindUpdate && m.Subscription == "" {
		return fmt.Errorf("marker: %s without a subscription: %w", m.Kind, ErrMalformed)
	}
	if m.Kind < KindUpdate && m.SnapshotID == "" {
		return fmt.Errorf("marker: %s without a snapshot id: %w", m.Kind, ErrMalformed)
	}
	if err := checkAcked(m.Kind, m.Acked); err != nil {
		return err
	}
	if len(m.Watermarks) > MaxWatermarks {
		return fmt.Errorf("marker: %d watermarks, at most %d: %w", len(m.Watermarks), MaxWatermarks, ErrMalformed)
	}
	for k := range m.Watermarks {
		if err := checkString("watermark cluster", k, 1, MaxClusterLen); err != nil {
			return err
		}
	}
	return nil
}

// checkAcked enforces the rules of Marker.Acked: 1 to MaxAckedRanges
// ranges in kind 14, none in the others; whole entries, each range not
// empty and after the one before.
func checkAcked(k Kind, acked []Range) error {
	switch {
	case k != KindAcked && len(acked) > 0:
		return fmt.Errorf("marker: %s with acknowledged ranges: %w", k, ErrMalformed)
	case k != KindAcked:
		return nil
	case len(acked) == 0 || len(acked) > MaxAckedRanges:
		return fmt.Errorf("marker: %d acknowledged ranges, want 1 to %d: %w", len(acked), MaxAckedRanges, ErrMalformed)
	}
	for i, r := range acked {
		switch {
		case r.From.Batch != -1 || r.To.Batch != -1:
			return fmt.Errorf("marker: acknowledged range %d (%s, %s] is not of whole entries: %w", i, r.From, r.To, ErrMalformed)
		case r.From.Compare(r.To) >= 0:
			return fmt.Errorf("marker: acknowledged range %d (%s, %s] is empty: %w", i, r.From, r.To, ErrMalformed)
		case i > 0 && r.From.Compare(acked[i-1].To) < 0:
			return fmt.Errorf("marker: acknowledged range %d (%s, %s] overlaps the one before: %w", i, r.From, r.To, ErrMalformed)
		}
	}
	return nil
}

func checkString(field, s string, lo, hi int) error {
	if len(s) < lo || len(s) > hi {
		return fmt.Errorf("marker: %s is %d bytes, want %d to %d: %w", field, len(s), lo, hi, ErrMalformed)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("marker: %s is not valid UTF-8: %w", field, ErrMalformed)
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendPosition(b []byte, p Position) []byte {
	b = binary.AppendVarint(b, p.Ledger)
	b = binary.AppendVarint(b, p.Entry)
	return binary.AppendVarint(b, int64(p.Batch))
}

// parse decodes a verified body. Every length is bounded by the remaining
// input before anything is allocated or sliced.
func parse(body []byte) (Marker, error) {
	r := reader{b: body}
	if r.byte("version") != version1 {
		// Decode checked it; parse must still stand on its own.
		return Marker{}, fmt.Errorf("marker: version: %w", ErrUnsupportedVersion)
	}
	var m Marker
	m.Kind = Kind(r.byte("kind"))
	m.Time = r.varint("time")
	m.SnapshotID = r.string("snapshot id", MaxSnapshotIDLen)
	m.From = r.string("from", MaxClusterLen)
	m.To = r.string("to", MaxClusterLen)
	m.Topic = r.string("topic", MaxTopicLen)
	m.Local = r.position("local")
	m.Remote = r.position("remote")
	m.Subscription = r.string("subscription", MaxSubscriptionLen)
	count := r.uvarint("watermark count")
	if r.err == nil && (count > MaxWatermarks || count > uint64(len(r.b)/minWatermarkLen)) {
		r.fail("watermark count")
	}
	if r.err == nil && count > 0 {
		m.Watermarks = make(map[string]Position, count)
		prev := ""
		for i := uint64(0); i < count && r.err == nil; i++ {
			k := r.string("watermark cluster", MaxClusterLen)
			p := r.position("watermark")
			if r.err == nil && i > 0 && k <= prev {
				r.fail("watermark clusters not in strictly ascending order")
			}
			m.Watermarks[k] = p
			prev = k
		}
	}
	if r.err == nil && m.Kind == KindAcked {
		n := r.uvarint("acknowledged range count")
		if r.err == nil && (n == 0 || n > MaxAckedRanges || n > uint64(len(r.b)/minRangeLen)) {
			r.fail("acknowledged range count")
		}
		if r.err == nil {
			m.Acked = make([]Range, 0, n)
			for i := uint64(0); i < n && r.err == nil; i++ {
				from := r.position("acknowledged range")
				to := r.position("acknowledged range")
				m.Acked = append(m.Acked, Range{From: from, To: to})
			}
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return Marker{}, r.err
	}
	if err := m.check(); err != nil {
		return Marker{}, err
	}
	return m, nil
}

// reader consumes a body; after the first failure every read returns a zero
// value and r.err keeps the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("marker: bad %s: %w", what, ErrMalformed)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail(what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || n != uvarintLen(v) {
		r.fail(what) // truncated, overflowing, or not minimal
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	u := r.uvarint(what)
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (r *reader) string(what string, limit int) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) position(what string) Position {
	l := r.varint(what)
	e := r.varint(what)
	b := r.varint(what)
	if r.err == nil && (b < math.MinInt32 || b > math.MaxInt32) {
		r.fail(what)
	}
	if r.err != nil {
		return Position{}
	}
	return Position{Ledger: l, Entry: e, Batch: int32(b)}
}

// uvarintLen is the length of the minimal uvarint encoding of v.
func uvarintLen(v uint64) int {
	return max(1, (bits.Len64(v)+6)/7)
}
