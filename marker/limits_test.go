package marker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestDecodeShortPayloads pins the lower length limit of the format with
// numbers derived from the grammar at Encode, not from the constant: the
// smallest body is version, kind, a one-byte time, an empty id, from and
// to of one byte each (two bytes apiece with their length), an empty
// topic, two three-byte positions, an empty subscription and a zero count,
// 17 bytes, and the tag adds 16. Anything shorter is malformed and rejected
// before the signature is computed (a flood of short fakes costs nothing
// and is counted as "malformed", not "signature"); from 33 bytes on, junk
// fails the signature.
func TestDecodeShortPayloads(t *testing.T) {
	const smallest = 1 + 1 + 1 + 1 + 2 + 2 + 1 + 3 + 3 + 1 + 1 + 16
	for n := 1; n <= smallest+2; n++ {
		payload := append([]byte{version1}, bytes.Repeat([]byte{0x55}, n-1)...)
		_, err := Decode(payload, testKey)
		want := ErrMalformed
		if n >= smallest {
			want = ErrBadSignature
		}
		if !errors.Is(err, want) {
			t.Errorf("%d-byte payload: err = %v, want %v", n, err, want)
		}
	}
	// The smallest markers Encode writes are one byte longer (a kind needs
	// a snapshot id or a subscription) and decode.
	for _, m := range []Marker{
		{Kind: KindSnapshotRequest, SnapshotID: "i", From: "a", To: "b"},
		{Kind: KindUpdate, From: "a", To: "b", Subscription: "s"},
	} {
		payload, err := Encode(m, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if len(payload) != smallest+1 {
			t.Errorf("smallest %s is %d bytes, want %d", m.Kind, len(payload), smallest+1)
		}
		if _, err := Decode(payload, testKey); err != nil {
			t.Errorf("smallest %s: %v", m.Kind, err)
		}
	}
}

// TestNoneSeen pins the watermark "nothing of that origin": it is on the
// wire (responses name it, and a sidecar of another version reads it), so
// its value is part of the format, and it sorts before every real
// position, including the first message of a ledger 0.
func TestNoneSeen(t *testing.T) {
	if NoneSeen != (Position{Ledger: -1, Entry: -1, Batch: -1}) || NoneSeen.String() != "-1:-1:-1" {
		t.Fatalf("NoneSeen = %v, want -1:-1:-1", NoneSeen)
	}
	for _, p := range []Position{{}, {Ledger: 0, Entry: 0, Batch: -1}, {Ledger: 0, Entry: -1, Batch: -1}, {Ledger: 1 << 40}} {
		if NoneSeen.Compare(p) >= 0 {
			t.Errorf("NoneSeen.Compare(%v) = %d, want < 0", p, NoneSeen.Compare(p))
		}
	}
}

// TestEncodeEachStringAtItsLimit encodes markers with one string field at
// its limit and the others as short as allowed, for every field: each
// round-trips, and Encode sizes its buffer once, whatever the field (as
// many allocations as for a marker with every string short).
func TestEncodeEachStringAtItsLimit(t *testing.T) {
	base := Marker{Kind: KindUpdate, SnapshotID: "i", From: "a", To: "b", Subscription: "s",
		Watermarks: map[string]Position{"c": NoneSeen}}
	allocs := func(m Marker) float64 {
		return testing.AllocsPerRun(20, func() { _, _ = Encode(m, testKey) })
	}
	want := allocs(base)
	for name, edit := range map[string]func(*Marker){
		"snapshot id":  func(m *Marker) { m.SnapshotID = strings.Repeat("i", MaxSnapshotIDLen) },
		"from":         func(m *Marker) { m.From = strings.Repeat("f", MaxClusterLen) },
		"to":           func(m *Marker) { m.To = strings.Repeat("t", MaxClusterLen) },
		"topic":        func(m *Marker) { m.Topic = strings.Repeat("p", MaxTopicLen) },
		"subscription": func(m *Marker) { m.Subscription = strings.Repeat("s", MaxSubscriptionLen) },
		"watermark":    func(m *Marker) { m.Watermarks = map[string]Position{strings.Repeat("w", MaxClusterLen): NoneSeen} },
	} {
		t.Run(name, func(t *testing.T) {
			m := base
			m.Watermarks = maps.Clone(base.Watermarks)
			edit(&m)
			payload, err := Encode(m, testKey)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(payload, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, normalized(m)) {
				t.Fatalf("round trip: got %+v, want %+v", got, m)
			}
			if a := allocs(m); a != want {
				t.Errorf("Encode made %v allocations, %v with every string short: its buffer was too small", a, want)
			}
		})
	}
}

// TestDecodeAckedCountBoundsAllocation: the ranges of an acked marker are
// allocated only after their count is checked against MaxAckedRanges and
// the input left; a count of 0 is malformed (the kind requires ranges).
func TestDecodeAckedCountBoundsAllocation(t *testing.T) {
	// An acked marker's body up to its range count.
	body := []byte{0x01, 0x0e, 0x00, 0x00, 0x01, 'a', 0x01, 'b', 0x00, 0, 0, 0, 0, 0, 0, 0x01, 's', 0x00}
	for _, count := range []uint64{0, 4, MaxAckedRanges + 1, 1 << 18, 1 << 40} {
		payload := sign(append(binary.AppendUvarint(bytes.Clone(body), count), bytes.Repeat([]byte{0, 0, 1}, 6)...))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decode(payload, testKey)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("count %d: err = %v, want ErrMalformed", count, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("count %d: Decode allocated %d bytes", count, n)
		}
	}
	// Three ranges that are there decode.
	ok := append(bytes.Clone(body), 0x03, 0, 0, 1, 0, 2, 1, 0, 4, 1, 0, 6, 1, 0, 6, 1, 0, 8, 1)
	m, err := Decode(sign(ok), testKey)
	if err != nil || len(m.Acked) != 3 || m.Acked[2].To != (Position{Ledger: 0, Entry: 4, Batch: -1}) {
		t.Errorf("three ranges: %+v, %v", m.Acked, err)
	}
}

// TestDecodeWatermarkCountBoundsAllocation: parse allocates the watermark
// map only after checking the count against MaxWatermarks and the input
// left, so a signed body announcing a huge count costs nothing.
func TestDecodeWatermarkCountBoundsAllocation(t *testing.T) {
	// The update body of TestDecodeErrors, its count replaced.
	body := []byte{0x01, 0x0d, 0x00, 0x00, 0x01, 'a', 0x01, 'b', 0x00, 0, 0, 0, 0, 0, 0, 0x01, 's'}
	for _, count := range []uint64{MaxWatermarks + 1, 1000, 1 << 18} {
		payload := sign(append(binary.AppendUvarint(bytes.Clone(body), count), bytes.Repeat([]byte{1, 'x', 0, 0, 0}, 3)...))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decode(payload, testKey)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("count %d: err = %v, want ErrMalformed", count, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("count %d: Decode allocated %d bytes", count, n)
		}
	}
}

// TestKindsOutsideTheProtocol: only kinds 10 to 14 exist. A marker of any
// other kind, otherwise complete (snapshot id and subscription set, and
// for 14 its ranges), is refused by Encode and, signed, by Decode.
func TestKindsOutsideTheProtocol(t *testing.T) {
	one := []Range{{From: Position{Ledger: 0, Entry: 0, Batch: -1}, To: Position{Ledger: 0, Entry: 1, Batch: -1}}}
	for k := range 256 {
		kind := Kind(k)
		known := kind >= KindSnapshotRequest && kind <= KindAcked
		m := Marker{Kind: kind, SnapshotID: "i", From: "a", To: "b", Subscription: "s"}
		body := []byte{version1, byte(k), 0x00, 0x01, 'i', 0x01, 'a', 0x01, 'b', 0x00, 0, 0, 0, 0, 0, 0, 0x01, 's', 0x00}
		if kind == KindAcked {
			m.Acked = one
			body = append(body, 0x01, 0, 0, 1, 0, 2, 1) // one range: (0:0, 0:1]
		}
		_, err := Encode(m, testKey)
		if known != (err == nil) || !known && !errors.Is(err, ErrMalformed) {
			t.Errorf("Encode kind %d: err = %v", k, err)
		}
		_, err = Decode(sign(body), testKey)
		if known != (err == nil) || !known && !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode kind %d: err = %v", k, err)
		}
	}
}
