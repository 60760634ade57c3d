package entrypath

import (
	"crypto/sha256"
	"strconv"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The entry path's side of the copies' signed origins (the contract
// itself, names and signature, is marker's: marker/origin.go): what a
// forwarded entry carries, and the checks where such signatures are taken
// as proof: the read-back (which entries are on the target already, so
// they are not sent again) and the snapshot machine (which copied markers
// and data count).

// copyDigest is marker.OriginDigest of an entry read back (metadata as
// the broker dispatches it): the last property of each origin key is cut
// out of md first. ok is false when md does not parse that far.
func copyDigest(md, payload []byte) (d [sha256.Size]byte, ok bool) {
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

// originProps are the entry-level properties a copy of the entry at id
// carries to target: where it came from, signed (marker.PropOriginSig) when keys
// hold a key. md is the copy's metadata as forwarded so far (everything
// but these properties, which the caller appends after it) and payload
// its payload. On a batch they are batch-level, which consumers do not
// see; on a single message they are its properties.
func originProps(keys marker.Keys, topic, local, target string, id wire.MessageID, md, payload []byte) []wire.KeyValue {
	oid := strconv.FormatUint(id.Ledger, 10) + ":" + strconv.FormatUint(id.Entry, 10) + ":-1"
	props := []wire.KeyValue{{Key: marker.PropOriginCluster, Value: local}, {Key: marker.PropOriginID, Value: oid}}
	if !keys.IsZero() {
		d := marker.OriginDigest(md, payload)
		props = append(props, wire.KeyValue{Key: marker.PropOriginSig, Value: marker.OriginSig(keys.Current(), topic, local, target, oid, &d)})
	}
	return props
}
