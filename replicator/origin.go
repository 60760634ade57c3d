package replicator

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// This file signs the origin of each entry the entry pipe forwards and
// checks such signatures where they are taken as proof: the read-back
// (which entries are on the target already, so they are not sent again)
// and the snapshot machine (which copied markers and data count).
//
// What a signature must bind. The origin properties of a copy that is a
// single message are message properties: anyone who can read the copy
// can read them, and anyone who can produce to a cluster can write them
// on an entry of their own. A signature over the partition, the origin
// cluster and the position alone (version 1) let such a producer
// transplant a copy's origin from one target onto other content on
// another target (issue 20: while east->west was stopped, north's copies
// of 100 east messages were republished on west with other payloads, and
// east->west, resuming, took them for its copies: 100 of 100 messages
// never reached west). So version 2 also signs the target cluster and a
// digest of the entry as forwarded, and a copy counts only where the
// reader can recompute that digest from the bytes it read.

// The origin properties the entry pipe appends to each entry it forwards
// (originProps). They keep topologies loop-free and let the read-back
// recognise the copies: replicated_from already stops a copy from being
// forwarded again, and these say from which entry it was made.
const (
	// PropOriginCluster names the cluster where the entry was produced.
	PropOriginCluster = "geo-sidecar.origin-cluster"
	// PropOriginID is the entry's position in the origin partition,
	// "ledger:entry:-1".
	PropOriginID = "geo-sidecar.origin-id"
)

// PropOriginSig, on an entry the entry pipe forwarded, signs its origin:
// "v2." and the hex of the first 16 bytes of HMAC-SHA256 under the marker
// key (see originSig). The entry pipe keeps the origin's producer name, so
// the name proves nothing there; the signature does, and no producer
// without the key can forge it. A value without the "v2." prefix (version
// 1, before issue 20) proves nothing.
const PropOriginSig = "geo-sidecar.origin-sig"

// originSigV2 starts a version 2 signature's value.
const originSigV2 = "v2."

// originKeys are the properties a copy's origin is made of, in the order
// the entry pipe appends them; the digest leaves the last of each out.
var originKeys = [...]string{PropOriginCluster, PropOriginID, PropOriginSig}

// originDigest is what a version 2 signature says of the entry's content:
// SHA-256 over the length of md (8 bytes, big-endian), md, and payload,
// where md is the metadata as forwarded minus the origin properties. The
// length keeps metadata and payload apart (bytes moved from one to the
// other change the digest).
//
// Why over bytes, not over decoded fields: the target's broker stores and
// dispatches the metadata the pipe sent byte for byte, so the reader finds
// the same bytes with the origin properties in them (copyDigest cuts
// them out: they are the last of their keys, appended after everything
// else). Decoded fields would have to be listed, and each field left out
// of the list (a key, a property, an event time, one added to Pulsar
// later) could be changed under a valid signature; the bytes cover them
// all, the payload's compression and encryption included, for one
// SHA-256 pass and no re-encoding.
func originDigest(md, payload []byte) [sha256.Size]byte {
	h := sha256.New()
	writeLen(h, len(md))
	h.Write(md)
	h.Write(payload)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// copyDigest is originDigest of an entry read back (metadata as the
// broker dispatches it): the last property of each origin key is cut out
// of md first. ok is false when md does not parse that far.
func copyDigest(md, payload []byte) (d [sha256.Size]byte, ok bool) {
	var spans [len(originKeys)]wire.Span
	if wire.LastProperties(md, originKeys[:], spans[:]) != nil {
		return d, false
	}
	// Cut in order of position; the spans never overlap.
	n := len(md)
	for _, s := range spans {
		n -= s.End - s.Start
	}
	h := sha256.New()
	writeLen(h, n)
	at := 0
	for at < len(md) {
		next := -1
		for i, s := range spans {
			if s.End > 0 && s.Start >= at && (next < 0 || s.Start < spans[next].Start) {
				next = i
			}
		}
		if next < 0 {
			h.Write(md[at:])
			break
		}
		h.Write(md[at:spans[next].Start])
		at = spans[next].End
	}
	h.Write(payload)
	h.Sum(d[:0])
	return d, true
}

func writeLen(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

// originSig signs a copy's origin (version 2) under key: the partition,
// the origin cluster, the target cluster the copy is written to, the
// origin position (PropOriginID) and the digest of the entry as
// forwarded (originDigest). Each string is length-prefixed, so no two
// different tuples sign the same bytes.
func originSig(key []byte, topic, origin, target, id string, digest *[sha256.Size]byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("geo-sidecar origin v2"))
	for _, s := range [...]string{topic, origin, target, id} {
		var b [binary.MaxVarintLen64]byte
		m.Write(b[:binary.PutUvarint(b[:], uint64(len(s)))])
		m.Write([]byte(s))
	}
	m.Write(digest[:])
	var sum [sha256.Size]byte
	return originSigV2 + hex.EncodeToString(m.Sum(sum[:0])[:16])
}

// verifyOrigin reports whether sig is a version 2 signature of the origin
// under any key keys accept. digest must have been computed from the
// bytes read (copyDigest); without it (nil) nothing verifies.
func verifyOrigin(keys marker.Keys, topic, origin, target, id, sig string, digest *[sha256.Size]byte) bool {
	if digest == nil || !strings.HasPrefix(sig, originSigV2) {
		return false
	}
	for _, key := range keys.Accepted() {
		if hmac.Equal([]byte(sig), []byte(originSig(key, topic, origin, target, id, digest))) {
			return true
		}
	}
	return false
}

// originProps are the entry-level properties a copy of the entry at id
// carries to target: where it came from, signed (PropOriginSig) when keys
// hold a key. md is the copy's metadata as forwarded so far (everything
// but these properties, which the caller appends after it) and payload
// its payload. On a batch they are batch-level, which consumers do not
// see; on a single message they are its properties.
func originProps(keys marker.Keys, topic, local, target string, id wire.MessageID, md, payload []byte) []wire.KeyValue {
	oid := strconv.FormatUint(id.Ledger, 10) + ":" + strconv.FormatUint(id.Entry, 10) + ":-1"
	props := []wire.KeyValue{{Key: PropOriginCluster, Value: local}, {Key: PropOriginID, Value: oid}}
	if !keys.IsZero() {
		d := originDigest(md, payload)
		props = append(props, wire.KeyValue{Key: PropOriginSig, Value: originSig(keys.Current(), topic, local, target, oid, &d)})
	}
	return props
}

// bySignature accepts the entries whose one origin carries a valid
// version 2 signature for this partition and target under keys, checked
// against the digest of the bytes read (the entry pipe's copies, read
// back over the binary protocol). Without a key, or for an origin read
// where the bytes are not at hand (the admin API), nothing is accepted:
// such an entry is sent again (duplicates, never loss).
func bySignature(keys marker.Keys, topic, target string) func(entryCopy) bool {
	return func(e entryCopy) bool {
		if keys.IsZero() || len(e.origins) != 1 || !e.origins[0].ok {
			return false
		}
		o := e.origins[0]
		return verifyOrigin(keys, topic, o.cluster, target, o.pos.String(), o.sig, o.digest)
	}
}
