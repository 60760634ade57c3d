package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/batch"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// What the comparison reads of an entry: its decision, its claim, and a
// digest of what a copy must keep.
//
// What a copy may change, and nothing else (the entry pipe's
// forwardMetadata, with entryrule.OriginProps): it appends replicated_from (MessageMetadata field 5),
// the target's number for the entry's schema (schema_version, field 16,
// appended after the source's), drops the source's transaction ids
// (fields 22 and 23), and appends the origin properties last
// (marker.OriginKeys); a late copy (geo-sidecar failback) appends its
// flags before them (entryrule.LateKeys). contentDigest leaves exactly those out, on both
// sides, and covers every other byte of metadata and payload, so a field
// added to Pulsar later is compared without being listed. The schema
// number is the target's own and differs by design: the origin signature,
// which covers the bytes as forwarded, vouches for it.

// Metadata fields a copy may change (see above).
const (
	fieldReplicatedFrom = 5
	fieldSchemaVersion  = 16
	fieldTxnLeast       = 22
	fieldTxnMost        = 23
)

// contentDigest is SHA-256 over the length of md's kept bytes (8 bytes,
// big-endian), those bytes, and payload. Kept: every top-level field of
// md except the ones a copy may change and, with cut, the spans in cut
// (the copy's origin properties). ok is false when md is not well-formed
// protobuf at the top level.
func contentDigest(md []byte, cut []wire.Span, payload []byte) (d Digest, ok bool) {
	n, ok := walkKept(md, cut, nil)
	if !ok {
		return d, false
	}
	h := sha256.New()
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(n))
	h.Write(l[:])
	walkKept(md, cut, func(b []byte) { h.Write(b) })
	h.Write(payload)
	h.Sum(d[:0])
	return d, true
}

// appendKept appends to dst exactly what contentDigest hashes (so that
// sha256.Sum256 of what it appended is the digest): the comparison of a
// continuous verifier holds a source entry's content this way for a
// while, so that its copy is compared byte for byte (keptEqual) instead
// of both being hashed.
func appendKept(dst, md []byte, cut []wire.Span, payload []byte) ([]byte, bool) {
	n, ok := walkKept(md, cut, nil)
	if !ok {
		return dst, false
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	walkKept(md, cut, func(b []byte) { dst = append(dst, b...) })
	return append(dst, payload...), true
}

// keptEqual reports whether kept (appendKept's) is what appendKept makes
// of md, cut and payload, without making it.
func keptEqual(kept, md []byte, cut []wire.Span, payload []byte) bool {
	n, ok := walkKept(md, cut, nil)
	if !ok || len(kept) < 8 || binary.BigEndian.Uint64(kept) != uint64(n) {
		return false
	}
	at, eq := 8, true
	walkKept(md, cut, func(b []byte) {
		eq = eq && at+len(b) <= len(kept) && bytes.Equal(kept[at:at+len(b)], b)
		at += len(b)
	})
	return eq && at <= len(kept) && bytes.Equal(kept[at:], payload)
}

// walkKept passes md's kept fields to w (when not nil), in order, and
// returns their length.
func walkKept(md []byte, cut []wire.Span, w func([]byte)) (int, bool) {
	kept, at := 0, 0
	for at < len(md) {
		num, _, n := protowire.ConsumeField(md[at:])
		if n < 0 {
			return 0, false
		}
		keep := true
		switch num {
		case fieldReplicatedFrom, fieldSchemaVersion, fieldTxnLeast, fieldTxnMost:
			keep = false
		}
		for _, s := range cut {
			if s.End > 0 && s.Start == at {
				keep = false
			}
		}
		if keep {
			kept += n
			if w != nil {
				w(md[at : at+n])
			}
		}
		at += n
	}
	return kept, true
}

// SourceOf is what the comparison needs of e, an entry of the source
// partition, to judge copies on target to.
func SourceOf(e wire.Entry, to string) Source { return sourceOf(e, to, false) }

// sourceOf is SourceOf; with hold, the entry's content is copied (into a
// pooled buffer the comparison owns from then on) instead of hashed: see
// Config.KeptBytes.
func sourceOf(e wire.Entry, to string, hold bool) Source {
	s := Source{Pos: position(e.ID), Messages: e.NumMessages}
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		s.Skip = "malformed"
		return s
	}
	s.PublishTime = int64(md.PublishTime)
	s.Sealed = md.Encrypted && md.HasNumMessagesInBatch && !md.HasChunk
	if s.Skip = entryrule.SkipReason(&md, to); s.Skip != "" {
		return s
	}
	if hold {
		kept, ok := appendKept(getKept(len(e.Metadata)+len(e.Payload)+8), e.Metadata, nil, e.Payload)
		if !ok {
			putKept(kept)
			s.Skip = "malformed"
			return s
		}
		s.kept = kept
		return s
	}
	d, ok := contentDigest(e.Metadata, nil, e.Payload)
	if !ok {
		s.Skip = "malformed"
	}
	s.Digest = d
	return s
}

// keptPool recycles the buffers of sources' held content.
var keptPool sync.Pool

func getKept(n int) []byte {
	if b, ok := keptPool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return make([]byte, 0, n)
}

func putKept(b []byte) {
	if cap(b) > 0 {
		keptPool.Put(&b)
	}
}

// TargetOf is what the comparison needs of e, an entry of the target
// partition topic (as named on both sides), judged as a copy from from on
// to: its claim, and whether its origin signature is valid under keys,
// bound to the partition, from, to and the bytes read.
func TargetOf(e wire.Entry, keys marker.Keys, topic, from, to string) Target {
	return targetOf(e, keys, topic, from, to, false)
}

// targetOf is TargetOf; with hold, the content is not hashed: the Target
// refers to e's bytes, and must be fed to the comparison (AddTarget)
// before e is released.
func targetOf(e wire.Entry, keys marker.Keys, topic, from, to string, hold bool) Target {
	t := Target{Pos: position(e.ID)}
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		t.Claim = Unreadable
		return t
	}
	cluster, _ := md.Property(marker.PropOriginCluster)
	_, isMarker := entryrule.Marker(&md, e.Payload)
	switch {
	case isMarker:
		t.Claim = MarkerCopy
		return t
	case cluster == "" && md.ReplicatedFrom == "":
		t.Claim = Local
		return t
	case cluster == "" && md.ReplicatedFrom != from:
		t.Claim = OtherOrigin
		return t
	case cluster == "":
		// replicated_from names the source, but no origin: Pulsar's own
		// replicator, or a copy stripped of its origin. Nothing says which
		// entry it copies.
		t.Claim = FromSource
		return t
	case cluster != from:
		t.Claim = OtherOrigin
		return t
	}
	t.Claim = FromSource
	id, _ := md.Property(marker.PropOriginID)
	t.Origin, t.OriginOK = marker.ParsePosition(id)
	var spans [len(copyKeys)]wire.Span
	if wire.LastProperties(e.Metadata, copyKeys[:], spans[:]) != nil {
		t.Claim = Unreadable
		return t
	}
	if late, ok := md.Property(marker.PropLateContent); ok {
		// A late copy of a batch whose messages were flagged one by one
		// (entryrule.LateCopy): its payload is not the source's bytes; it
		// names the digest of the source's content, under its origin
		// signature. Taken when the signature proves it (or no key is
		// configured, every origin taken at its word); else the copy's
		// own bytes are compared, which differ.
		var d Digest
		if n, err := hex.Decode(d[:], []byte(late)); err == nil && n == len(d) && t.OriginOK && flaggedBatch(&md, e.Payload) {
			if keys.IsZero() {
				t.Digest = d
				return t
			}
			if t.Signed = signed(e, &md, keys, topic, from, to, id); t.Signed {
				t.Digest = d
				return t
			}
		}
	}
	if hold {
		if _, ok := walkKept(e.Metadata, spans[:], nil); !ok {
			t.Claim = Unreadable
			return t
		}
		t.held = &heldTarget{md: e.Metadata, cut: spans, payload: e.Payload}
	} else if d, ok := contentDigest(e.Metadata, spans[:], e.Payload); ok {
		t.Digest = d
	} else {
		t.Claim = Unreadable
		return t
	}
	if t.OriginOK && !keys.IsZero() {
		t.Signed = signed(e, &md, keys, topic, from, to, id)
	}
	return t
}

// flaggedBatch reports whether payload, a late copy's (md its metadata),
// is the batch its metadata says, every message of it flagged
// marker.PropReplayedLate=true: what the rewrite is for (a copy naming
// its entry's content digest is judged by it, not by its bytes; this is
// what of its bytes can be checked without the source's).
func flaggedBatch(md *wire.Metadata, payload []byte) bool {
	if !md.HasNumMessagesInBatch || md.Encrypted {
		return false
	}
	raw, err := batch.Decompress(md.Compression, payload, md.UncompressedSize)
	if err != nil {
		return false
	}
	msgs, err := batch.Split(raw, int(md.NumMessagesInBatch))
	if err != nil {
		return false
	}
	for _, m := range msgs {
		props, _ := batch.Properties(m.Metadata) // Split checked them
		if !slices.Contains(props, [2]string{marker.PropReplayedLate, "true"}) {
			return false
		}
	}
	return true
}

// signed reports whether e's origin (id) carries a valid version 2
// signature under keys, for topic, from and to, over the bytes read.
func signed(e wire.Entry, md *wire.Metadata, keys marker.Keys, topic, from, to, id string) bool {
	sig, _ := md.Property(marker.PropOriginSig)
	if !strings.HasPrefix(sig, marker.OriginSigV2) {
		return false
	}
	d, ok := entryrule.CopyDigest(e.Metadata, e.Payload)
	return ok && marker.VerifyOrigin(keys, topic, from, to, id, sig, &d)
}

// Content is the digest verify compares of e, an entry of the source,
// with its copies (what a copy must keep of it: see contentDigest); ok is
// false when its metadata is not well-formed. A late copy whose payload
// was rewritten names it (marker.PropLateContent).
func Content(e wire.Entry) (d Digest, ok bool) { return contentDigest(e.Metadata, nil, e.Payload) }

// copyKeys are the properties a copy adds that the comparison leaves
// out: its origin, and a late copy's flags (entryrule.LateMetadata).
var copyKeys = [...]string{marker.OriginKeys[0], marker.OriginKeys[1], marker.OriginKeys[2],
	entryrule.LateKeys[0], entryrule.LateKeys[1], entryrule.LateKeys[2]}

// fpSeed keys the fingerprints of content let go (fingerprint): random
// per process, so that content made to collide with another's cannot be
// written without it.
var fpSeed = maphash.MakeSeed()

// fingerprint is a 64-bit keyed hash (hash/maphash, about six times
// faster than SHA-256 here) of what appendKept makes of md, cut and
// payload: what the comparison keeps of a source entry whose copy was
// compared byte for byte once its content is let go, so that a later copy
// is still told apart as the same bytes or other bytes.
func fingerprint(md []byte, cut []wire.Span, payload []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(fpSeed)
	n, _ := walkKept(md, cut, nil)
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(n))
	h.Write(l[:])
	walkKept(md, cut, func(b []byte) { h.Write(b) })
	h.Write(payload)
	return h.Sum64()
}

// heldTarget is a target entry's bytes, while it is fed to the
// comparison (targetOf with hold).
type heldTarget struct {
	md      []byte
	cut     [len(copyKeys)]wire.Span
	payload []byte
}

// digest hashes a held target's content into t.Digest (and its
// fingerprint) and lets go of its bytes: a claim kept beyond the call
// that fed it.
func (t *Target) digest() {
	if t.held == nil {
		return
	}
	h := t.held
	t.Digest, _ = contentDigest(h.md, h.cut[:], h.payload) // walkKept passed in targetOf
	t.fp, t.hasFP = fingerprint(h.md, h.cut[:], h.payload), true
	t.held = nil
}

func position(id wire.MessageID) marker.Position {
	return marker.Position{Ledger: int64(id.Ledger), Entry: int64(id.Entry), Batch: -1}
}
