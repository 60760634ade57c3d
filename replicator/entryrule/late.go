package entryrule

import (
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// LateMetadata is the metadata of a late copy of e (geo-sidecar failback:
// an entry stranded on local when it went down, copied afterwards): what
// the entry pipe's copy carries (e's own bytes minus the transaction
// fields, replicated_from local), then marker.PropReplayedLate and extra
// (on a parked copy, marker.PropParkedFrom), then the origin
// (OriginProps for topic and target), whose signature covers all of it.
// md is e.Metadata parsed. schema, when set, is the target's version of
// the entry's schema (the topic written's, from GetOrCreateSchema): schema
// numbers are per cluster and per topic, and a typed consumer decodes a
// message with the schema its number names there, so an entry with a
// schema version must never be copied without it (LateMetadata does not
// check: md.SchemaVersion set and schema nil keeps the source's number).
func LateMetadata(keys marker.Keys, topic, local, target string, e wire.Entry, md *wire.Metadata, schema []byte, extra ...wire.KeyValue) ([]byte, error) {
	props := append([]wire.KeyValue{{Key: marker.PropReplayedLate, Value: "true"}}, extra...)
	out, err := wire.PatchMetadata(make([]byte, 0, len(e.Metadata)+256), e.Metadata,
		wire.Patch{ReplicatedFrom: local, DropTxn: md.HasTxnID, Properties: props, SchemaVersion: schema})
	if err != nil {
		return nil, err
	}
	return wire.AppendProperties(out, OriginProps(keys, topic, local, target, e.ID, out, e.Payload)...), nil
}

// LateKeys are the properties a late copy adds before its origin
// (LateMetadata): verify leaves the last of each out of the bytes it
// compares, as it does the origin's.
var LateKeys = [...]string{marker.PropReplayedLate, marker.PropParkedFrom}
