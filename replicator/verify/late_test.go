package verify

import (
	"encoding/hex"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/batch"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// zstdBatch is a batched source entry of n messages, ZSTD-compressed.
func zstdBatch(t *testing.T, n int) wire.Entry {
	t.Helper()
	var raw []byte
	for i := range n {
		p := []byte(fmt.Sprintf("order %d", i))
		md := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), uint64(len(p)))
		raw = batch.Append(raw, md, p)
	}
	payload, err := batch.Compress(batch.ZSTD, raw)
	if err != nil {
		t.Fatal(err)
	}
	mb := wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 1_700_000_000_000, Compression: batch.ZSTD,
		UncompressedSize: uint32(len(raw)), NumMessagesInBatch: int32(n)}
	return wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: 9}, Metadata: mb.Append(nil), Payload: payload, NumMessages: int32(n)}
}

// lateBatch is failback's late copy of src, its messages flagged one by
// one (entryrule.LateCopy), signed under keys, naming content.
func lateBatch(t *testing.T, src wire.Entry, keys marker.Keys, content Digest) wire.Entry {
	t.Helper()
	md, err := wire.ParseMetadata(src.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	out, payload, rewritten, err := entryrule.LateCopy(keys, part, "east", "west", src, &md, nil, content[:])
	if err != nil || !rewritten {
		t.Fatalf("late copy: rewritten %v, %v", rewritten, err)
	}
	return wire.Entry{ID: wire.MessageID{Ledger: 78, Entry: 1}, Metadata: out, Payload: payload, NumMessages: src.NumMessages}
}

// TestLateBatch: a late copy whose payload was rewritten (every message
// flagged) is its source entry's copy by the content digest it names,
// when its signature proves that; not otherwise. In the comparison it
// holds its entry (the failback's second run finds nothing stranded),
// whether the source's content is hashed or held.
func TestLateBatch(t *testing.T) {
	src := zstdBatch(t, 10)
	want, ok := Content(src)
	if !ok || want != SourceOf(src, "west").Digest {
		t.Fatalf("Content %x, SourceOf's digest %x", want, SourceOf(src, "west").Digest)
	}
	other := zstdBatch(t, 9)
	otherContent, _ := Content(other)
	tampered := lateBatch(t, src, testKeys, want)
	tampered.Payload = append([]byte(nil), tampered.Payload...)
	tampered.Payload[len(tampered.Payload)/2] ^= 1
	// Rewritten with another property than the flag, naming its entry's
	// content and signed: its messages are not flagged, so its bytes are
	// compared (and differ). (Flagged on the entry only, its payload the
	// source's, as before the rewrite: its bytes are compared, and are
	// the entry's.)
	unflagged := func() wire.Entry {
		md, _ := wire.ParseMetadata(src.Metadata)
		payload, size, err := batch.Flag(md.Compression, src.Payload, md.UncompressedSize, int(md.NumMessagesInBatch), [2]string{"other", "true"})
		if err != nil {
			t.Fatal(err)
		}
		out, err := wire.PatchMetadata(nil, src.Metadata, wire.Patch{ReplicatedFrom: "east", UncompressedSize: &size, Properties: []wire.KeyValue{
			{Key: marker.PropReplayedLate, Value: "true"}, {Key: marker.PropLateContent, Value: hex.EncodeToString(want[:])}}})
		if err != nil {
			t.Fatal(err)
		}
		out = wire.AppendProperties(out, entryrule.OriginProps(testKeys, part, "east", "west", src.ID, out, payload)...)
		return wire.Entry{ID: wire.MessageID{Ledger: 78, Entry: 2}, Metadata: out, Payload: payload, NumMessages: src.NumMessages}
	}()
	for _, tc := range []struct {
		name       string
		copy       wire.Entry
		keys       marker.Keys
		wantSigned bool
		wantSame   bool
	}{
		{"signed", lateBatch(t, src, testKeys, want), testKeys, true, true},
		{"no key configured: taken at its word", lateBatch(t, src, testKeys, want), marker.Keys{}, false, true},
		{"signed under another key", lateBatch(t, src, marker.NewKeys([]byte("another key of at least 32 bytes!")), want), testKeys, false, false},
		{"naming another entry's content", lateBatch(t, src, testKeys, otherContent), testKeys, true, false},
		{"its payload changed after signing", tampered, testKeys, false, false},
		{"signed, naming its content, its messages not flagged", unflagged, testKeys, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, hold := range []bool{false, true} {
				got := targetOf(tc.copy, tc.keys, part, "east", "west", hold)
				if got.Claim != FromSource || got.Signed != tc.wantSigned {
					t.Fatalf("hold %v: claim %d signed %v, want FromSource, %v", hold, got.Claim, got.Signed, tc.wantSigned)
				}
				got.digest()
				if (got.Digest == want) != tc.wantSame {
					t.Errorf("hold %v: the same digest as the source's: %v, want %v", hold, got.Digest == want, tc.wantSame)
				}
				for _, kept := range []int{0, 1 << 20} {
					var notHeld []marker.Position
					c := New(Config{Window: 10, Deferred: 10, Authenticated: !tc.keys.IsZero(), FromEarliest: true, KeptBytes: kept,
						NotHeld: func(l Left) { notHeld = append(notHeld, l.Pos) }})
					c.AddSource(sourceOf(src, "west", kept > 0))
					c.AddTarget(targetOf(tc.copy, tc.keys, part, "east", "west", hold))
					r := c.Finish()
					if held := len(notHeld) == 0; held != (tc.wantSame && (tc.wantSigned || tc.keys.IsZero())) {
						t.Errorf("hold %v, kept %d: held %v (%s)", hold, kept, held, brief(r))
					}
				}
			}
		})
	}
}

// TestSealedNamed: an encrypted batch is named as such to Config.NotHeld
// (the failback refuses to replay it: its messages cannot be flagged).
func TestSealedNamed(t *testing.T) {
	plain := zstdBatch(t, 3)
	sealed := plain
	sealed.ID.Entry = 10
	sealed.Metadata = protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), plain.Metadata...), 13, protowire.BytesType), []byte{10, 1, 'k', 18, 1, 'v'})
	single := wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: 11}, Metadata: protowire.AppendBytes(protowire.AppendTag(
		(wire.MetadataBuilder{ProducerName: "app", PublishTime: 1}).Append(nil), 13, protowire.BytesType), []byte{10, 1, 'k', 18, 1, 'v'}), Payload: []byte("x")}
	var got []bool
	c := New(Config{Window: 10, Deferred: 10, FromEarliest: true, NotHeld: func(l Left) { got = append(got, l.Sealed) }})
	for _, e := range []wire.Entry{plain, sealed, single} {
		c.AddSource(SourceOf(e, "west"))
	}
	c.Finish()
	if fmt.Sprint(got) != "[false true false]" {
		t.Errorf("sealed %v, want [false true false] (a batch, an encrypted batch, an encrypted single message)", got)
	}
}
