// Package entryrule holds the rules by which an entry read from a
// partition is judged, from its metadata alone: whether the entry pipe
// forwards it to a remote or why it skips it (SkipReason), whether it is a
// geo-sidecar marker (Marker), and, for a copy, which origin entry it
// copies and whether a signature proves it (Origin, over marker's
// contract), together with what the pipe appends to a copy so that this
// can be told (OriginProps).
//
// It exists apart from the entry pipe (replicator/entrypath) so that the
// pipe and geo-sidecar verify (replicator/verify), which judges a copy by
// the same decisions, share the rules and nothing else: what verify
// expects on the target cannot drift from what the pipe sends, and verify
// does not import the data path. Bytes in, values out: no I/O, no state;
// every function is safe for concurrent use.
package entryrule

import (
	"slices"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Skip reasons, the bounded label values of the skipped-messages metric:
// those SkipReason returns, and those the pipe finds on the way (a
// refusal by the target, a copy the read-back found there).
const (
	SkipRemoteOrigin = "remote-origin"
	SkipMarker       = "marker"
	SkipReplicateTo  = "replicate-to"
	// The target refuses the entry for good (see the pipe's refusal):
	// over its size limit, NotAllowed (a namespace maxMessageSize below
	// the broker's, encryption required) or IncompatibleSchema (the
	// schema cannot be registered there).
	SkipRejectedTooBig     = "rejected-too-large"
	SkipRejectedNotAllowed = "rejected-not-allowed"
	SkipRejectedSchema     = "rejected-schema"
	// The source no longer serves the entry's schema version (deleted):
	// the copy cannot name its schema on the target, for good.
	SkipSourceSchemaMissing = "source-schema-missing"
	SkipAlreadyCopied       = "already-copied"
)

// SkipReason says whether an entry read from the local cluster is
// forwarded to remote: "" to forward, or the reason to skip (SkipMarker,
// SkipRemoteOrigin or SkipReplicateTo). Metadata only: what lies inside a
// batch is not looked at. Markers, which the pipe forwards only through
// the subscription sync, are skipped here.
func SkipReason(md *wire.Metadata, remote string) string {
	switch {
	case md.HasMarkerType:
		// Pulsar's own markers (transactions, replicated subscriptions);
		// a client subscription does not receive them, but be sure.
		return SkipMarker
	case md.ReplicatedFrom != "":
		// A copy: by this pipe, or by Pulsar's own replicator.
		return SkipRemoteOrigin
	case strings.HasPrefix(md.ProducerName, marker.MarkerProducers):
		return SkipMarker
	case !md.HasNumMessagesInBatch && hasProp(md, marker.Property):
		// A geo-sidecar marker (Marker); forwarded only through the
		// sync (entrypath.SyncFeed.MarkerAt).
		return SkipMarker
	case strings.HasPrefix(md.ProducerName, marker.SidecarProducers):
		return SkipRemoteOrigin
	case len(md.ReplicateTo) > 0 && !slices.Contains(md.ReplicateTo, remote):
		// Pulsar's replicate_to (replicationClusters, disableReplication).
		return SkipReplicateTo
	}
	return ""
}

// Marker recognises a geo-sidecar marker among the entries read: a
// single message whose metadata carries marker.Property, or any entry of
// a marker writer. body is the marker's encoded form, nil when the entry
// cannot hold one marker as written (a batch, compressed, encrypted: the
// writer sends each marker alone and plain). On a target, a copied marker
// is the sync's business, not a copy of data.
//
// A batch of another producer is never a marker, even when its metadata
// carries marker.Property: pulsar-client-go puts the first message's
// properties there, and the messages after it may be data.
func Marker(md *wire.Metadata, payload []byte) (body []byte, ok bool) {
	ours := strings.HasPrefix(md.ProducerName, marker.MarkerProducers)
	if !ours && (md.HasNumMessagesInBatch || !hasProp(md, marker.Property)) {
		return nil, false
	}
	if md.HasNumMessagesInBatch || md.Compression != 0 || md.Encrypted || md.HasChunk {
		return nil, true
	}
	if payload == nil {
		payload = []byte{}
	}
	return payload, true
}

func hasProp(md *wire.Metadata, key string) bool {
	_, ok := md.Property(key)
	return ok
}
