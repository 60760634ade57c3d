package entryrule

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/batch"
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
// (LateMetadata, LateCopy): verify leaves the last of each out of the
// bytes it compares, as it does the origin's.
var LateKeys = [...]string{marker.PropReplayedLate, marker.PropParkedFrom, marker.PropLateContent}

// ErrSealed: the entry is an encrypted batch. Its messages' own
// metadata (where a consumer looks for a batched message's properties)
// is inside the encrypted payload, which the sidecar cannot rewrite
// without the application's key: a late copy of it could be flagged on
// the entry only, where consumers do not see it.
var ErrSealed = errors.New("an encrypted batch: its messages cannot be flagged one by one")

// LateCopy returns the metadata and payload of a late copy of e (see
// LateMetadata), flagged so that every message a consumer receives of it
// carries marker.PropReplayedLate and extra. Not batched, the metadata's
// properties are the message's: LateMetadata, and e's payload as it is
// (rewritten false). A batch's messages carry their own properties in
// the payload: it is decompressed, the properties appended to every
// message's, and compressed again with the same codec (replicator/batch);
// the metadata gets the new uncompressed_size and
// marker.PropLateContent, the hex of content (verify's digest of e's
// content: the copy's payload is no longer e's bytes), before the origin
// signed over the new bytes. An encrypted batch gives ErrSealed
// (LateMetadata then flags it on the entry only, if the caller wants).
func LateCopy(keys marker.Keys, topic, local, target string, e wire.Entry, md *wire.Metadata, schema, content []byte, extra ...wire.KeyValue) (metadata, payload []byte, rewritten bool, err error) {
	if !md.HasNumMessagesInBatch || md.HasChunk {
		metadata, err = LateMetadata(keys, topic, local, target, e, md, schema, extra...)
		return metadata, e.Payload, false, err
	}
	if md.Encrypted {
		return nil, nil, false, ErrSealed
	}
	flags := [][2]string{{marker.PropReplayedLate, "true"}}
	for _, kv := range extra {
		flags = append(flags, [2]string{kv.Key, kv.Value})
	}
	payload, size, err := batch.Flag(md.Compression, e.Payload, md.UncompressedSize, int(md.NumMessagesInBatch), flags...)
	if err != nil {
		return nil, nil, false, fmt.Errorf("flag the batch's %d messages: %w", md.NumMessagesInBatch, err)
	}
	props := append([]wire.KeyValue{{Key: marker.PropReplayedLate, Value: "true"}}, extra...)
	props = append(props, wire.KeyValue{Key: marker.PropLateContent, Value: hex.EncodeToString(content)})
	out, err := wire.PatchMetadata(make([]byte, 0, len(e.Metadata)+384), e.Metadata,
		wire.Patch{ReplicatedFrom: local, DropTxn: md.HasTxnID, Properties: props, SchemaVersion: schema, UncompressedSize: &size})
	if err != nil {
		return nil, nil, false, err
	}
	return wire.AppendProperties(out, OriginProps(keys, topic, local, target, e.ID, out, payload)...), payload, true, nil
}
