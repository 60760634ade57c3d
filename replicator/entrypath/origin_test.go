package entrypath

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// signedCopyMD returns raw with the origin properties the entry pipe
// appends to a copy of origin's entry id sent to target, signed with key
// over raw and payload (nil key: unsigned).
func signedCopyMD(raw, payload, key []byte, topic, origin, target, id string) []byte {
	props := []wire.KeyValue{{Key: marker.PropOriginCluster, Value: origin}, {Key: marker.PropOriginID, Value: id}}
	if key != nil {
		d := marker.OriginDigest(raw, payload)
		props = append(props, wire.KeyValue{Key: marker.PropOriginSig, Value: marker.OriginSig(key, topic, origin, target, id, &d)})
	}
	return wire.AppendProperties(bytes.Clone(raw), props...)
}

// v1Sig is the signature before issue 20 (partition, origin cluster and
// position only), as copies written by older versions carry it.
func v1Sig(key []byte, topic, cluster, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(topic + "\x00" + cluster + "\x00" + id))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// transplant returns the origin properties of md (the last of each key)
// appended to other: what a producer who can read a copy can write.
func transplant(t *testing.T, md, other []byte) []byte {
	t.Helper()
	m, err := wire.ParseMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	out := bytes.Clone(other)
	for _, k := range marker.OriginKeys {
		v, _ := m.Property(k)
		out = wire.AppendProperties(out, wire.KeyValue{Key: k, Value: v})
	}
	return out
}

// What proves that an entry on the target is a copy of an origin entry
// (the read-back, bySignature, and the snapshot machine, entryrule.Origin): a
// version 2 signature under an accepted key over this partition, the
// origin, this target, the position, and the entry's bytes as read. Every
// case but the genuine ones is the issue 20 attack or a variant of it: it
// must prove nothing (the entry is sent again: a duplicate at worst).
func TestOriginProof(t *testing.T) {
	oldKey, newKey := []byte("old-marker-key-0123456789"), []byte("new-marker-key-0123456789")
	const topic = "persistent://t/ns/x-partition-0"
	p := &Partition{local: "east", remote: "west", topic: topic, keys: marker.NewKeys(oldKey)}
	src := wire.Entry{ID: wire.EntryID(10, 5), NumMessages: 1, Payload: []byte("the real message"),
		Metadata: wire.MetadataBuilder{ProducerName: "app", SequenceID: 7, PublishTime: 1_700_000_000_000,
			Properties: []wire.KeyValue{{Key: "app", Value: "v"}}}.Append(nil)}
	genuine, err := p.forwardMetadata(src, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same entry copied to north: readable there, valid there.
	toNorth := &Partition{local: "east", remote: "north", topic: topic, keys: p.keys}
	northMD, err := toNorth.forwardMetadata(src, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An entry of the attacker's own, written on west.
	theirs := wire.MetadataBuilder{ProducerName: "app", SequenceID: 7, PublishTime: 1_700_000_000_001,
		Properties: []wire.KeyValue{{Key: "app", Value: "v"}}, ReplicatedFrom: "east"}.Append(nil)
	plain := wire.MetadataBuilder{ProducerName: "app", SequenceID: 7, PublishTime: 1_700_000_000_000,
		Properties: []wire.KeyValue{{Key: "app", Value: "v"}}}.Append(nil)
	// forwarded is the genuine copy's metadata without its origin.
	forwarded, err := wire.PatchMetadata(nil, plain, wire.Patch{ReplicatedFrom: "east"})
	if err != nil {
		t.Fatal(err)
	}
	rawCopy := func(key []byte, target string) []byte {
		return signedCopyMD(forwarded, src.Payload, key, topic, "east", target, "10:5:-1")
	}
	oldOnly, both, newOnly := marker.NewKeys(oldKey), marker.NewKeys(newKey, oldKey), marker.NewKeys(newKey)
	tests := []struct {
		name    string
		md      []byte
		payload []byte
		keys    marker.Keys
		target  string // the cluster read (default west)
		topic   string
		want    bool
	}{
		{name: "genuine copy", md: genuine, payload: src.Payload, keys: oldOnly, want: true},
		{name: "genuine copy, reader accepts a new key too", md: genuine, payload: src.Payload, keys: marker.NewKeys(oldKey, newKey), want: true},
		{name: "transplanted properties, other payload", md: genuine, payload: []byte("the attacker's message"), keys: oldOnly},
		{name: "transplanted properties, empty payload", md: genuine, payload: nil, keys: oldOnly},
		{name: "north's copy republished on west, same payload", md: transplant(t, northMD, forwarded), payload: src.Payload, keys: oldOnly},
		{name: "north's copy republished on west, as it is", md: northMD, payload: src.Payload, keys: oldOnly},
		{name: "north's copy read on north", md: northMD, payload: src.Payload, keys: oldOnly, target: "north", want: true},
		{name: "properties moved onto other metadata", md: transplant(t, genuine, theirs), payload: src.Payload, keys: oldOnly},
		{name: "metadata changed after signing", md: bytes.Replace(genuine, []byte("app"), []byte("apq"), 1), payload: src.Payload, keys: oldOnly},
		{name: "payload bytes moved into the metadata's length", md: genuine, payload: src.Payload[1:], keys: oldOnly},
		{name: "signed for another partition", md: genuine, payload: src.Payload, keys: oldOnly, topic: "persistent://t/ns/x-partition-1"},
		{name: "v1 signature is no proof", md: wire.AppendProperties(bytes.Clone(forwarded),
			wire.KeyValue{Key: marker.PropOriginCluster, Value: "east"}, wire.KeyValue{Key: marker.PropOriginID, Value: "10:5:-1"},
			wire.KeyValue{Key: marker.PropOriginSig, Value: v1Sig(oldKey, topic, "east", "10:5:-1")}), payload: src.Payload, keys: oldOnly},
		{name: "forged signature", md: wire.AppendProperties(bytes.Clone(theirs),
			wire.KeyValue{Key: marker.PropOriginCluster, Value: "east"}, wire.KeyValue{Key: marker.PropOriginID, Value: "10:5:-1"},
			wire.KeyValue{Key: marker.PropOriginSig, Value: "v2.00112233445566778899aabbccddeeff"}), payload: src.Payload, keys: oldOnly},
		{name: "unsigned", md: rawCopy(nil, "west"), payload: src.Payload, keys: oldOnly},
		{name: "no key configured", md: genuine, payload: src.Payload},
		{name: "rotation step 2: old key still accepted", md: rawCopy(oldKey, "west"), payload: src.Payload, keys: both, want: true},
		{name: "rotation step 2: new key", md: rawCopy(newKey, "west"), payload: src.Payload, keys: both, want: true},
		{name: "rotation step 3: old key dropped", md: rawCopy(oldKey, "west"), payload: src.Payload, keys: newOnly},
		{name: "key never accepted", md: rawCopy(newKey, "west"), payload: src.Payload, keys: oldOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, tp := cmpOr(tt.target, "west"), cmpOr(tt.topic, topic)
			e := wire.Entry{ID: wire.EntryID(3, 4), Metadata: tt.md, Payload: tt.payload}
			if got := bySignature(tt.keys, tp, target)(readBackCopy(e)); got != tt.want {
				t.Errorf("read-back proof = %v, want %v", got, tt.want)
			}
			md, err := wire.ParseMetadata(tt.md)
			if err != nil {
				t.Fatal(err)
			}
			o := entryrule.Origin(&md, e, tt.keys, tp, target)
			if o.Signed != tt.want {
				t.Errorf("entryrule.Origin signed = %v, want %v (%+v)", o.Signed, tt.want, o)
			}
			if tt.want && (o.Cluster != "east" || o.At != subsynctest.Pos(10, 5)) {
				t.Errorf("entryrule.Origin = %+v, want east 10:5", o)
			}
		})
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// What the entry pipe forwards verifies on the target as read back, with
// the entry's own origin properties, a schema version and dropped
// transaction fields in it: the digest is over the bytes as sent.
func TestForwardedCopyVerifies(t *testing.T) {
	keys := marker.NewKeys([]byte("0123456789abcdef"))
	p := &Partition{local: "east", remote: "west", topic: "persistent://t/ns/x-partition-0", keys: keys}
	for _, tc := range []struct {
		name   string
		b      wire.MetadataBuilder
		schema []byte
	}{
		{"plain", wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}, nil},
		{"batch", wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, NumMessagesInBatch: 5, Compression: 1}, nil},
		{"schema and txn", wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, TxnIDLeastBits: 4, TxnIDMostBits: 5}, []byte{0, 0, 0, 3}},
		{"an application's own origin properties", wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2,
			Properties: []wire.KeyValue{{Key: marker.PropOriginCluster, Value: "mars"}, {Key: marker.PropOriginID, Value: "1:1:-1"}, {Key: marker.PropOriginSig, Value: "v2.00"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := wire.Entry{ID: wire.EntryID(10, 5), Metadata: tc.b.Append(nil), Payload: []byte("payload")}
			md, err := p.forwardMetadata(e, tc.b.TxnIDLeastBits != 0, tc.schema)
			if err != nil {
				t.Fatal(err)
			}
			c := readBackCopy(wire.Entry{Metadata: md, Payload: e.Payload})
			if !bySignature(keys, p.topic, "west")(c) || c.origins[0].pos != subsynctest.Pos(10, 5) || c.origins[0].cluster != "east" {
				t.Errorf("forwarded copy not proof: %+v", c.origins)
			}
		})
	}
}

// FuzzOriginRoundTrip: whatever metadata an entry on the source has (any
// producer can shape it), its copy as forwarded proves itself on the
// target as read back and in the snapshot machine, and proves nothing
// with one payload byte more or on another target. Arbitrary bytes read
// back never panic and never prove anything without a valid signature.
func FuzzOriginRoundTrip(f *testing.F) {
	f.Add(wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil), []byte("payload"))
	f.Add(wire.MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, NumMessagesInBatch: 3,
		Properties: []wire.KeyValue{{Key: marker.PropOriginSig, Value: "v2.00"}, {Key: marker.PropOriginCluster, Value: "east"}}}.Append(nil), []byte{})
	f.Add([]byte{4<<3 | 2, 0}, []byte(nil))
	keys := marker.NewKeys([]byte("0123456789abcdef"))
	const topic = "persistent://t/ns/x-partition-0"
	p := &Partition{local: "east", remote: "west", topic: topic, keys: keys}
	f.Fuzz(func(t *testing.T, raw, payload []byte) {
		if c := readBackCopy(wire.Entry{Metadata: raw, Payload: payload}); bySignature(keys, topic, "west")(c) {
			// Only a signature made with the key verifies: the fuzzer
			// cannot make one.
			t.Fatalf("arbitrary bytes taken as proof: %x", raw)
		}
		md, err := wire.ParseMetadata(raw)
		if err != nil {
			return
		}
		e := wire.Entry{ID: wire.EntryID(7, 9), Metadata: raw, Payload: payload}
		fwd, err := p.forwardMetadata(e, md.HasTxnID, nil)
		if err != nil {
			t.Fatalf("forward: %v", err)
		}
		copied := wire.Entry{ID: wire.EntryID(1, 1), Metadata: fwd, Payload: payload}
		if !bySignature(keys, topic, "west")(readBackCopy(copied)) {
			t.Fatalf("the forwarded copy is no proof on its target")
		}
		if bySignature(keys, topic, "north")(readBackCopy(copied)) {
			t.Fatalf("the forwarded copy is proof on another target")
		}
		fmd, err := wire.ParseMetadata(fwd)
		if err != nil {
			t.Fatalf("forwarded metadata does not parse: %v", err)
		}
		if o := entryrule.Origin(&fmd, copied, keys, topic, "west"); !o.Signed || o.At != subsynctest.Pos(7, 9) || o.Cluster != "east" {
			t.Fatalf("entryrule.Origin = %+v, want signed east 7:9", o)
		}
		longer := copied
		longer.Payload = append(bytes.Clone(payload), 0)
		if bySignature(keys, topic, "west")(readBackCopy(longer)) {
			t.Fatalf("the copy's origin proves another payload")
		}
	})
}
