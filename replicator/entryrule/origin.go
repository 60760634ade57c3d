package entryrule

import (
	"crypto/sha256"
	"strconv"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The entries' side of the copies' signed origins (the contract itself,
// names and signature, is marker's: marker/origin.go): what a forwarded
// entry carries (OriginProps), and the checks where such signatures are
// taken as proof: the pipe's read-back (which entries are on the target
// already, so they are not sent again), the snapshot machine (which
// copied markers and data count) and verify (which copy is proven).

// Origin returns where an entry read on the local partition was copied
// from: the cluster and position its origin properties name
// (replicated_from alone for a copy without them), signed when they
// carry a valid version 2 signature under keys for this partition, with
// this (local) cluster as the target and the digest of the entry's bytes
// (md parsed from e.Metadata). Only a signed origin counts for the
// snapshot machine: what a producer without the key can write, or
// transplant from a copy it can read, must not steer where a
// subscription moves.
func Origin(md *wire.Metadata, e wire.Entry, keys marker.Keys, topic, local string) marker.Origin {
	cluster, _ := md.Property(marker.PropOriginCluster)
	if cluster == "" {
		return marker.Origin{Cluster: md.ReplicatedFrom}
	}
	id, _ := md.Property(marker.PropOriginID)
	sig, _ := md.Property(marker.PropOriginSig)
	at, ok := marker.ParsePosition(id)
	signed := false
	if ok && !keys.IsZero() && strings.HasPrefix(sig, marker.OriginSigV2) {
		if d, dok := CopyDigest(e.Metadata, e.Payload); dok {
			signed = marker.VerifyOrigin(keys, topic, cluster, local, id, sig, &d)
		}
	}
	return marker.Origin{Cluster: cluster, At: at, Signed: signed}
}

// CopyDigest is marker.OriginDigest of an entry read back (metadata as
// the broker dispatches it): the digest a copy's origin signature
// covers, with the last property of each origin key cut out of md first.
// ok is false when md does not parse that far.
func CopyDigest(md, payload []byte) (d [sha256.Size]byte, ok bool) {
	var spans [len(marker.OriginKeys)]wire.Span
	if wire.LastProperties(md, marker.OriginKeys[:], spans[:]) != nil {
		return d, false
	}
	var cut [len(spans)][2]int
	for i, s := range spans {
		cut[i] = [2]int{s.Start, s.End}
	}
	return marker.CopyDigest(md, cut[:], payload), true
}

// OriginProps are the entry-level properties a copy of the entry at id
// carries to target: where it came from, signed (marker.PropOriginSig)
// when keys hold a key. md is the copy's metadata as forwarded so far
// (everything but these properties, which the caller appends after it)
// and payload its payload. On a batch they are batch-level, which
// consumers do not see; on a single message they are its properties.
func OriginProps(keys marker.Keys, topic, local, target string, id wire.MessageID, md, payload []byte) []wire.KeyValue {
	oid := strconv.FormatUint(id.Ledger, 10) + ":" + strconv.FormatUint(id.Entry, 10) + ":-1"
	props := []wire.KeyValue{{Key: marker.PropOriginCluster, Value: local}, {Key: marker.PropOriginID, Value: oid}}
	if !keys.IsZero() {
		d := marker.OriginDigest(md, payload)
		props = append(props, wire.KeyValue{Key: marker.PropOriginSig, Value: marker.OriginSig(keys.Current(), topic, local, target, oid, &d)})
	}
	return props
}
