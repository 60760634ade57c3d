package entryrule

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/batch"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// TestLateMetadata: a late copy (geo-sidecar failback) carries what the
// entry pipe's copy does (no transaction fields, replicated_from the
// local cluster), the late flag, the caller's extra properties, and a
// signed origin; the source's own properties stay.
func TestLateMetadata(t *testing.T) {
	keys := marker.NewKeys([]byte("0123456789abcdef0123456789abcdef"))
	parked := wire.KeyValue{Key: marker.PropParkedFrom, Value: "persistent://t/ns/a-partition-0"}
	for _, tt := range []struct {
		name   string
		txn    bool
		schema []byte // the source's schema version; the target's is schema+1
		extra  []wire.KeyValue
	}{
		{"plain", false, nil, nil},
		{"in a transaction at the source", true, nil, nil},
		{"parked", false, nil, []wire.KeyValue{parked}},
		{"with a schema version", false, []byte{0, 0, 0, 0, 0, 0, 0, 1}, nil},
		{"parked with a schema version", false, []byte{0, 0, 0, 0, 0, 0, 0, 3}, []wire.KeyValue{parked}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mb := wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 4,
				Properties: []wire.KeyValue{{Key: "k", Value: "v"}}}
			if tt.txn {
				mb.TxnIDMostBits, mb.TxnIDLeastBits = 1, 5
			}
			e := wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: 9}, Metadata: mb.Append(nil), Payload: []byte("x"), NumMessages: 1}
			var target []byte
			if tt.schema != nil {
				e.Metadata, _ = wire.PatchMetadata(nil, e.Metadata, wire.Patch{SchemaVersion: tt.schema})
				target = slices.Clone(tt.schema)
				target[7]++
			}
			md, err := wire.ParseMetadata(e.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			out, err := LateMetadata(keys, "persistent://t/ns/a-partition-0", "east", "west", e, &md, target, tt.extra...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wire.ParseMetadata(out)
			if err != nil {
				t.Fatal(err)
			}
			if got.HasTxnID {
				t.Errorf("late copy keeps the transaction id %d:%d", got.TxnIDMostBits, got.TxnIDLeastBits)
			}
			if !slices.Equal(got.SchemaVersion, target) {
				t.Errorf("schema version %x, want the target's %x", got.SchemaVersion, target)
			}
			if got.ReplicatedFrom != "east" {
				t.Errorf("replicated_from %q, want east", got.ReplicatedFrom)
			}
			for _, want := range append([]wire.KeyValue{{Key: "k", Value: "v"}, {Key: marker.PropReplayedLate, Value: "true"}}, tt.extra...) {
				if !slices.Contains(got.Properties, want) {
					t.Errorf("property %s=%s missing: %v", want.Key, want.Value, got.Properties)
				}
			}
			if _, ok := got.Property(marker.PropOriginSig); !ok {
				t.Errorf("no signed origin: %v", got.Properties)
			}
		})
	}
}

// batchEntry is a batched entry of n messages "m<i>" (each with the
// property app=i), compressed with codec, as a producer writes it.
func batchEntry(t testing.TB, codec int32, n int, encrypted bool) wire.Entry {
	t.Helper()
	var raw []byte
	for i := range n {
		p := []byte(fmt.Sprintf("m%d", i))
		var md []byte
		kv := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "app")
		kv = protowire.AppendString(protowire.AppendTag(kv, 2, protowire.BytesType), fmt.Sprint(i))
		md = protowire.AppendBytes(protowire.AppendTag(md, 1, protowire.BytesType), kv)
		md = protowire.AppendVarint(protowire.AppendTag(md, 3, protowire.VarintType), uint64(len(p)))
		raw = batch.Append(raw, md, p)
	}
	payload, err := batch.Compress(codec, raw)
	if err != nil {
		t.Fatal(err)
	}
	mb := wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 4, Compression: codec,
		UncompressedSize: uint32(len(raw)), NumMessagesInBatch: int32(n)}
	md := mb.Append(nil)
	if encrypted {
		md = protowire.AppendBytes(protowire.AppendTag(md, 13, protowire.BytesType), []byte{10, 1, 'k', 18, 1, 'v'})
	}
	return wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: 9}, Metadata: md, Payload: payload, NumMessages: int32(n)}
}

// TestLateCopy: a late copy of a batch flags every message (what a
// consumer sees of a batched message is its own metadata), whatever the
// codec, keeps each message's own properties and payload, names the
// source's content digest, and is signed over its new bytes; an
// encrypted batch is refused; an unbatched entry is LateMetadata's.
func TestLateCopy(t *testing.T) {
	keys := marker.NewKeys([]byte("0123456789abcdef0123456789abcdef"))
	const topic = "persistent://t/ns/a-partition-0"
	parked := wire.KeyValue{Key: marker.PropParkedFrom, Value: topic}
	content := []byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name  string
		codec int32
		n     int
		extra []wire.KeyValue
	}{
		{"NONE", batch.None, 5, nil},
		{"LZ4", batch.LZ4, 5, nil},
		{"ZLIB", batch.ZLIB, 1, nil},
		{"ZSTD", batch.ZSTD, 40, nil},
		{"SNAPPY", batch.Snappy, 5, nil},
		{"LZ4 parked", batch.LZ4, 3, []wire.KeyValue{parked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := batchEntry(t, tc.codec, tc.n, false)
			md, err := wire.ParseMetadata(e.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			out, payload, rewritten, err := LateCopy(keys, topic, "east", "west", e, &md, nil, content, tc.extra...)
			if err != nil || !rewritten {
				t.Fatalf("rewritten %v, err %v", rewritten, err)
			}
			got, err := wire.ParseMetadata(out)
			if err != nil {
				t.Fatal(err)
			}
			if got.Compression != tc.codec || got.NumMessagesInBatch != int32(tc.n) {
				t.Errorf("compression %d, %d messages; want %d, %d", got.Compression, got.NumMessagesInBatch, tc.codec, tc.n)
			}
			if v, _ := got.Property(marker.PropLateContent); v != "01020304" {
				t.Errorf("%s %q, want the content's hex", marker.PropLateContent, v)
			}
			d, ok := CopyDigest(out, payload)
			id, _ := got.Property(marker.PropOriginID)
			sig, _ := got.Property(marker.PropOriginSig)
			if !ok || !marker.VerifyOrigin(keys, topic, "east", "west", id, sig, &d) {
				t.Errorf("the origin signature does not cover the rewritten copy")
			}
			raw, err := batch.Decompress(got.Compression, payload, got.UncompressedSize)
			if err != nil {
				t.Fatalf("the copy's payload under its own metadata: %v", err)
			}
			msgs, err := batch.Split(raw, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			want := [][2]string{{marker.PropReplayedLate, "true"}}
			for _, kv := range tc.extra {
				want = append(want, [2]string{kv.Key, kv.Value})
			}
			for i, m := range msgs {
				props, err := batch.Properties(m.Metadata)
				if err != nil {
					t.Fatal(err)
				}
				if w := append([][2]string{{"app", fmt.Sprint(i)}}, want...); !slices.Equal(props, w) || string(m.Payload) != fmt.Sprintf("m%d", i) {
					t.Errorf("message %d: %v %q, want %v %q", i, props, m.Payload, w, fmt.Sprintf("m%d", i))
				}
			}
		})
	}
	t.Run("encrypted", func(t *testing.T) {
		e := batchEntry(t, batch.LZ4, 3, true)
		md, _ := wire.ParseMetadata(e.Metadata)
		if _, _, _, err := LateCopy(keys, topic, "east", "west", e, &md, nil, content); !errors.Is(err, ErrSealed) {
			t.Errorf("err %v, want ErrSealed", err)
		}
	})
	t.Run("not batched", func(t *testing.T) {
		e := wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: 9}, Metadata: (wire.MetadataBuilder{ProducerName: "app", PublishTime: 4}).Append(nil), Payload: []byte("x"), NumMessages: 1}
		md, _ := wire.ParseMetadata(e.Metadata)
		out, payload, rewritten, err := LateCopy(keys, topic, "east", "west", e, &md, nil, content)
		want, _ := LateMetadata(keys, topic, "east", "west", e, &md, nil)
		if err != nil || rewritten || !slices.Equal(out, want) || string(payload) != "x" {
			t.Errorf("rewritten %v, err %v, metadata %x, want LateMetadata's %x", rewritten, err, out, want)
		}
	})
	t.Run("a payload that is not the batch said", func(t *testing.T) {
		e := batchEntry(t, batch.ZSTD, 3, false)
		e.Payload = e.Payload[:len(e.Payload)-2]
		md, _ := wire.ParseMetadata(e.Metadata)
		if _, _, _, err := LateCopy(keys, topic, "east", "west", e, &md, nil, content); !errors.Is(err, batch.ErrMalformed) {
			t.Errorf("err %v, want batch.ErrMalformed", err)
		}
	})
}
