package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Metadata holds the MessageMetadata fields the data path decides on. It is
// read-only: entries are forwarded with their original metadata bytes,
// patched by appending (PatchMetadata), never re-encoded from this struct.
type Metadata struct {
	ProducerName       string
	SequenceID         uint64
	PublishTime        uint64 // Unix milliseconds
	Properties         []KeyValue
	ReplicatedFrom     string
	PartitionKey       string
	ReplicateTo        []string
	Compression        int32 // 0 none, 1 LZ4, 2 ZLIB, 3 ZSTD, 4 SNAPPY
	UncompressedSize   uint32
	NumMessagesInBatch int32 // 1 when absent
	// HasNumMessagesInBatch is set when the entry is a batch (the field is
	// present, even for a batch of one).
	HasNumMessagesInBatch bool
	EventTime             uint64
	Encrypted             bool // encryption_keys present
	SchemaVersion         []byte
	OrderingKey           []byte
	DeliverAtTime         int64
	MarkerType            int32
	HasMarkerType         bool
	TxnIDLeastBits        uint64
	TxnIDMostBits         uint64
	HasTxnID              bool
	HighestSequenceID     uint64
	NullValue             bool
	UUID                  string
	NumChunksFromMsg      int32
	TotalChunkMsgSize     int32
	ChunkID               int32
	HasChunk              bool
}

// Property returns the last value of property key (protobuf merge keeps
// every occurrence of a repeated field; the last one appended wins here).
func (m *Metadata) Property(key string) (string, bool) {
	for i := len(m.Properties) - 1; i >= 0; i-- {
		if m.Properties[i].Key == key {
			return m.Properties[i].Value, true
		}
	}
	return "", false
}

// ParseMetadata parses the MessageMetadata fields listed in Metadata. Other
// fields are skipped. Malformed input gives ErrMalformed, never a panic.
// The result does not alias b.
func ParseMetadata(b []byte) (Metadata, error) {
	m := Metadata{NumMessagesInBatch: 1}
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&m.ProducerName, f)
		case 2:
			return setU64(&m.SequenceID, f)
		case 3:
			return setU64(&m.PublishTime, f)
		case 4:
			var kv KeyValue
			if err := decodeSub(f, "properties", kv.decode); err != nil {
				return err
			}
			m.Properties = append(m.Properties, kv)
		case 5:
			return setStr(&m.ReplicatedFrom, f)
		case 6:
			return setStr(&m.PartitionKey, f)
		case 7:
			var s string
			if err := setStr(&s, f); err != nil {
				return err
			}
			m.ReplicateTo = append(m.ReplicateTo, s)
		case 8:
			return setI32(&m.Compression, f)
		case 9:
			return setU32(&m.UncompressedSize, f)
		case 11:
			m.HasNumMessagesInBatch = true
			return setI32(&m.NumMessagesInBatch, f)
		case 12:
			return setU64(&m.EventTime, f)
		case 13:
			if _, err := f.bytes(); err != nil {
				return err
			}
			m.Encrypted = true
		case 16:
			return setBytes(&m.SchemaVersion, f)
		case 18:
			return setBytes(&m.OrderingKey, f)
		case 19:
			return setI64(&m.DeliverAtTime, f)
		case 20:
			m.HasMarkerType = true
			return setI32(&m.MarkerType, f)
		case 22:
			m.HasTxnID = true
			return setU64(&m.TxnIDLeastBits, f)
		case 23:
			m.HasTxnID = true
			return setU64(&m.TxnIDMostBits, f)
		case 24:
			return setU64(&m.HighestSequenceID, f)
		case 25:
			return setBool(&m.NullValue, f)
		case 26:
			return setStr(&m.UUID, f)
		case 27:
			m.HasChunk = true
			return setI32(&m.NumChunksFromMsg, f)
		case 28:
			return setI32(&m.TotalChunkMsgSize, f)
		case 29:
			m.HasChunk = true
			return setI32(&m.ChunkID, f)
		}
		return nil
	})
	if err != nil {
		return Metadata{}, fmt.Errorf("MessageMetadata: %w", err)
	}
	if err := need("MessageMetadata", seen, 1, 2, 3); err != nil {
		return Metadata{}, err
	}
	if m.NumMessagesInBatch < 0 {
		return Metadata{}, malformed("MessageMetadata: num_messages_in_batch %d", m.NumMessagesInBatch)
	}
	return m, nil
}

// Patch is what the data path changes in an entry's metadata on its way to
// another cluster.
type Patch struct {
	// ReplicatedFrom, when set, is appended as replicated_from (field 5);
	// protobuf keeps the last occurrence, so it also overrides an earlier
	// value.
	ReplicatedFrom string
	// Properties are appended as batch-level properties (field 4). Repeated
	// fields accumulate: a key already present stays too.
	Properties []KeyValue
	// DropTxn removes txnid_least_bits and txnid_most_bits (fields 22 and
	// 23), as Pulsar's own replicator does: the transaction is the source's
	// and means nothing on the target. Dropping copies the other fields'
	// bytes unchanged.
	DropTxn bool
	// Identity, when set, appends producer_name, sequence_id and
	// highest_sequence_id (fields 1, 2, 24), overriding the origin's. The
	// broker rebuilds its deduplication state after a topic reload from
	// these stored fields (not from the producer's name and the SENDs'
	// sequence ids), so without the override the target forgets, at every
	// reload, what the sidecar's producer name had persisted. The price:
	// consumers on the target see the sidecar's producer name and sequence
	// ids instead of the origin's.
	Identity *Identity
	// SchemaVersion, when set, is appended as schema_version (field 16):
	// the target's version of the entry's schema (GetOrCreateSchema).
	SchemaVersion []byte
	// UncompressedSize, when set, is appended as uncompressed_size
	// (field 9; the last occurrence wins): the size of a payload
	// rewritten (geo-sidecar failback's late batches, replicator/batch).
	UncompressedSize *uint32
}

// Identity is the producer name and sequence range an entry is stored
// under.
type Identity struct {
	ProducerName      string
	SequenceID        uint64
	HighestSequenceID uint64 // written when > SequenceID
}

// PatchMetadata appends to dst the metadata md with p applied. Fields are
// never re-encoded: the original bytes are copied (minus the txn fields when
// p.DropTxn) and the new fields are appended. md must be well-formed
// protobuf when DropTxn is set.
func PatchMetadata(dst, md []byte, p Patch) ([]byte, error) {
	if p.DropTxn {
		rest := md
		for len(rest) > 0 {
			num, typ, n := protowire.ConsumeField(rest)
			if n < 0 {
				return dst, malformed("MessageMetadata: %v", protowire.ParseError(n))
			}
			if !(num == 22 || num == 23) || typ != protowire.VarintType {
				dst = append(dst, rest[:n]...)
			}
			rest = rest[n:]
		}
	} else {
		dst = append(dst, md...)
	}
	for _, kv := range p.Properties {
		dst = appendMsg(dst, 4, kv.appendTo)
	}
	if p.ReplicatedFrom != "" {
		dst = appendStr(dst, 5, p.ReplicatedFrom)
	}
	if p.SchemaVersion != nil {
		dst = appendBytes(dst, 16, p.SchemaVersion)
	}
	if p.UncompressedSize != nil {
		dst = appendU64(dst, 9, uint64(*p.UncompressedSize))
	}
	if id := p.Identity; id != nil {
		dst = appendStr(dst, 1, id.ProducerName)
		dst = appendU64(dst, 2, id.SequenceID)
		dst = appendU64(dst, 24, max(id.HighestSequenceID, id.SequenceID))
	}
	return dst, nil
}

// AppendProperties appends kvs to encoded MessageMetadata dst as
// properties (field 4), after whatever dst holds: they are then the last
// of their keys (see [LastProperties]).
func AppendProperties(dst []byte, kvs ...KeyValue) []byte {
	for _, kv := range kvs {
		dst = appendMsg(dst, 4, kv.appendTo)
	}
	return dst
}

// Span is where one field sits in encoded bytes: b[Start:End], tag and
// length included. The zero Span is no field.
type Span struct{ Start, End int }

// LastProperties finds, in encoded MessageMetadata md, the last property
// (field 4) with each of keys: spans[i] is where the one for keys[i] sits,
// the zero Span when md has none. The last one is the one
// [Metadata.Property] returns, and the one [AppendProperties] appended
// when nothing was appended after it. spans must be as long as keys.
//
// It walks the top-level fields once and decodes only the properties:
// what the data path needs to cut properties out of metadata bytes
// without re-encoding the rest. Malformed input, or input
// [ParseMetadata] would refuse for its properties, gives ErrMalformed,
// never a panic.
func LastProperties(md []byte, keys []string, spans []Span) error {
	if len(spans) != len(keys) {
		return fmt.Errorf("LastProperties: %d spans for %d keys", len(spans), len(keys))
	}
	clear(spans)
	at := 0
	for at < len(md) {
		num, typ, n := protowire.ConsumeField(md[at:])
		if n < 0 {
			return malformed("MessageMetadata: %v", protowire.ParseError(n))
		}
		if num == 4 {
			if typ != protowire.BytesType {
				return malformed("MessageMetadata: properties: wire type %d", typ)
			}
			_, _, tn := protowire.ConsumeTag(md[at:])
			b, _ := protowire.ConsumeBytes(md[at+tn : at+n])
			var kv KeyValue
			if err := kv.decode(b); err != nil {
				return fmt.Errorf("MessageMetadata: properties: %w", err)
			}
			for i, k := range keys {
				if kv.Key == k {
					spans[i] = Span{Start: at, End: at + n}
				}
			}
		}
		at += n
	}
	return nil
}

// MetadataBuilder encodes a MessageMetadata from scratch. The data path
// never needs it (it forwards bytes); tests and fake brokers do.
type MetadataBuilder struct {
	ProducerName       string
	SequenceID         uint64
	PublishTime        uint64
	Properties         []KeyValue
	ReplicatedFrom     string
	PartitionKey       string
	Compression        int32
	UncompressedSize   uint32
	NumMessagesInBatch int32 // written when > 0
	EventTime          uint64
	TxnIDLeastBits     uint64
	TxnIDMostBits      uint64
	NullValue          bool
}

// Append appends the encoded metadata to dst.
func (m MetadataBuilder) Append(dst []byte) []byte {
	dst = appendStr(dst, 1, m.ProducerName)
	dst = appendU64(dst, 2, m.SequenceID)
	dst = appendU64(dst, 3, m.PublishTime)
	for _, kv := range m.Properties {
		dst = appendMsg(dst, 4, kv.appendTo)
	}
	if m.ReplicatedFrom != "" {
		dst = appendStr(dst, 5, m.ReplicatedFrom)
	}
	if m.PartitionKey != "" {
		dst = appendStr(dst, 6, m.PartitionKey)
	}
	if m.Compression != 0 {
		dst = appendI32(dst, 8, m.Compression)
	}
	if m.UncompressedSize != 0 {
		dst = appendU64(dst, 9, uint64(m.UncompressedSize))
	}
	if m.NumMessagesInBatch > 0 {
		dst = appendI32(dst, 11, m.NumMessagesInBatch)
	}
	if m.EventTime != 0 {
		dst = appendU64(dst, 12, m.EventTime)
	}
	if m.TxnIDLeastBits != 0 || m.TxnIDMostBits != 0 {
		dst = appendU64(dst, 22, m.TxnIDLeastBits)
		dst = appendU64(dst, 23, m.TxnIDMostBits)
	}
	if m.NullValue {
		dst = appendBool(dst, 25, true)
	}
	return dst
}
