package entryrule

import (
	"bytes"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Origin on what is not a signed copy.
func TestOriginUnsigned(t *testing.T) {
	keys, topic := marker.NewKeys([]byte("0123456789abcdef")), "persistent://t/ns/x"
	raw := wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	tests := []struct {
		name    string
		md      []byte
		cluster string
	}{
		{"local data", raw, ""},
		{"Pulsar's own copy", wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, ReplicatedFrom: "north"}.Append(nil), "north"},
		{"unreadable position", signedCopyMD(raw, nil, keys.Current(), topic, "north", "east", "x"), "north"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := wire.ParseMetadata(tt.md)
			if err != nil {
				t.Fatal(err)
			}
			o := Origin(&md, wire.Entry{Metadata: tt.md}, keys, topic, "east")
			if o.Signed || o.Cluster != tt.cluster {
				t.Errorf("Origin() = %+v, want unsigned from %q", o, tt.cluster)
			}
		})
	}
}

// The origin properties a forwarded entry carries: signed under the
// current key, for the target, over the entry's digest; never without a
// key.
//
// Fails for the gremlins survivor entrypipe.go:126 before main's version
// 2 signatures (`len(key) == 0`: entries sent unsigned, so no read-back
// finds them and every session start sends the in-flight window again);
// now origin.go's `!keys.IsZero()` negated.
func TestOriginPropsSigned(t *testing.T) {
	const topic = "persistent://t/ns/x-partition-0"
	id := wire.EntryID(10, 7)
	md, payload := []byte("metadata"), []byte("payload")
	for _, tt := range []struct {
		name string
		keys marker.Keys
	}{{"with a key", marker.NewKeys([]byte("0123456789abcdef"))}, {"without", marker.Keys{}}} {
		t.Run(tt.name, func(t *testing.T) {
			props := OriginProps(tt.keys, topic, "east", "west", id, md, payload)
			sig, hasSig := (&wire.Metadata{Properties: props}).Property(marker.PropOriginSig)
			if hasSig == tt.keys.IsZero() {
				t.Fatalf("origin properties %v: signature present = %v, want %v", props, hasSig, !tt.keys.IsZero())
			}
			d := marker.OriginDigest(md, payload)
			if hasSig && !marker.VerifyOrigin(tt.keys, topic, "east", "west", "10:7:-1", sig, &d) {
				t.Errorf("signature %q does not verify", sig)
			}
		})
	}
}

// signedCopyMD returns raw with the origin properties of a copy of
// origin's entry id sent to target, signed with key over raw and payload.
func signedCopyMD(raw, payload, key []byte, topic, origin, target, id string) []byte {
	d := marker.OriginDigest(raw, payload)
	return wire.AppendProperties(bytes.Clone(raw),
		wire.KeyValue{Key: marker.PropOriginCluster, Value: origin}, wire.KeyValue{Key: marker.PropOriginID, Value: id},
		wire.KeyValue{Key: marker.PropOriginSig, Value: marker.OriginSig(key, topic, origin, target, id, &d)})
}

// FuzzOrigin: Origin and CopyDigest decode what any producer can write.
// Arbitrary bytes never panic and never prove an origin; whatever
// metadata an entry has, the origin properties OriginProps appends to it
// prove it on the target named, and on no other target, and not with one
// payload byte more. The pipe's own round trip (forwarded, then read
// back) is entrypath's FuzzOriginRoundTrip.
func FuzzOrigin(f *testing.F) {
	f.Add(wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil), []byte("payload"))
	f.Add(wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, NumMessagesInBatch: 3,
		Properties: []wire.KeyValue{{Key: marker.PropOriginSig, Value: "v2.00"}, {Key: marker.PropOriginCluster, Value: "east"}}}.Append(nil), []byte{})
	f.Add([]byte{4<<3 | 2, 0}, []byte(nil))
	keys := marker.NewKeys([]byte("0123456789abcdef"))
	const topic = "persistent://t/ns/x-partition-0"
	f.Fuzz(func(t *testing.T, raw, payload []byte) {
		CopyDigest(raw, payload)
		md, err := wire.ParseMetadata(raw)
		if err != nil {
			return
		}
		SkipReason(&md, "west")
		Marker(&md, payload)
		if o := Origin(&md, wire.Entry{Metadata: raw, Payload: payload}, keys, topic, "west"); o.Signed {
			// Only a signature made with the key verifies: the fuzzer
			// cannot make one.
			t.Fatalf("arbitrary bytes taken as proof: %x", raw)
		}
		copied := wire.AppendProperties(bytes.Clone(raw), OriginProps(keys, topic, "east", "west", wire.EntryID(7, 9), raw, payload)...)
		cmd, err := wire.ParseMetadata(copied)
		if err != nil {
			t.Fatalf("metadata with origin properties does not parse: %v", err)
		}
		e := wire.Entry{Metadata: copied, Payload: payload}
		if o := Origin(&cmd, e, keys, topic, "west"); !o.Signed || o.Cluster != "east" || o.At != (marker.Position{Ledger: 7, Entry: 9, Batch: -1}) {
			t.Fatalf("Origin = %+v, want signed east 7:9", o)
		}
		if o := Origin(&cmd, e, keys, topic, "north"); o.Signed {
			t.Fatalf("the copy's origin proves itself on another target")
		}
		longer := e
		longer.Payload = append(bytes.Clone(payload), 0)
		if o := Origin(&cmd, longer, keys, topic, "west"); o.Signed {
			t.Fatalf("the copy's origin proves another payload")
		}
	})
}
