package verify

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

const part = "persistent://t/ns/orders-partition-0"

var testKeys = marker.NewKeys([]byte("0123456789abcdef0123456789abcdef"))

// forward makes the copy of e the entry pipe sends from east to west
// (entrypath's forwardMetadata, entryrule.OriginProps): replicated_from, the
// transaction dropped, the target's schema version when schema is set,
// then the origin, signed with keys for topic.
func forward(t testing.TB, e wire.Entry, keys marker.Keys, topic string, schema []byte) wire.Entry {
	t.Helper()
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := wire.PatchMetadata(nil, e.Metadata, wire.Patch{ReplicatedFrom: "east", DropTxn: md.HasTxnID, SchemaVersion: schema})
	if err != nil {
		t.Fatal(err)
	}
	id := position(e.ID).String()
	d := marker.OriginDigest(patched, e.Payload)
	out := wire.AppendProperties(patched,
		wire.KeyValue{Key: marker.PropOriginCluster, Value: "east"},
		wire.KeyValue{Key: marker.PropOriginID, Value: id},
		wire.KeyValue{Key: marker.PropOriginSig, Value: marker.OriginSig(keys.Current(), topic, "east", "west", id, &d)})
	return wire.Entry{ID: wire.MessageID{Ledger: 77, Entry: e.ID.Entry}, Metadata: out, Payload: e.Payload, NumMessages: e.NumMessages}
}

// late makes the late copy geo-sidecar failback sends from east to west
// (entryrule.LateMetadata), under the target's schema version schema
// when set.
func late(t testing.TB, e wire.Entry, keys marker.Keys, topic string, schema []byte, extra ...wire.KeyValue) wire.Entry {
	t.Helper()
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	out, err := entryrule.LateMetadata(keys, topic, "east", "west", e, &md, schema, extra...)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := wire.ParseMetadata(out); !slices.Contains(m.Properties, wire.KeyValue{Key: marker.PropReplayedLate, Value: "true"}) {
		t.Fatalf("a late copy without %s: %v", marker.PropReplayedLate, m.Properties)
	}
	return wire.Entry{ID: wire.MessageID{Ledger: 78, Entry: e.ID.Entry}, Metadata: out, Payload: e.Payload, NumMessages: e.NumMessages}
}

func sourceEntry(mb wire.MetadataBuilder, payload string) wire.Entry {
	return wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: 9}, Metadata: mb.Append(nil), Payload: []byte(payload), NumMessages: 1}
}

func TestEntries(t *testing.T) {
	plain := wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 1_700_000_000_000,
		Properties: []wire.KeyValue{{Key: "k", Value: "v"}}, PartitionKey: "key"}
	txn := plain
	txn.TxnIDLeastBits, txn.TxnIDMostBits = 7, 8
	batch := plain
	batch.NumMessagesInBatch = 10
	src := sourceEntry(plain, "hello")
	for _, tc := range []struct {
		name       string
		copy       func() wire.Entry
		keys       marker.Keys
		wantSigned bool
		wantSame   bool
		wantClaim  Claim
	}{
		{"a faithful copy", func() wire.Entry { return forward(t, src, testKeys, part, nil) }, testKeys, true, true, FromSource},
		{"a faithful copy of a transaction's entry", func() wire.Entry {
			s := sourceEntry(txn, "hello")
			c := forward(t, s, testKeys, part, nil)
			src2 := SourceOf(s, "west")
			if got := TargetOf(c, testKeys, part, "east", "west"); got.Digest != src2.Digest {
				t.Errorf("the copy's digest differs from its transaction entry's")
			}
			return c
		}, testKeys, true, false, FromSource},
		{"a faithful copy with the target's schema version", func() wire.Entry {
			s := src
			s.Metadata, _ = wire.PatchMetadata(nil, src.Metadata, wire.Patch{SchemaVersion: []byte{0, 0, 0, 1}})
			c := forward(t, s, testKeys, part, []byte{0, 0, 0, 9})
			if SourceOf(s, "west").Digest != TargetOf(c, testKeys, part, "east", "west").Digest {
				t.Errorf("the copy's digest differs from its source's under another schema number")
			}
			return c
		}, testKeys, true, false, FromSource},
		{"another payload under the copy's origin", func() wire.Entry {
			c := forward(t, src, testKeys, part, nil)
			c.Payload = []byte("hellO")
			return c
		}, testKeys, false, false, FromSource},
		{"the copy's origin on other bytes (a transplant)", func() wire.Entry {
			other := (wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 1_700_000_000_000,
				Properties: []wire.KeyValue{{Key: "k", Value: "w"}}, PartitionKey: "key"}).Append(nil)
			genuine := forward(t, src, testKeys, part, nil)
			var spans [len(marker.OriginKeys)]wire.Span
			if err := wire.LastProperties(genuine.Metadata, marker.OriginKeys[:], spans[:]); err != nil {
				t.Fatal(err)
			}
			md, _ := wire.PatchMetadata(nil, other, wire.Patch{ReplicatedFrom: "east"})
			md = append(md, genuine.Metadata[spans[0].Start:]...) // the origin properties, signature included
			return wire.Entry{ID: genuine.ID, Metadata: md, Payload: src.Payload}
		}, testKeys, false, false, FromSource},
		{"signed for another partition", func() wire.Entry { return forward(t, src, testKeys, part+"x", nil) }, testKeys, false, true, FromSource},
		{"signed under another key", func() wire.Entry {
			return forward(t, src, marker.NewKeys([]byte("another key of at least 32 bytes!")), part, nil)
		}, testKeys, false, true, FromSource},
		{"no key configured", func() wire.Entry { return forward(t, src, testKeys, part, nil) }, marker.Keys{}, false, true, FromSource},
		{"a batch", func() wire.Entry {
			s := sourceEntry(batch, "packed")
			c := forward(t, s, testKeys, part, nil)
			if SourceOf(s, "west").Digest != TargetOf(c, testKeys, part, "east", "west").Digest {
				t.Errorf("a batch's copy has another digest")
			}
			return c
		}, testKeys, true, false, FromSource},
		{"local data", func() wire.Entry { return sourceEntry(plain, "mine") }, testKeys, false, false, Local},
		{"a copy from north", func() wire.Entry {
			md, _ := wire.PatchMetadata(nil, src.Metadata, wire.Patch{ReplicatedFrom: "north",
				Properties: []wire.KeyValue{{Key: marker.PropOriginCluster, Value: "north"}}})
			return wire.Entry{Metadata: md, Payload: src.Payload}
		}, testKeys, false, false, OtherOrigin},
		{"a copy by Pulsar's replicator from north", func() wire.Entry {
			md, _ := wire.PatchMetadata(nil, src.Metadata, wire.Patch{ReplicatedFrom: "north"})
			return wire.Entry{Metadata: md, Payload: src.Payload}
		}, testKeys, false, false, OtherOrigin},
		{"a marker", func() wire.Entry {
			return sourceEntry(wire.MetadataBuilder{ProducerName: marker.MarkerProducerName("east", "west"), PublishTime: 1}, "m")
		}, testKeys, false, false, MarkerCopy},
		{"a late copy (failback --replay)", func() wire.Entry { return late(t, src, testKeys, part, nil) }, testKeys, true, true, FromSource},
		{"a late copy under the target's schema version", func() wire.Entry {
			s := src
			s.Metadata, _ = wire.PatchMetadata(nil, src.Metadata, wire.Patch{SchemaVersion: []byte{0, 0, 0, 0, 0, 0, 0, 1}})
			c := late(t, s, testKeys, part, []byte{0, 0, 0, 0, 0, 0, 0, 0})
			if SourceOf(s, "west").Digest != TargetOf(c, testKeys, part, "east", "west").Digest {
				t.Errorf("a late copy's digest differs from its source's under another schema number")
			}
			if m, _ := wire.ParseMetadata(c.Metadata); !bytes.Equal(m.SchemaVersion, []byte{0, 0, 0, 0, 0, 0, 0, 0}) {
				t.Errorf("a late copy carries schema version %x, want the target's 0", m.SchemaVersion)
			}
			return c
		}, testKeys, true, false, FromSource},
		{"a late copy of a batch of a transaction", func() wire.Entry {
			s := sourceEntry(txn, "hello")
			s.Metadata, _ = wire.PatchMetadata(nil, s.Metadata, wire.Patch{Properties: []wire.KeyValue{{Key: "n", Value: "10"}}})
			c := late(t, s, testKeys, part, nil, wire.KeyValue{Key: marker.PropParkedFrom, Value: part})
			if SourceOf(s, "west").Digest != TargetOf(c, testKeys, part, "east", "west").Digest {
				t.Errorf("a parked copy's digest differs from its source's")
			}
			return c
		}, testKeys, true, false, FromSource},
		// The flag outside the signature: the same bytes, proven by nothing.
		{"the late flag added to a copy after it was signed", func() wire.Entry {
			c := forward(t, src, testKeys, part, nil)
			c.Metadata, _ = wire.PatchMetadata(nil, c.Metadata, wire.Patch{Properties: []wire.KeyValue{{Key: marker.PropReplayedLate, Value: "true"}}})
			return c
		}, testKeys, false, true, FromSource},
		{"garbage metadata", func() wire.Entry { return wire.Entry{Metadata: []byte{0xff, 0xff}, Payload: []byte("x")} }, testKeys, false, false, Unreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.copy()
			got := TargetOf(c, tc.keys, part, "east", "west")
			if got.Claim != tc.wantClaim {
				t.Fatalf("claim %d, want %d", got.Claim, tc.wantClaim)
			}
			if got.Signed != tc.wantSigned {
				t.Errorf("signed %v, want %v", got.Signed, tc.wantSigned)
			}
			if tc.wantClaim == FromSource && tc.wantSame && got.Digest != SourceOf(src, "west").Digest {
				t.Errorf("the digest differs from the source entry's")
			}
			if got.Claim != FromSource || !got.OriginOK {
				return
			}
			// Held instead of hashed (a continuous verifier's): the same
			// verdict byte for byte, and the same digest once hashed.
			held, kept := targetOf(c, tc.keys, part, "east", "west", true), sourceOf(src, "west", true).kept
			if held.held == nil || held.Signed != got.Signed {
				t.Fatalf("held: %+v", held)
			}
			if eq := keptEqual(kept, held.held.md, held.held.cut[:], held.held.payload); eq != (got.Digest == SourceOf(src, "west").Digest) {
				t.Errorf("byte for byte: equal %v, digests say otherwise", eq)
			}
			if Digest(sha256.Sum256(kept)) != SourceOf(src, "west").Digest {
				t.Errorf("the held content hashes to another digest than the source's")
			}
			if held.digest(); held.Digest != got.Digest || held.held != nil {
				t.Errorf("a held target hashed: %x, want %x", held.Digest, got.Digest)
			}
		})
	}
}

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		mb   wire.MetadataBuilder
		skip string
	}{
		{"application data", wire.MetadataBuilder{ProducerName: "app", PublishTime: 5}, ""},
		{"a copy from elsewhere", wire.MetadataBuilder{ProducerName: "app", ReplicatedFrom: "north"}, "remote-origin"},
		{"a marker", wire.MetadataBuilder{ProducerName: marker.MarkerProducerName("east", "west")}, "marker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SourceOf(sourceEntry(tc.mb, "p"), "west"); got.Skip != tc.skip {
				t.Errorf("skip %q, want %q", got.Skip, tc.skip)
			}
		})
	}
	batch := sourceEntry(wire.MetadataBuilder{ProducerName: "app", NumMessagesInBatch: 7}, "p")
	batch.NumMessages = 7
	if got := SourceOf(batch, "west"); got.Messages != 7 {
		t.Errorf("a batch of 7: %d messages", got.Messages)
	}
	if got := SourceOf(wire.Entry{Metadata: []byte{0x0a}}, "west"); got.Skip != "malformed" {
		t.Errorf("malformed metadata: skip %q", got.Skip)
	}
}

// TestDigestCoversEveryByte: a change of any one byte of a source entry's
// metadata (outside the fields a copy changes) or payload changes its
// digest, or makes the metadata unreadable.
func TestDigestCoversEveryByte(t *testing.T) {
	e := sourceEntry(wire.MetadataBuilder{ProducerName: "app", SequenceID: 3, PublishTime: 1_700_000_000_000,
		Properties: []wire.KeyValue{{Key: "k", Value: "v"}}, PartitionKey: "key", EventTime: 4}, "payload")
	want, ok := contentDigest(e.Metadata, nil, e.Payload)
	if !ok {
		t.Fatal("unreadable")
	}
	for i := range len(e.Metadata) + len(e.Payload) {
		md, pl := append([]byte(nil), e.Metadata...), append([]byte(nil), e.Payload...)
		if i < len(md) {
			md[i] ^= 0x01
		} else {
			pl[i-len(md)] ^= 0x01
		}
		if got, ok := contentDigest(md, nil, pl); ok && got == want {
			t.Errorf("byte %d flipped, same digest", i)
		}
	}
}

// FuzzTargetOf: whatever a target holds, reading it never panics, and a
// faithful copy of whatever source entry parses has the source's digest
// and a valid signature.
func FuzzTargetOf(f *testing.F) {
	f.Add((wire.MetadataBuilder{ProducerName: "app", PublishTime: 1, Properties: []wire.KeyValue{{Key: "a", Value: "b"}}}).Append(nil), []byte("p"))
	f.Add([]byte{0x0a, 0x03, 'a', 'b'}, []byte{})
	f.Add([]byte{0x22, 0x02, 0x0a, 0x00}, []byte("x"))
	f.Fuzz(func(t *testing.T, md, payload []byte) {
		e := wire.Entry{ID: wire.MessageID{Ledger: 1, Entry: 2}, Metadata: md, Payload: payload}
		_ = TargetOf(e, testKeys, part, "east", "west")
		s := SourceOf(e, "west")
		if s.Skip != "" {
			return
		}
		c := forward(t, e, testKeys, part, nil)
		got := TargetOf(c, testKeys, part, "east", "west")
		if got.Claim == FromSource && (got.Digest != s.Digest || !got.Signed) {
			t.Fatalf("a faithful copy: digest equal %v, signed %v", got.Digest == s.Digest, got.Signed)
		}
		// And a late one (geo-sidecar failback), flags and all.
		got = TargetOf(late(t, e, testKeys, part, nil, wire.KeyValue{Key: marker.PropParkedFrom, Value: part}), testKeys, part, "east", "west")
		if got.Claim == FromSource && (got.Digest != s.Digest || !got.Signed) {
			t.Fatalf("a late copy: digest equal %v, signed %v", got.Digest == s.Digest, got.Signed)
		}
	})
}
