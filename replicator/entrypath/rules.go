package entrypath

import (
	"crypto/sha256"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The entry pipe's rules as others read them: geo-sidecar verify
// (replicator/verify) judges a copy by the same decisions the pipe takes,
// so that what it expects on the target cannot drift from what the pipe
// sends. Thin wrappers; the rules themselves stay beside the pipe.

// Decide is decideEntry: "" when the pipe forwards an entry with metadata
// md to remote, else the reason it skips it (a bounded label value).
// Markers, which the pipe forwards only through the subscription sync,
// are skipped here.
func Decide(md *wire.Metadata, remote string) string { return decideEntry(md, remote) }

// IsMarker reports whether an entry is a geo-sidecar marker (markerEntry):
// on a target, a copied marker is the sync's business, not a copy of data.
func IsMarker(md *wire.Metadata, payload []byte) bool {
	_, ok := markerEntry(md, payload)
	return ok
}

// CopyDigest is the digest a copy's origin signature covers (copyDigest),
// computed from the bytes of an entry read back; ok is false when the
// metadata does not parse that far.
func CopyDigest(md, payload []byte) (d [sha256.Size]byte, ok bool) { return copyDigest(md, payload) }
