package entryrule

import (
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
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
