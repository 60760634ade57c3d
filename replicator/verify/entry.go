package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entrypath"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// What the comparison reads of an entry: its decision, its claim, and a
// digest of what a copy must keep.
//
// What a copy may change, and nothing else (the entry pipe's
// forwardMetadata): it appends replicated_from (MessageMetadata field 5),
// the target's number for the entry's schema (schema_version, field 16,
// appended after the source's), drops the source's transaction ids
// (fields 22 and 23), and appends the origin properties last
// (marker.OriginKeys). contentDigest leaves exactly those out, on both
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
	walkKept(md, cut, h)
	h.Write(payload)
	h.Sum(d[:0])
	return d, true
}

// walkKept writes md's kept fields to h (when not nil) and returns their
// length.
func walkKept(md []byte, cut []wire.Span, h hash.Hash) (int, bool) {
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
			if h != nil {
				h.Write(md[at : at+n])
			}
		}
		at += n
	}
	return kept, true
}

// SourceOf is what the comparison needs of e, an entry of the source
// partition, to judge copies on target to.
func SourceOf(e wire.Entry, to string) Source {
	s := Source{Pos: position(e.ID), Messages: e.NumMessages}
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		s.Skip = "malformed"
		return s
	}
	s.PublishTime = int64(md.PublishTime)
	if s.Skip = entrypath.Decide(&md, to); s.Skip != "" {
		return s
	}
	d, ok := contentDigest(e.Metadata, nil, e.Payload)
	if !ok {
		s.Skip = "malformed"
	}
	s.Digest = d
	return s
}

// TargetOf is what the comparison needs of e, an entry of the target
// partition topic (as named on both sides), judged as a copy from from on
// to: its claim, and whether its origin signature is valid under keys,
// bound to the partition, from, to and the bytes read.
func TargetOf(e wire.Entry, keys marker.Keys, topic, from, to string) Target {
	t := Target{Pos: position(e.ID)}
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		t.Claim = Unreadable
		return t
	}
	cluster, _ := md.Property(marker.PropOriginCluster)
	switch {
	case entrypath.IsMarker(&md, e.Payload):
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
	var spans [len(marker.OriginKeys)]wire.Span
	if wire.LastProperties(e.Metadata, marker.OriginKeys[:], spans[:]) != nil {
		t.Claim = Unreadable
		return t
	}
	if d, ok := contentDigest(e.Metadata, spans[:], e.Payload); ok {
		t.Digest = d
	} else {
		t.Claim = Unreadable
		return t
	}
	sig, _ := md.Property(marker.PropOriginSig)
	if t.OriginOK && !keys.IsZero() && strings.HasPrefix(sig, marker.OriginSigV2) {
		if d, ok := entrypath.CopyDigest(e.Metadata, e.Payload); ok {
			t.Signed = marker.VerifyOrigin(keys, topic, from, to, id, sig, &d)
		}
	}
	return t
}

func position(id wire.MessageID) marker.Position {
	return marker.Position{Ledger: int64(id.Ledger), Entry: int64(id.Entry), Batch: -1}
}
