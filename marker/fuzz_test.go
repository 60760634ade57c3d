package marker

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzDecode feeds Decode arbitrary payloads. A mutated payload almost never
// carries a valid tag, so each input is also decoded re-signed (its last
// TagLen bytes replaced by a valid tag), which lets the fuzzer explore the
// parser behind the signature check. Properties: no panic; every error is a
// decode error; whatever decodes re-encodes to the very same bytes (the
// format is canonical) and decodes again to an equal Marker.
func FuzzDecode(f *testing.F) {
	for _, m := range validMarkers() {
		payload, err := Encode(m, testKey)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(payload)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 13, 0, 0})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Add(bytes.Repeat([]byte{0x80}, 40))
	f.Add([]byte("\x01\x0d\x00\x00\x01a\x01b\x00\x00\x00\x00\x00\x00\x00\x01s\x00garbage.garbage."))

	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(payload []byte) {
			m, err := Decode(payload, testKey)
			if err != nil {
				if Reason(err) == "other" {
					t.Fatalf("Decode error %v maps to no reason", err)
				}
				return
			}
			again, err := Encode(m, testKey)
			if err != nil {
				t.Fatalf("Decode accepted %+v, Encode refuses it: %v", m, err)
			}
			if !bytes.Equal(again, payload) {
				t.Fatalf("not canonical:\ndecoded %x\nencoded %x", payload, again)
			}
			m2, err := Decode(again, testKey)
			if err != nil {
				t.Fatalf("decode of re-encoded marker: %v", err)
			}
			if !reflect.DeepEqual(m, m2) {
				t.Fatalf("round trip changed the marker:\n%+v\n%+v", m, m2)
			}
		}
		check(data)
		if len(data) >= TagLen {
			check(sign(data[:len(data)-TagLen]))
		}
	})
}
