package marker

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef-test-marker-key")

// sign appends a valid tag to body, to reach the parser with bodies that
// Encode would never produce.
func sign(body []byte) []byte {
	return append(bytes.Clone(body), tag(body, testKey)...)
}

// normalized maps an empty Watermarks map to nil, as Decode returns it.
func normalized(m Marker) Marker {
	if len(m.Watermarks) == 0 {
		m.Watermarks = nil
	}
	return m
}

func manyWatermarks(n int) map[string]Position {
	w := make(map[string]Position, n)
	for i := range n {
		w[fmt.Sprintf("cluster-%02d", i)] = Position{Ledger: int64(1000 + i), Entry: int64(i), Batch: int32(i%3) - 1}
	}
	return w
}

// validMarkers has at least one marker of every kind, and the edge cases.
func validMarkers() map[string]Marker {
	const id = "3f1c8a2e-6b0d-4c55-9a43-0c1f2f5e7d19"
	const topic = "persistent://acme/orders/orders-partition-3"
	return map[string]Marker{
		"request": {Kind: KindSnapshotRequest, SnapshotID: id, From: "east", To: "west", Topic: topic, Time: 1_733_130_000_000},
		"response nil watermarks": {Kind: KindSnapshotResponse, SnapshotID: id, From: "west", To: "east", Topic: topic,
			Local: Position{Ledger: 17, Entry: 4, Batch: -1}, Time: 1_733_130_000_123},
		"response empty watermarks": {Kind: KindSnapshotResponse, SnapshotID: id, From: "west", To: "east", Topic: topic,
			Local: Position{Ledger: 17, Entry: 4, Batch: 2}, Watermarks: map[string]Position{}},
		"response watermarks": {Kind: KindSnapshotResponse, SnapshotID: id, From: "west", To: "east", Topic: topic,
			Local:      Position{Ledger: 17, Entry: 4, Batch: -1},
			Watermarks: map[string]Position{"north": {Ledger: 9, Entry: 99, Batch: -1}, "south": {Ledger: 1, Entry: 0, Batch: 0}}},
		"response max watermarks": {Kind: KindSnapshotResponse, SnapshotID: id, From: "west", To: "east", Topic: topic,
			Local: Position{Ledger: 1, Entry: 2, Batch: 3}, Watermarks: manyWatermarks(MaxWatermarks)},
		"snapshot": {Kind: KindSnapshot, SnapshotID: id, From: "east", To: "west", Topic: topic,
			Local: Position{Ledger: 23, Entry: 50_000, Batch: -1}, Remote: Position{Ledger: 17, Entry: 4, Batch: -1}, Time: 1},
		"snapshot large ids": {Kind: KindSnapshot, SnapshotID: id, From: "east", To: "west", Topic: topic,
			Local:  Position{Ledger: math.MaxInt64, Entry: math.MaxInt64, Batch: math.MaxInt32},
			Remote: Position{Ledger: math.MinInt64, Entry: math.MinInt64, Batch: math.MinInt32}, Time: math.MinInt64},
		"update": {Kind: KindUpdate, From: "east", To: "west", Topic: topic, Subscription: "billing",
			Remote: Position{Ledger: 17, Entry: 4, Batch: -1}, Time: math.MaxInt64},
		"update unicode": {Kind: KindUpdate, From: "東京", To: "zürich", Topic: "persistent://t/ns/tópico", Subscription: "abonnement-été",
			Remote: Position{Ledger: 1 << 40, Entry: 3, Batch: 7}, Watermarks: map[string]Position{"ñ": {Ledger: 1}, "日本": {Ledger: 2}}},
		"limits": {Kind: KindUpdate, SnapshotID: strings.Repeat("i", MaxSnapshotIDLen),
			From: strings.Repeat("f", MaxClusterLen), To: strings.Repeat("é", MaxClusterLen/2),
			Topic: strings.Repeat("t", MaxTopicLen), Subscription: strings.Repeat("s", MaxSubscriptionLen),
			Watermarks: map[string]Position{strings.Repeat("w", MaxClusterLen): {Ledger: -1, Entry: -1, Batch: -1}}},
		"no topic": {Kind: KindSnapshotRequest, SnapshotID: "x", From: "a", To: "b"},
		"acked": {Kind: KindAcked, From: "east", To: "west", Topic: topic, Subscription: "billing",
			Local: Position{Ledger: 17, Entry: 4, Batch: -1}, Time: 1_733_130_000_456,
			Acked: []Range{{From: Position{Ledger: 17, Entry: 1, Batch: -1}, To: Position{Ledger: 17, Entry: 4, Batch: -1}},
				{From: Position{Ledger: 17, Entry: 5, Batch: -1}, To: Position{Ledger: 18, Entry: -1, Batch: -1}},
				{From: Position{Ledger: 18, Entry: -1, Batch: -1}, To: Position{Ledger: 18, Entry: 40, Batch: -1}}}},
		"acked max ranges": {Kind: KindAcked, From: "east", To: "west", Topic: topic, Subscription: "s", Acked: manyRanges(MaxAckedRanges)},
	}
}

// manyRanges returns n ranges of one entry each, one entry apart.
func manyRanges(n int) []Range {
	out := make([]Range, n)
	for i := range out {
		out[i] = Range{From: Position{Ledger: 3, Entry: int64(2 * i), Batch: -1}, To: Position{Ledger: 3, Entry: int64(2*i + 1), Batch: -1}}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	for name, m := range validMarkers() {
		t.Run(name, func(t *testing.T) {
			payload, err := Encode(m, testKey)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := Decode(payload, testKey)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if want := normalized(m); !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestEncodeDeterministic(t *testing.T) {
	m := validMarkers()["response max watermarks"]
	first, err := Encode(m, testKey)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		// A fresh map each time, so map iteration order differs.
		m.Watermarks = manyWatermarks(MaxWatermarks)
		again, err := Encode(m, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("two encodings of the same marker differ:\n%x\n%x", first, again)
		}
	}
}

// TestLayout pins the wire format to the layout documented at Encode,
// byte by byte, so that a change to it cannot go unnoticed.
func TestLayout(t *testing.T) {
	m := Marker{
		Kind: KindSnapshotResponse, SnapshotID: "id", From: "b", To: "a", Topic: "t",
		Local: Position{Ledger: 5, Entry: 7, Batch: -1}, Remote: Position{Ledger: -1, Entry: 0, Batch: 0},
		Watermarks: map[string]Position{"d": {Ledger: 300, Entry: 1, Batch: 2}, "c": {Ledger: 1, Entry: 2, Batch: 3}},
		Time:       1,
	}
	want := []byte{
		0x01,           // version
		0x0b,           // kind 11
		0x02,           // time 1, zigzag
		0x02, 'i', 'd', // snapshot id
		0x01, 'b', // from
		0x01, 'a', // to
		0x01, 't', // topic
		0x0a, 0x0e, 0x01, // local 5, 7, -1
		0x01, 0x00, 0x00, // remote -1, 0, 0
		0x00,                        // subscription ""
		0x02,                        // two watermarks, sorted
		0x01, 'c', 0x02, 0x04, 0x06, // c: 1, 2, 3
		0x01, 'd', 0xd8, 0x04, 0x02, 0x04, // d: 300 (zigzag 600), 1, 2
	}
	got, err := Encode(m, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if body := got[:len(got)-TagLen]; !bytes.Equal(body, want) {
		t.Fatalf("body:\n got %x\nwant %x", body, want)
	}
	// The tag is HMAC-SHA256 truncated to 16 bytes (checked against
	// Python's hmac module); this vector lets other implementations check
	// theirs.
	const wantTag = "66495f739af484bce2aa02a958e6b954"
	if gotTag := hex.EncodeToString(got[len(got)-TagLen:]); gotTag != wantTag {
		t.Errorf("tag = %s, want %s (key %q)", gotTag, wantTag, testKey)
	}
}

func TestDecodeTamperedBit(t *testing.T) {
	for name, m := range validMarkers() {
		t.Run(name, func(t *testing.T) {
			payload, err := Encode(m, testKey)
			if err != nil {
				t.Fatal(err)
			}
			for i := range payload {
				for bit := range 8 {
					bad := bytes.Clone(payload)
					bad[i] ^= 1 << bit
					_, err := Decode(bad, testKey)
					switch {
					case err == nil:
						t.Fatalf("byte %d bit %d flipped: Decode succeeded", i, bit)
					case i == 0 && !errors.Is(err, ErrUnsupportedVersion):
						t.Fatalf("version byte bit %d flipped: %v, want ErrUnsupportedVersion", bit, err)
					case i > 0 && !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrMalformed):
						t.Fatalf("byte %d bit %d flipped: %v, want ErrBadSignature or ErrMalformed", i, bit, err)
					}
				}
			}
		})
	}
}

func TestDecodeWrongKey(t *testing.T) {
	payload, err := Encode(validMarkers()["update"], testKey)
	if err != nil {
		t.Fatal(err)
	}
	// Not tested: testKey with a zero byte appended. HMAC pads short keys
	// with zeros, so such a key is the same HMAC key.
	for _, key := range [][]byte{[]byte("another key of the same length.."), testKey[:len(testKey)-1], append(bytes.Clone(testKey), 1)} {
		if _, err := Decode(payload, key); !errors.Is(err, ErrBadSignature) {
			t.Errorf("key %q: err = %v, want ErrBadSignature", key, err)
		}
	}
	for _, key := range [][]byte{nil, {}} {
		if _, err := Decode(payload, key); !errors.Is(err, ErrNoKey) {
			t.Errorf("empty key: err = %v, want ErrNoKey", err)
		}
	}
}

func TestDecodeTruncatedOrExtended(t *testing.T) {
	for name, m := range validMarkers() {
		t.Run(name, func(t *testing.T) {
			payload, err := Encode(m, testKey)
			if err != nil {
				t.Fatal(err)
			}
			for n := range len(payload) {
				if _, err := Decode(payload[:n], testKey); err == nil {
					t.Fatalf("truncated to %d of %d bytes: Decode succeeded", n, len(payload))
				}
			}
			for _, extra := range [][]byte{{0}, {1}, payload[len(payload)-TagLen:]} {
				if _, err := Decode(append(bytes.Clone(payload), extra...), testKey); err == nil {
					t.Fatalf("%d bytes appended: Decode succeeded", len(extra))
				}
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	ok := []byte{0x01, 0x0d, 0x00, 0x00, 0x01, 'a', 0x01, 'b', 0x00, 0, 0, 0, 0, 0, 0, 0x01, 's', 0x00}
	if _, err := Decode(sign(ok), testKey); err != nil {
		t.Fatalf("the base body must decode: %v", err)
	}
	// edit returns ok with bytes [i, j) replaced by with.
	edit := func(i, j int, with ...byte) []byte {
		return append(append(append([]byte{}, ok[:i]...), with...), ok[j:]...)
	}
	tests := []struct {
		name    string
		payload []byte
		want    error
	}{
		{"empty", nil, ErrMalformed},
		{"version 0", []byte{0}, ErrUnsupportedVersion},
		{"version 2", sign(edit(0, 1, 2)), ErrUnsupportedVersion},
		{"version 255", []byte{0xff, 1, 2, 3}, ErrUnsupportedVersion},
		{"only version", []byte{1}, ErrMalformed},
		{"shorter than the smallest marker", sign(ok[:minBodyLen-1]), ErrMalformed},
		{"tag only", bytes.Repeat([]byte{1}, minBodyLen+TagLen), ErrBadSignature},
		{"kind 0", sign(edit(1, 2, 0)), ErrMalformed},
		{"kind 9", sign(edit(1, 2, 9)), ErrMalformed},
		{"kind 14", sign(edit(1, 2, 14)), ErrMalformed},
		{"trailing byte", sign(append(bytes.Clone(ok), 0)), ErrMalformed},
		{"truncated body", sign(ok[:len(ok)-1]), ErrMalformed},
		{"non-minimal varint", sign(edit(2, 3, 0x80, 0x00)), ErrMalformed},
		{"varint overflow", sign(edit(2, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)), ErrMalformed},
		{"unterminated varint", sign(append(bytes.Clone(ok[:len(ok)-1]), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80)), ErrMalformed},
		{"string longer than input", sign(edit(4, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f, 'a')), ErrMalformed},
		{"string longer than input, within limit", sign(edit(15, 18, 0x05, 's')), ErrMalformed},
		{"string longer than limit", sign(edit(3, 4, append([]byte{65}, bytes.Repeat([]byte{'x'}, 65)...)...)), ErrMalformed},
		{"invalid utf-8", sign(edit(5, 6, 0xff)), ErrMalformed},
		{"empty from", sign(edit(4, 6, 0x00)), ErrMalformed},
		{"empty to", sign(edit(6, 8, 0x00)), ErrMalformed},
		{"update without subscription", sign(edit(15, 17, 0x00)), ErrMalformed},
		{"request without snapshot id", sign(edit(1, 2, 10)), ErrMalformed},
		{"batch beyond int32", sign(edit(11, 12, 0x80, 0x80, 0x80, 0x80, 0x10)), ErrMalformed},
		{"watermark count beyond input", sign(edit(17, 18, 0x01)), ErrMalformed},
		{"watermark count huge", sign(edit(17, 18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)), ErrMalformed},
		{"watermark count over limit", sign(append(edit(17, 18, 65), bytes.Repeat([]byte{1, 'x', 0, 0, 0}, 65)...)), ErrMalformed},
		{"watermark empty cluster", sign(edit(17, 18, 1, 0, 0, 0, 0)), ErrMalformed},
		{"watermarks unsorted", sign(edit(17, 18, 2, 1, 'd', 0, 0, 0, 1, 'c', 0, 0, 0)), ErrMalformed},
		{"watermarks duplicate", sign(edit(17, 18, 2, 1, 'c', 0, 0, 0, 1, 'c', 0, 0, 0)), ErrMalformed},
		{"watermark truncated", sign(edit(17, 18, 2, 1, 'c', 0, 0, 0, 1, 'd', 0, 0)), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.payload, testKey)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	// Sanity: two sorted watermarks in the same base are accepted.
	if _, err := Decode(sign(edit(17, 18, 2, 1, 'c', 0, 0, 0, 1, 'd', 0, 0, 0)), testKey); err != nil {
		t.Fatalf("sorted watermarks: %v", err)
	}
}

func TestDecodeDoesNotAllocateFromLengths(t *testing.T) {
	// A signed body claiming a 2^62-byte string and a huge watermark count
	// must fail without allocating anything near that size.
	bodies := [][]byte{
		{0x01, 0x0d, 0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x01, 'a', 0x01, 'b', 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x01, 0x0d, 0x00, 0x00, 0x01, 'a', 0x01, 'b', 0x00, 0, 0, 0, 0, 0, 0, 0x01, 's', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
	for _, body := range bodies {
		payload := sign(body)
		allocs := testing.AllocsPerRun(10, func() {
			if _, err := Decode(payload, testKey); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
		if allocs > 20 {
			t.Errorf("%v allocations for a rejected marker", allocs)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	base := validMarkers()["update"]
	with := func(f func(*Marker)) Marker {
		m := base
		f(&m)
		return m
	}
	tests := []struct {
		name string
		m    Marker
		key  []byte
		want error
	}{
		{"nil key", base, nil, ErrNoKey},
		{"empty key", base, []byte{}, ErrNoKey},
		{"kind 0", with(func(m *Marker) { m.Kind = 0 }), testKey, ErrMalformed},
		{"kind 9", with(func(m *Marker) { m.Kind = 9 }), testKey, ErrMalformed},
		{"kind 15", with(func(m *Marker) { m.Kind = 15 }), testKey, ErrMalformed},
		{"acked without ranges", with(func(m *Marker) { m.Kind = KindAcked }), testKey, ErrMalformed},
		{"acked too many ranges", with(func(m *Marker) { m.Kind, m.Acked = KindAcked, manyRanges(MaxAckedRanges+1) }), testKey, ErrMalformed},
		{"acked without subscription", with(func(m *Marker) { m.Kind, m.Acked, m.Subscription = KindAcked, manyRanges(1), "" }), testKey, ErrMalformed},
		{"update with ranges", with(func(m *Marker) { m.Acked = manyRanges(1) }), testKey, ErrMalformed},
		{"request with ranges", with(func(m *Marker) { m.Kind, m.SnapshotID, m.Acked = KindSnapshotRequest, "i", manyRanges(1) }), testKey, ErrMalformed},
		{"acked empty range", with(func(m *Marker) {
			m.Kind, m.Acked = KindAcked, []Range{{From: Position{Ledger: 3, Entry: 4, Batch: -1}, To: Position{Ledger: 3, Entry: 4, Batch: -1}}}
		}), testKey, ErrMalformed},
		{"acked range backwards", with(func(m *Marker) {
			m.Kind, m.Acked = KindAcked, []Range{{From: Position{Ledger: 3, Entry: 5, Batch: -1}, To: Position{Ledger: 3, Entry: 4, Batch: -1}}}
		}), testKey, ErrMalformed},
		{"acked ranges overlap", with(func(m *Marker) {
			m.Kind, m.Acked = KindAcked, []Range{{From: Position{Ledger: 3, Entry: 1, Batch: -1}, To: Position{Ledger: 3, Entry: 4, Batch: -1}},
				{From: Position{Ledger: 3, Entry: 3, Batch: -1}, To: Position{Ledger: 3, Entry: 6, Batch: -1}}}
		}), testKey, ErrMalformed},
		{"acked ranges out of order", with(func(m *Marker) {
			m.Kind, m.Acked = KindAcked, []Range{{From: Position{Ledger: 4, Entry: 1, Batch: -1}, To: Position{Ledger: 4, Entry: 4, Batch: -1}},
				{From: Position{Ledger: 3, Entry: 3, Batch: -1}, To: Position{Ledger: 3, Entry: 6, Batch: -1}}}
		}), testKey, ErrMalformed},
		{"acked range in a batch", with(func(m *Marker) {
			m.Kind, m.Acked = KindAcked, []Range{{From: Position{Ledger: 3, Entry: 1, Batch: 0}, To: Position{Ledger: 3, Entry: 4, Batch: -1}}}
		}), testKey, ErrMalformed},
		{"kind 255", with(func(m *Marker) { m.Kind = 255 }), testKey, ErrMalformed},
		{"empty from", with(func(m *Marker) { m.From = "" }), testKey, ErrMalformed},
		{"empty to", with(func(m *Marker) { m.To = "" }), testKey, ErrMalformed},
		{"long from", with(func(m *Marker) { m.From = strings.Repeat("f", MaxClusterLen+1) }), testKey, ErrMalformed},
		{"long to in runes", with(func(m *Marker) { m.To = strings.Repeat("é", MaxClusterLen/2+1) }), testKey, ErrMalformed},
		{"long snapshot id", with(func(m *Marker) { m.SnapshotID = strings.Repeat("i", MaxSnapshotIDLen+1) }), testKey, ErrMalformed},
		{"long topic", with(func(m *Marker) { m.Topic = strings.Repeat("t", MaxTopicLen+1) }), testKey, ErrMalformed},
		{"long subscription", with(func(m *Marker) { m.Subscription = strings.Repeat("s", MaxSubscriptionLen+1) }), testKey, ErrMalformed},
		{"too many watermarks", with(func(m *Marker) { m.Watermarks = manyWatermarks(MaxWatermarks + 1) }), testKey, ErrMalformed},
		{"empty watermark cluster", with(func(m *Marker) { m.Watermarks = map[string]Position{"": {}} }), testKey, ErrMalformed},
		{"long watermark cluster", with(func(m *Marker) { m.Watermarks = map[string]Position{strings.Repeat("w", MaxClusterLen+1): {}} }), testKey, ErrMalformed},
		{"invalid utf-8", with(func(m *Marker) { m.From = "east\xff" }), testKey, ErrMalformed},
		{"update without subscription", with(func(m *Marker) { m.Subscription = "" }), testKey, ErrMalformed},
		{"request without snapshot id", with(func(m *Marker) { m.Kind = KindSnapshotRequest }), testKey, ErrMalformed},
		{"snapshot without snapshot id", with(func(m *Marker) { m.Kind = KindSnapshot }), testKey, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Encode(tt.m, tt.key)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if b != nil {
				t.Fatalf("Encode returned %d bytes with an error", len(b))
			}
		})
	}
}

func TestLargestMarkerFits(t *testing.T) {
	big := Position{Ledger: math.MinInt64, Entry: math.MinInt64, Batch: math.MinInt32}
	w := make(map[string]Position, MaxWatermarks)
	for i := range MaxWatermarks {
		w[fmt.Sprintf("%03d", i)+strings.Repeat("w", MaxClusterLen-3)] = big
	}
	// Ranges of entries whose ledger and entry take 10 bytes each.
	acked := make([]Range, MaxAckedRanges)
	for i := range acked {
		l := int64(math.MaxInt64 - MaxAckedRanges + i)
		acked[i] = Range{From: Position{Ledger: l, Entry: math.MinInt64, Batch: -1}, To: Position{Ledger: l, Entry: math.MaxInt64, Batch: -1}}
	}
	m := Marker{
		Kind: KindAcked, SnapshotID: strings.Repeat("i", MaxSnapshotIDLen),
		From: strings.Repeat("f", MaxClusterLen), To: strings.Repeat("t", MaxClusterLen),
		Topic: strings.Repeat("p", MaxTopicLen), Subscription: strings.Repeat("s", MaxSubscriptionLen),
		Local: big, Remote: big, Watermarks: w, Time: math.MinInt64, Acked: acked,
	}
	payload, err := Encode(m, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(payload) != maxPayloadLen {
		t.Fatalf("largest marker is %d bytes, maxPayloadLen is %d", len(payload), maxPayloadLen)
	}
	if _, err := Decode(payload, testKey); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(append(payload, 0), testKey); !errors.Is(err, ErrMalformed) {
		t.Fatalf("one byte more: err = %v, want ErrMalformed", err)
	}
}
