package marker

// The on-topic contract of a copy, beside the markers': the properties the
// entry path appends to each entry it forwards, their signature, and the
// producer names geo-sidecar writes under. Whoever reads a replicated
// topic (the entry path, the subscription sync, the broker's entry filter
// in deploy/entryfilter, an application) finds these names there; they
// are defined here once.
//
// What a signature must bind. The origin properties of a copy that is a
// single message are message properties: anyone who can read the copy
// can read them, and anyone who can produce to a cluster can write them
// on an entry of their own. A signature over the partition, the origin
// cluster and the position alone (version 1) let such a producer
// transplant a copy's origin from one target onto other content on
// another target, and a pair take those entries for its own copies and
// never send the real ones. So version 2 also signs the target cluster
// and a digest of the entry as forwarded, and a copy counts only where the
// reader can recompute that digest from the bytes it read.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strings"
)

// The origin properties the entry path appends to each entry it
// forwards. They keep topologies loop-free and let the read-back
// recognise the copies: replicated_from already stops a copy from being
// forwarded again, and these say from which entry it was made.
const (
	// PropOriginCluster names the cluster where the entry was produced.
	PropOriginCluster = "geo-sidecar.origin-cluster"
	// PropOriginID is the entry's position in the origin partition,
	// "ledger:entry:-1".
	PropOriginID = "geo-sidecar.origin-id"
)

// PropOriginSig, on an entry the entry path forwarded, signs its origin:
// "v2." and the hex of the first 16 bytes of HMAC-SHA256 under the marker
// key (see [OriginSig]). The entry path keeps the origin's producer name,
// so the name proves nothing there; the signature does, and no producer
// without the key can forge it. A value without the "v2." prefix (version
// 1) proves nothing.
const PropOriginSig = "geo-sidecar.origin-sig"

// PropReplayedLate, "true" on a copy geo-sidecar failback made of an
// entry stranded on a cluster that went down (copied to the target late,
// after the failover, with --replay, or to a topic aside with --park),
// so that applications can tell it from the copies made in time. It sits
// before the origin properties, so the origin signature covers it, and
// verify leaves it out of the bytes it compares (a late copy is the
// entry's copy all the same). On a batch, whose messages consumers see
// with their own properties (SingleMessageMetadata) and not the entry's,
// it is also on every message: the late copy's payload is rewritten
// (replicator/batch), and carries PropLateContent.
const PropReplayedLate = "geo-sidecar.replayed-late"

// PropLateContent, on a late copy of a batch whose messages were flagged
// one by one (see PropReplayedLate), is the hex of the digest verify
// compares of the source entry (its content as the copy must keep it,
// payload as the source stored it): the copy's payload is no longer the
// source's bytes, so verify compares this instead, which the origin
// signature covers (it sits before the origin properties).
const PropLateContent = "geo-sidecar.late-content"

// PropParkedFrom, on a copy geo-sidecar failback parked in a topic aside
// (--park), names the partition the entry was stranded on; the origin
// properties name its position there.
const PropParkedFrom = "geo-sidecar.parked-from"

// OriginSigV2 starts a version 2 signature's value.
const OriginSigV2 = "v2."

// OriginKeys are the properties a copy's origin is made of, in the order
// the entry path appends them; the digest of a copy read back leaves the
// last of each out ([OriginDigest]).
var OriginKeys = [...]string{PropOriginCluster, PropOriginID, PropOriginSig}

// SidecarProducers is the prefix of every producer name geo-sidecar
// writes under: markers ([MarkerProducers]), and the copies of the message
// path of earlier versions ([ProducerName]), which may still sit in a
// backlog. An entry written under it is never forwarded; applications
// must not use the prefix. deploy/entryfilter's default subscription
// prefix is the same string.
const SidecarProducers = "geo-sidecar."

// MarkerProducers is the prefix of the marker writers' producer names
// ([MarkerProducerName]); the broker's entry filter recognises markers by
// it.
const MarkerProducers = SidecarProducers + "markers."

// pairName names the direction local to remote in producer names.
func pairName(local, remote string) string { return local + "-->" + remote }

// ProducerName is the producer name the entry path copies local's entries
// to remote under ("geo-sidecar.<local>--><remote>"), in its first epoch.
func ProducerName(local, remote string) string { return SidecarProducers + pairName(local, remote) }

// MarkerProducerName is the producer name of local's marker writer for
// remote ("geo-sidecar.markers.<local>--><remote>").
func MarkerProducerName(local, remote string) string {
	return MarkerProducers + pairName(local, remote)
}

// Origin is what an entry read on a partition says of where it was copied
// from, as its reader judged it.
type Origin struct {
	Cluster string   // "" for an entry that is not a copy
	At      Position // its position there
	// Signed: the origin carries a valid version 2 signature for this
	// partition and reader under the marker key ([VerifyOrigin]).
	Signed bool
}

// OriginDigest is what a version 2 signature says of the entry's content:
// SHA-256 over the length of md (8 bytes, big-endian), md, and payload,
// where md is the metadata as forwarded minus the origin properties. The
// length keeps metadata and payload apart (bytes moved from one to the
// other change the digest).
//
// Why over bytes, not over decoded fields: the target's broker stores and
// dispatches the metadata the pipe sent byte for byte, so the reader finds
// the same bytes with the origin properties in them (the last of their
// keys, appended after everything else, which the reader cuts out).
// Decoded fields would have to be listed, and each field left out of the
// list (a key, a property, an event time, one added to Pulsar later)
// could be changed under a valid signature; the bytes cover them all, the
// payload's compression and encryption included, for one SHA-256 pass and
// no re-encoding.
func OriginDigest(md, payload []byte) [sha256.Size]byte { return CopyDigest(md, nil, payload) }

// CopyDigest is [OriginDigest] of a copy read back (metadata as the
// broker dispatches it), with cut, the byte ranges [start, end) of md
// that hold its origin properties, left out first. The ranges come in no
// particular order and never overlap; one with end 0 is no range.
func CopyDigest(md []byte, cut [][2]int, payload []byte) [sha256.Size]byte {
	n := len(md)
	for _, s := range cut {
		n -= s[1] - s[0]
	}
	h := sha256.New()
	writeLen(h, n)
	at := 0
	for at < len(md) {
		next := -1
		for i, s := range cut {
			if s[1] > 0 && s[0] >= at && (next < 0 || s[0] < cut[next][0]) {
				next = i
			}
		}
		if next < 0 {
			h.Write(md[at:])
			break
		}
		h.Write(md[at:cut[next][0]])
		at = cut[next][1]
	}
	h.Write(payload)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

func writeLen(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

// OriginSig signs a copy's origin (version 2) under key: the partition,
// the origin cluster, the target cluster the copy is written to, the
// origin position ([PropOriginID]) and the digest of the entry as
// forwarded ([OriginDigest]). Each string is length-prefixed, so no two
// different tuples sign the same bytes. The MAC is the markers' own
// (HMAC-SHA256 cut to [TagLen] bytes), over a domain string of its own.
func OriginSig(key []byte, topic, origin, target, id string, digest *[sha256.Size]byte) string {
	body := []byte("geo-sidecar origin v2")
	for _, s := range [...]string{topic, origin, target, id} {
		body = binary.AppendUvarint(body, uint64(len(s)))
		body = append(body, s...)
	}
	body = append(body, digest[:]...)
	return OriginSigV2 + hex.EncodeToString(tag(body, key))
}

// VerifyOrigin reports whether sig is a version 2 signature of the origin
// under any key keys accept. digest must have been computed from the
// bytes read; without it (nil) nothing verifies.
func VerifyOrigin(keys Keys, topic, origin, target, id, sig string, digest *[sha256.Size]byte) bool {
	if digest == nil || !strings.HasPrefix(sig, OriginSigV2) {
		return false
	}
	for _, key := range keys.Accepted() {
		if hmac.Equal([]byte(sig), []byte(OriginSig(key, topic, origin, target, id, digest))) {
			return true
		}
	}
	return false
}
