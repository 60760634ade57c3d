package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestFrameRoundTrip(t *testing.T) {
	cmd := AppendCommand(nil, &Flow{ConsumerID: 7, Permits: 1000})
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	for _, tc := range []struct {
		name        string
		frame       []byte
		md, payload []byte
		hasPayload  bool
	}{
		{name: "simple", frame: AppendFrame(nil, cmd)},
		{name: "payload", frame: AppendPayloadFrame(nil, cmd, md, []byte("hello")), md: md, payload: []byte("hello"), hasPayload: true},
		{name: "empty payload", frame: AppendPayloadFrame(nil, cmd, md, nil), md: md, payload: []byte{}, hasPayload: true},
		{name: "empty metadata and payload", frame: AppendPayloadFrame(nil, cmd, nil, nil), md: []byte{}, payload: []byte{}, hasPayload: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The limit is the frame's size: exactly at it is allowed.
			f, _, err := ReadFrame(bytes.NewReader(tc.frame), nil, len(tc.frame)-4)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(f.Command, cmd) || f.HasPayload != tc.hasPayload {
				t.Fatalf("frame %+v", f)
			}
			if tc.hasPayload && (!f.Checksummed || !bytes.Equal(f.Metadata, tc.md) || !bytes.Equal(f.Payload, tc.payload)) {
				t.Fatalf("payload section %+v", f)
			}
			if PayloadFrameSize(len(cmd), len(tc.md), len(tc.payload)) != len(tc.frame) && tc.hasPayload {
				t.Fatalf("PayloadFrameSize %d, frame %d", PayloadFrameSize(len(cmd), len(tc.md), len(tc.payload)), len(tc.frame))
			}
		})
	}
}

func TestFrameBrokerEntryMetadataSkipped(t *testing.T) {
	cmd := AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(3, 4)})
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	plain := AppendPayloadFrame(nil, cmd, md, []byte("x"))
	// Insert [0x0e02][size][bem] after the command.
	at := 8 + len(cmd)
	bem := []byte{8, 1}
	var b []byte
	b = append(b, plain[:at]...)
	b = binary.BigEndian.AppendUint16(b, magicBrokerEntryMetadata)
	b = binary.BigEndian.AppendUint32(b, uint32(len(bem)))
	b = append(b, bem...)
	b = append(b, plain[at:]...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	f, _, err := ReadFrame(bytes.NewReader(b), nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.BrokerEntryMetadata, bem) || !bytes.Equal(f.Metadata, md) || string(f.Payload) != "x" {
		t.Fatalf("frame %+v", f)
	}
}

func TestFrameMalformed(t *testing.T) {
	cmd := AppendCommand(nil, &Ping{})
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	good := AppendPayloadFrame(nil, cmd, md, []byte("payload"))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 1
	sized := func(rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(rest))), rest...)
	}
	for _, tc := range []struct {
		name  string
		in    []byte
		isErr error
	}{
		{"too large", binary.BigEndian.AppendUint32(nil, 1<<30), ErrMalformed},
		{"a byte over the limit", sized(make([]byte, 1<<20+1)...), ErrMalformed},
		{"size below 4", sized(0, 0), ErrMalformed},
		{"command size beyond frame", sized(0, 0, 0, 9, 1, 2), ErrMalformed},
		{"empty command", sized(0, 0, 0, 0), ErrMalformed},
		{"checksum mismatch", corrupt, ErrChecksum},
		{"broker entry metadata size beyond frame", sized(append(append(binary.BigEndian.AppendUint32(nil, uint32(len(cmd))), cmd...), 0x0e, 0x02, 0, 0, 0, 5, 1, 2)...), ErrMalformed},
		{"broker entry metadata header truncated", sized(append(append(binary.BigEndian.AppendUint32(nil, uint32(len(cmd))), cmd...), 0x0e, 0x02, 0)...), ErrMalformed},
		{"metadata size beyond frame", sized(append(append(binary.BigEndian.AppendUint32(nil, uint32(len(cmd))), cmd...), 0, 0, 0, 99)...), ErrMalformed},
		{"payload section without metadata size", sized(append(append(binary.BigEndian.AppendUint32(nil, uint32(len(cmd))), cmd...), 1)...), ErrMalformed},
		{"truncated", good[:len(good)-3], io.ErrUnexpectedEOF},
		{"empty", nil, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadFrame(bytes.NewReader(tc.in), nil, 1<<20)
			if !errors.Is(err, tc.isErr) {
				t.Fatalf("err %v, want %v", err, tc.isErr)
			}
		})
	}
}

func TestCommandRoundTrip(t *testing.T) {
	id := MessageID{Ledger: 10, Entry: 20, Partition: 3, BatchIndex: -1}
	for _, body := range []Body{
		&Connect{ClientVersion: "v", AuthMethodName: "token", AuthData: []byte("secret"), ProtocolVersion: 20, ProxyToBrokerURL: "b:6650", SupportsAuthRefresh: true},
		&Connected{ServerVersion: "Pulsar 4", ProtocolVersion: 20, MaxMessageSize: 5 << 20},
		&SubscribeCommand{Topic: "t", Subscription: "s", SubType: Failover, ConsumerID: 1, RequestID: 2, ConsumerName: "c", PriorityLevel: 1, InitialPosition: Earliest, NoTopicCreation: true},
		&ProducerCommand{Topic: "t", ProducerID: 1, RequestID: 2, ProducerName: "p"},
		&ProducerCommand{Topic: "t", ProducerID: 1, RequestID: 2, ProducerName: "p", Encrypted: true},
		&ProducerSuccess{RequestID: 2, ProducerName: "p", LastSequenceID: -1, SchemaVersion: []byte{1}},
		&ProducerSuccess{RequestID: 2, ProducerName: "p", LastSequenceID: 1 << 40, NotReady: true},
		&Send{ProducerID: 1, SequenceID: 5, NumMessages: 10, HighestSequenceID: 14, IsChunk: true, Marker: true},
		&Send{ProducerID: 1, SequenceID: 5, NumMessages: 1},
		&SendReceipt{ProducerID: 1, SequenceID: 5, MessageID: id, HighestSequenceID: 14},
		&SendError{ProducerID: 1, SequenceID: 5, Error: ChecksumError, Message: "bad"},
		&Message{ConsumerID: 1, MessageID: MessageID{Ledger: 1, Entry: 2, Partition: -1, BatchIndex: 4, BatchSize: 9}, RedeliveryCount: 3},
		&Ack{ConsumerID: 1, AckType: AckCumulative, MessageIDs: []MessageID{id, EntryID(1, 2)}},
		&Flow{ConsumerID: 1, Permits: 1000},
		&Success{RequestID: 9},
		&Error{RequestID: 9, Error: TopicNotFound, Message: "no"},
		&CloseProducer{ProducerID: 1, RequestID: 2, AssignedBrokerURL: "pulsar://b:1"},
		&CloseProducer{ProducerID: 1, RequestID: 2, AssignedBrokerURL: "pulsar://b:1", AssignedBrokerURLTLS: "pulsar+ssl://b:2"},
		&CloseConsumer{ConsumerID: 1, RequestID: 2, AssignedBrokerURLTLS: "pulsar+ssl://b:2"},
		&CloseConsumer{ConsumerID: 1, RequestID: 2, AssignedBrokerURL: "pulsar://b:1", AssignedBrokerURLTLS: "pulsar+ssl://b:2"},
		&Ping{},
		&Pong{},
		&RedeliverUnacknowledged{ConsumerID: 1, MessageIDs: []MessageID{id}},
		&PartitionedMetadata{Topic: "t", RequestID: 1},
		&PartitionedMetadataResponse{RequestID: 1, Partitions: 4},
		&PartitionedMetadataResponse{RequestID: 1, Failed: true, Error: AuthorizationError, Message: "denied"},
		&Lookup{Topic: "t", RequestID: 1, Authoritative: true},
		&LookupResponse{RequestID: 1, Kind: LookupRedirect, BrokerServiceURL: "pulsar://a:1", BrokerServiceURLTLS: "pulsar+ssl://a:2", Authoritative: true, ProxyThroughServiceURL: true},
		&LookupResponse{RequestID: 1, Kind: LookupFailed, Error: ServiceNotReady, Message: "later"},
		&ReachedEndOfTopic{ConsumerID: 4},
		&ActiveConsumerChange{ConsumerID: 4, IsActive: true},
		&AuthChallenge{ServerVersion: "s", Challenge: AuthData{MethodName: "token", Data: []byte("c")}, ProtocolVersion: 20},
		&AuthResponse{ClientVersion: "c", Response: AuthData{MethodName: "token", Data: []byte("r")}, ProtocolVersion: 20},
		&TopicMigrated{ResourceID: 3, ResourceType: 1, BrokerServiceURL: "pulsar://x:1"},
		&TopicMigrated{ResourceID: 3, ResourceType: 0, BrokerServiceURL: "pulsar://x:1", BrokerServiceURLTLS: "pulsar+ssl://x:2"},
		// Partition 0 and batch index 0 are values, not absence (a
		// start at batch index 0 includes its entry).
		&Ack{ConsumerID: 1, MessageIDs: []MessageID{{Ledger: 1, Entry: 2, Partition: 0, BatchIndex: 0}}},
		&GetSchema{RequestID: 1, Topic: "t", Version: []byte{0, 0, 0, 0, 0, 0, 0, 2}},
		&GetLastMessageID{ConsumerID: 1, RequestID: 2},
		&GetLastMessageIDResponse{RequestID: 2, LastMessageID: id},
		&GetLastMessageIDResponse{RequestID: 2, LastMessageID: id, MarkDelete: MessageID{Ledger: 7, Entry: 3, Partition: -1, BatchIndex: -1}, HasMarkDelete: true},
		&SubscribeCommand{Topic: "t", Subscription: "r", ConsumerID: 1, RequestID: 2, NonDurable: true, StartMessageID: &MessageID{Ledger: 1, Entry: 2, Partition: -1, BatchIndex: 0}, ConsumerEpoch: 3},
		&GetSchemaResponse{RequestID: 1, Schema: &Schema{Name: "n", Data: []byte("{}"), Type: 2, Properties: []KeyValue{{"k", "v"}}}, Version: []byte{1}},
		&GetSchemaResponse{RequestID: 1, HasError: true, ErrorCode: TopicNotFound, ErrorMessage: "none"},
		&GetOrCreateSchema{RequestID: 1, Topic: "t", Schema: Schema{Name: "n", Data: []byte("{}"), Type: 4}},
		&GetOrCreateSchemaResponse{RequestID: 1, Version: []byte{0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(body.Type().String(), func(t *testing.T) {
			b := AppendCommand(nil, body)
			got, err := DecodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Type != body.Type() || !reflect.DeepEqual(got.Body, body) {
				t.Fatalf("decoded %v %+v, want %+v", got.Type, got.Body, body)
			}
		})
	}
}

// TestEntryIDIsTheWholeEntry: an entry id has neither partition nor batch
// index (-1, not encoded): acknowledging it acknowledges every message of
// the entry, where a batch index would acknowledge that message alone.
func TestEntryIDIsTheWholeEntry(t *testing.T) {
	if id := EntryID(3, 4); id != (MessageID{Ledger: 3, Entry: 4, Partition: -1, BatchIndex: -1}) {
		t.Fatalf("EntryID(3, 4) = %+v", id)
	}
	if b, want := EntryID(3, 4).appendTo(nil), appendU64(appendU64(nil, 1, 3), 2, 4); !bytes.Equal(b, want) {
		t.Fatalf("EntryID(3, 4) encodes as %x, want ledger and entry only (%x)", b, want)
	}
}

// TestProducerCommandNameIsTheClients: a PRODUCER with a name says the
// name is the client's (user_provided_producer_name, field 9), so the
// broker keeps it (deduplication keys on it) rather than taking it for
// one it assigned; without a name it says neither.
func TestProducerCommandNameIsTheClients(t *testing.T) {
	for _, name := range []string{"geo-sidecar.east.t-partition-0", ""} {
		b := (&ProducerCommand{Topic: "t", ProducerID: 1, RequestID: 2, ProducerName: name}).appendTo(nil)
		var userProvided, has bool
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			b = b[n:]
			l := protowire.ConsumeFieldValue(num, typ, b)
			if num == 9 {
				v, _ := protowire.ConsumeVarint(b)
				has, userProvided = true, v == 1
			}
			b = b[l:]
		}
		if userProvided != (name != "") || has != (name != "") {
			t.Errorf("name %q: user_provided_producer_name present %v, true %v", name, has, userProvided)
		}
	}
}

// TestMessageIDString: ledger:entry for an entry, and the batch index
// after it for a message of a batch, index 0 included (the form logs and
// operators use).
func TestMessageIDString(t *testing.T) {
	for id, want := range map[MessageID]string{
		EntryID(5, 7): "5:7",
		{Ledger: 5, Entry: 7, Partition: 2, BatchIndex: 0}:  "5:7:0",
		{Ledger: 5, Entry: 7, Partition: -1, BatchIndex: 3}: "5:7:3",
	} {
		if got := id.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", id, got, want)
		}
	}
}

// TestDecodeDefaults: optional fields left out decode to the protocol's
// defaults, not Go's zero values.
func TestDecodeDefaults(t *testing.T) {
	decode := func(typ CommandType, sub []byte) Body {
		t.Helper()
		c, err := DecodeCommand(appendMsg(appendU64(nil, 1, uint64(typ)), protowire.Number(typ), func(b []byte) []byte { return append(b, sub...) }))
		if err != nil {
			t.Fatal(err)
		}
		return c.Body
	}
	// PRODUCER_SUCCESS without last_sequence_id: nothing persisted (-1).
	ps := decode(TypeProducerSuccess, appendStr(appendU64(nil, 1, 7), 2, "p")).(*ProducerSuccess)
	if ps.LastSequenceID != -1 {
		t.Errorf("LastSequenceID %d without the field, want -1", ps.LastSequenceID)
	}
	// SEND_RECEIPT without message_id: neither partition nor batch index.
	r := decode(TypeSendReceipt, appendU64(appendU64(nil, 1, 1), 2, 5)).(*SendReceipt)
	if r.MessageID.Partition != -1 || r.MessageID.BatchIndex != -1 {
		t.Errorf("receipt's message id %+v without the field, want partition and batch index -1", r.MessageID)
	}
	// SEND without num_messages: one message.
	if s := decode(TypeSend, appendU64(appendU64(nil, 1, 1), 2, 5)).(*Send); s.NumMessages != 1 {
		t.Errorf("NumMessages %d without the field, want 1", s.NumMessages)
	}
}

// TestDecodeRequiredFields: a command missing any of its required fields
// (those the protocol declares required) is ErrMalformed, and so is a
// message id missing ledger or entry.
func TestDecodeRequiredFields(t *testing.T) {
	id := MessageID{Ledger: 10, Entry: 20, Partition: 3, BatchIndex: 1}
	for _, tt := range []struct {
		body     Body
		required []protowire.Number
	}{
		{&Connect{ClientVersion: "v", ProtocolVersion: 20}, []protowire.Number{1}},
		{&Connected{ServerVersion: "s", ProtocolVersion: 20}, []protowire.Number{1}},
		{&SubscribeCommand{Topic: "t", Subscription: "s", SubType: Failover, ConsumerID: 1, RequestID: 2}, []protowire.Number{1, 2, 3, 4, 5}},
		{&ProducerCommand{Topic: "t", ProducerID: 1, RequestID: 2}, []protowire.Number{1, 2, 3}},
		{&ProducerSuccess{RequestID: 2, ProducerName: "p", LastSequenceID: 3}, []protowire.Number{1, 2}},
		{&Send{ProducerID: 1, SequenceID: 5}, []protowire.Number{1, 2}},
		{&SendReceipt{ProducerID: 1, SequenceID: 5, MessageID: id}, []protowire.Number{1, 2}},
		{&SendError{ProducerID: 1, SequenceID: 5, Error: ChecksumError, Message: "m"}, []protowire.Number{1, 2}},
		{&Message{ConsumerID: 1, MessageID: id}, []protowire.Number{1, 2}},
		{&Ack{ConsumerID: 1, AckType: AckCumulative, MessageIDs: []MessageID{id}}, []protowire.Number{1, 2}},
		{&Flow{ConsumerID: 1, Permits: 2}, []protowire.Number{1, 2}},
		{&Success{RequestID: 9}, []protowire.Number{1}},
		{&Error{RequestID: 9, Error: TopicNotFound, Message: "no"}, []protowire.Number{1}},
		{&CloseProducer{ProducerID: 1, RequestID: 2}, []protowire.Number{1}},
		{&CloseConsumer{ConsumerID: 1, RequestID: 2}, []protowire.Number{1}},
		{&RedeliverUnacknowledged{ConsumerID: 1, ConsumerEpoch: 2}, []protowire.Number{1}},
		{&PartitionedMetadata{Topic: "t", RequestID: 1}, []protowire.Number{1, 2}},
		{&PartitionedMetadataResponse{RequestID: 1, Partitions: 4}, []protowire.Number{2}},
		{&Lookup{Topic: "t", RequestID: 1}, []protowire.Number{1, 2}},
		{&LookupResponse{RequestID: 1, Kind: LookupConnect, BrokerServiceURL: "pulsar://a:1"}, []protowire.Number{4}},
		{&ReachedEndOfTopic{ConsumerID: 4}, []protowire.Number{1}},
		{&ActiveConsumerChange{ConsumerID: 4, IsActive: true}, []protowire.Number{1}},
		{&TopicMigrated{ResourceID: 3, ResourceType: 1, BrokerServiceURL: "pulsar://x:1"}, []protowire.Number{1, 2}},
		{&GetLastMessageID{ConsumerID: 1, RequestID: 2}, []protowire.Number{1, 2}},
		{&GetLastMessageIDResponse{RequestID: 2, LastMessageID: id}, []protowire.Number{1, 2}},
		{&GetSchema{RequestID: 1, Topic: "t"}, []protowire.Number{1, 2}},
		{&GetSchemaResponse{RequestID: 1, Version: []byte{1}}, []protowire.Number{1}},
		{&GetOrCreateSchema{RequestID: 1, Topic: "t", Schema: Schema{Name: "n", Type: 2}}, []protowire.Number{1, 2, 3}},
		{&GetOrCreateSchemaResponse{RequestID: 1, Version: []byte{1}}, []protowire.Number{1}},
	} {
		typ := tt.body.Type()
		whole := tt.body.appendTo(nil)
		encode := func(sub []byte) []byte {
			return appendMsg(appendU64(nil, 1, uint64(typ)), protowire.Number(typ), func(b []byte) []byte { return append(b, sub...) })
		}
		if _, err := DecodeCommand(encode(whole)); err != nil {
			t.Errorf("%v whole: %v", typ, err)
			continue
		}
		for _, num := range tt.required {
			if _, err := DecodeCommand(encode(withoutField(t, whole, num))); !errors.Is(err, ErrMalformed) {
				t.Errorf("%v without field %d: %v, want ErrMalformed", typ, num, err)
			}
		}
	}
	// A schema (in GET_OR_CREATE_SCHEMA, field 3) without name or type.
	schema := Schema{Name: "n", Data: []byte("{}"), Type: 2}
	for _, num := range []protowire.Number{1, 4} {
		sub := appendMsg(appendStr(appendU64(nil, 1, 1), 2, "t"), 3, func(b []byte) []byte { return append(b, withoutField(t, schema.appendTo(nil), num)...) })
		b := appendMsg(appendU64(nil, 1, uint64(TypeGetOrCreateSchema)), protowire.Number(TypeGetOrCreateSchema), func(b []byte) []byte { return append(b, sub...) })
		if _, err := DecodeCommand(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("schema without field %d: %v, want ErrMalformed", num, err)
		}
	}
	// A message id (in SEND_RECEIPT, field 3) without ledger or entry.
	for _, num := range []protowire.Number{1, 2} {
		sub := appendMsg(appendU64(appendU64(nil, 1, 1), 2, 5), 3, func(b []byte) []byte { return append(b, withoutField(t, id.appendTo(nil), num)...) })
		b := appendMsg(appendU64(nil, 1, uint64(TypeSendReceipt)), protowire.Number(TypeSendReceipt), func(b []byte) []byte { return append(b, sub...) })
		if _, err := DecodeCommand(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("message id without field %d: %v, want ErrMalformed", num, err)
		}
	}
}

// withoutField returns the encoded message b without its top-level
// fields numbered num; it fails the test if there were none.
func withoutField(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	var out []byte
	found := false
	for len(b) > 0 {
		n, _, l := protowire.ConsumeField(b)
		if l < 0 {
			t.Fatalf("bad encoding: %v", protowire.ParseError(l))
		}
		if n == num {
			found = true
		} else {
			out = append(out, b[:l]...)
		}
		b = b[l:]
	}
	if !found {
		t.Fatalf("no field %d to leave out", num)
	}
	return out
}

func TestAppendMsgLongSubMessage(t *testing.T) {
	// Sub-messages of 128 bytes and more need a multi-byte length: every
	// length around 128 (the sub-message has a few bytes besides the
	// version string), and some beyond.
	lengths := []int{0, 300, 20000}
	for n := 110; n <= 140; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		c := &Connect{ClientVersion: strings.Repeat("v", n), ProtocolVersion: 20}
		got, err := DecodeCommand(AppendCommand(nil, c))
		if err != nil {
			t.Fatalf("%d: %v", n, err)
		}
		if !reflect.DeepEqual(got.Body, c) {
			t.Fatalf("%d: decoded %+v", n, got.Body)
		}
	}
}

func TestDecodeCommandMalformed(t *testing.T) {
	flow := AppendCommand(nil, &Flow{ConsumerID: 1, Permits: 2})
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"no type", appendMsg(nil, 11, (&Flow{ConsumerID: 1, Permits: 2}).appendTo)},
		{"truncated", flow[:len(flow)-1]},
		{"type and field differ", appendMsg(appendU64(nil, 1, uint64(TypeFlow)), 13, (&Success{RequestID: 1}).appendTo)},
		{"two sub-commands", appendMsg(flow, 11, (&Flow{}).appendTo)},
		{"missing sub-command", appendU64(nil, 1, uint64(TypeFlow))},
		{"missing required field", appendMsg(appendU64(nil, 1, uint64(TypeFlow)), 11, func(b []byte) []byte { return appendU64(b, 1, 1) })},
		{"wrong wire type", appendMsg(appendU64(nil, 1, uint64(TypeSuccess)), 13, func(b []byte) []byte { return appendStr(b, 1, "x") })},
		{"bad tag", []byte{0x80}},
		{"bad nested message id", appendMsg(appendU64(nil, 1, uint64(TypeMessage)), 9, func(b []byte) []byte {
			b = appendU64(b, 1, 1)
			return appendBytes(b, 2, []byte{0xff})
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeCommand(tc.in); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
	// Unknown types are not an error: forward compatibility.
	c, err := DecodeCommand(appendMsg(appendU64(nil, 1, 99), 99, func(b []byte) []byte { return b }))
	if err != nil || c.Type != 99 || c.Body != nil {
		t.Fatalf("unknown type: %+v, %v", c, err)
	}
	// An empty PING may leave its sub-message out.
	if c, err := DecodeCommand(appendU64(nil, 1, uint64(TypePing))); err != nil || c.Type != TypePing {
		t.Fatalf("bare PING: %+v, %v", c, err)
	}
}

func TestMetadataParseAndPatch(t *testing.T) {
	orig := MetadataBuilder{
		ProducerName: "prod", SequenceID: 42, PublishTime: 1700000000000,
		Properties:   []KeyValue{{"a", "1"}, {"b", "2"}},
		PartitionKey: "key", Compression: 1, UncompressedSize: 999, NumMessagesInBatch: 7,
		EventTime: 1699999999999, TxnIDLeastBits: 5, TxnIDMostBits: 6, NullValue: true,
	}.Append(nil)
	m, err := ParseMetadata(orig)
	if err != nil {
		t.Fatal(err)
	}
	want := Metadata{
		ProducerName: "prod", SequenceID: 42, PublishTime: 1700000000000,
		Properties:   []KeyValue{{"a", "1"}, {"b", "2"}},
		PartitionKey: "key", Compression: 1, UncompressedSize: 999, NumMessagesInBatch: 7, HasNumMessagesInBatch: true,
		EventTime: 1699999999999, TxnIDLeastBits: 5, TxnIDMostBits: 6, HasTxnID: true, NullValue: true,
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("parsed %+v\nwant   %+v", m, want)
	}
	if numMessages(orig) != 7 {
		t.Fatalf("numMessages %d", numMessages(orig))
	}

	for _, tc := range []struct {
		name    string
		patch   Patch
		wantTxn bool
	}{
		{"append", Patch{ReplicatedFrom: "east", Properties: []KeyValue{{"geo-sidecar.origin-id", "1:2"}}}, true},
		{"drop txn", Patch{ReplicatedFrom: "east", Properties: []KeyValue{{"geo-sidecar.origin-id", "1:2"}}, DropTxn: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patched, err := PatchMetadata(nil, orig, tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.patch.DropTxn && !bytes.HasPrefix(patched, orig) {
				t.Fatal("the original bytes must stay untouched")
			}
			p, err := ParseMetadata(patched)
			if err != nil {
				t.Fatal(err)
			}
			if p.ReplicatedFrom != "east" || len(p.Properties) != 3 || p.HasTxnID != tc.wantTxn {
				t.Fatalf("patched %+v", p)
			}
			if v, _ := p.Property("geo-sidecar.origin-id"); v != "1:2" {
				t.Fatalf("origin id %q", v)
			}
			if p.SequenceID != 42 || p.NumMessagesInBatch != 7 || p.PartitionKey != "key" {
				t.Fatalf("other fields changed: %+v", p)
			}
		})
	}
	// Identity overrides producer name and sequence ids.
	withID, _ := PatchMetadata(nil, orig, Patch{Identity: &Identity{ProducerName: "sidecar", SequenceID: 9, HighestSequenceID: 12}})
	if p, _ := ParseMetadata(withID); p.ProducerName != "sidecar" || p.SequenceID != 9 || p.HighestSequenceID != 12 {
		t.Fatalf("identity not applied: %+v", p)
	}
	// A new schema version overrides the origin's.
	withSV, _ := PatchMetadata(nil, orig, Patch{SchemaVersion: []byte{0, 0, 0, 0, 0, 0, 0, 5}})
	if p, _ := ParseMetadata(withSV); !bytes.Equal(p.SchemaVersion, []byte{0, 0, 0, 0, 0, 0, 0, 5}) {
		t.Fatalf("schema version not applied: %+v", p)
	}
	// A second replicated_from overrides the first (last one wins).
	twice, _ := PatchMetadata(nil, orig, Patch{ReplicatedFrom: "a"})
	twice, _ = PatchMetadata(nil, twice, Patch{ReplicatedFrom: "b"})
	if p, _ := ParseMetadata(twice); p.ReplicatedFrom != "b" {
		t.Fatalf("replicated_from %q", p.ReplicatedFrom)
	}
}

// TestMetadataBuilder: what the builder writes (for tests and fake
// brokers) parses back; fields at their zero value are left out.
func TestMetadataBuilder(t *testing.T) {
	base := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}
	for _, tt := range []struct {
		name  string
		build func(MetadataBuilder) MetadataBuilder
		check func(Metadata) bool
	}{
		{"replicated from", func(m MetadataBuilder) MetadataBuilder { m.ReplicatedFrom = "east"; return m },
			func(m Metadata) bool { return m.ReplicatedFrom == "east" }},
		{"not a batch", func(m MetadataBuilder) MetadataBuilder { return m },
			func(m Metadata) bool { return !m.HasNumMessagesInBatch && m.NumMessagesInBatch == 1 && !m.HasTxnID }},
		{"txn least bits only", func(m MetadataBuilder) MetadataBuilder { m.TxnIDLeastBits = 5; return m },
			func(m Metadata) bool { return m.HasTxnID && m.TxnIDLeastBits == 5 && m.TxnIDMostBits == 0 }},
		{"txn most bits only", func(m MetadataBuilder) MetadataBuilder { m.TxnIDMostBits = 6; return m },
			func(m Metadata) bool { return m.HasTxnID && m.TxnIDLeastBits == 0 && m.TxnIDMostBits == 6 }},
	} {
		m, err := ParseMetadata(tt.build(base).Append(nil))
		if err != nil || !tt.check(m) {
			t.Errorf("%s: parsed %+v, %v", tt.name, m, err)
		}
	}
	// A batch of no messages is odd but well-formed; only a negative
	// count cannot be one (TestMetadataMalformed).
	m, err := ParseMetadata(appendI32(base.Append(nil), 11, 0))
	if err != nil || !m.HasNumMessagesInBatch || m.NumMessagesInBatch != 0 {
		t.Errorf("num_messages_in_batch 0: parsed %+v, %v", m, err)
	}
}

func TestMetadataMalformed(t *testing.T) {
	good := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-1]},
		{"missing publish time", MetadataBuilder{ProducerName: "p", SequenceID: 1}.Append(nil)[:5]},
		{"bad property", appendBytes(bytes.Clone(good), 4, []byte{0x0a, 0x05})},
		{"property without value", appendMsg(bytes.Clone(good), 4, func(b []byte) []byte { return appendStr(b, 1, "k") })},
		{"string as varint", appendU64(bytes.Clone(good), 5, 1)},
		{"negative batch size", appendI32(bytes.Clone(good), 11, -3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseMetadata(tc.in); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := PatchMetadata(nil, []byte{0xff}, Patch{DropTxn: true}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("patch of garbage: %v", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	cmd := AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(1, 2)})
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	f.Add(AppendFrame(nil, cmd))
	f.Add(AppendPayloadFrame(nil, cmd, md, []byte("payload")))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, _, err := ReadFrame(bytes.NewReader(b), nil, 1<<16)
		// Read into a buffer of its own (as the connection does for large
		// frames), the frame is the same.
		owned, _, _, oerr := readFrame(bytes.NewReader(b), nil, 1<<16, 0)
		if (err == nil) != (oerr == nil) || !bytes.Equal(owned.Command, fr.Command) ||
			!bytes.Equal(owned.Metadata, fr.Metadata) || !bytes.Equal(owned.Payload, fr.Payload) {
			t.Fatalf("owned read differs: %v, %v", err, oerr)
		}
		// Through the connection's frameReader (a small buffer; frames
		// above 16 bytes in buffers of their own), the same again.
		for _, rv := range []bool{false, true} {
			cr := &chunkReader{b: bytes.Clone(b), rng: rand.New(rand.NewPCG(uint64(len(b)), 3))}
			var readv func(a, b []byte) (int, error)
			if rv {
				readv = cr.readv
			}
			rf, _, rerr := newFrameReader(cr, readv, 64, 1<<16, 16).next()
			if (err == nil) != (rerr == nil) || !bytes.Equal(rf.Command, fr.Command) ||
				!bytes.Equal(rf.Metadata, fr.Metadata) || !bytes.Equal(rf.Payload, fr.Payload) {
				t.Fatalf("frameReader (vectored %v) differs: %v, %v", rv, err, rerr)
			}
		}
		if err != nil {
			return
		}
		if fr.HasPayload {
			// A frame that parsed re-encodes to a frame that parses the same.
			again, err := ParseFrame(AppendPayloadFrame(nil, fr.Command, fr.Metadata, fr.Payload)[4:])
			if err != nil || !bytes.Equal(again.Metadata, fr.Metadata) || !bytes.Equal(again.Payload, fr.Payload) {
				t.Fatalf("re-encoded frame: %v", err)
			}
		}
		_, _ = DecodeCommand(fr.Command)
	})
}

func FuzzDecodeCommand(f *testing.F) {
	for _, body := range []Body{
		&Message{ConsumerID: 1, MessageID: EntryID(1, 2)},
		&SendReceipt{ProducerID: 1, SequenceID: 2, MessageID: EntryID(3, 4)},
		&LookupResponse{RequestID: 1, Kind: LookupConnect, BrokerServiceURL: "pulsar://a:1"},
		&ProducerSuccess{RequestID: 1, ProducerName: "p", LastSequenceID: 7},
		&AuthChallenge{Challenge: AuthData{MethodName: "token", Data: []byte("x")}},
		&Connected{ServerVersion: "s", MaxMessageSize: 100},
	} {
		f.Add(AppendCommand(nil, body))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil || c.Body == nil {
			return
		}
		// Whatever decodes re-encodes to bytes that decode, and encoding
		// is then a fixed point (the first pass may drop values equal to
		// the protocol's defaults, and unknown fields).
		enc := AppendCommand(nil, c.Body)
		again, err := DecodeCommand(enc)
		if err != nil {
			t.Fatalf("re-encoded %v: %v", c.Type, err)
		}
		if enc2 := AppendCommand(nil, again.Body); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding of %v is not stable: %x != %x", c.Type, enc, enc2)
		}
	})
}

func FuzzParseMetadata(f *testing.F) {
	f.Add(MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, Properties: []KeyValue{{"k", "v"}}, NumMessagesInBatch: 3}.Append(nil))
	f.Add(MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2, TxnIDLeastBits: 1, TxnIDMostBits: 2}.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMetadata(b)
		_ = numMessages(b)
		if err != nil {
			return
		}
		for _, drop := range []bool{false, true} {
			p, err := PatchMetadata(nil, b, Patch{ReplicatedFrom: "x", Properties: []KeyValue{{"o", "1:2"}}, DropTxn: drop})
			if err != nil {
				t.Fatalf("patch of parsed metadata: %v", err)
			}
			pm, err := ParseMetadata(p)
			if err != nil {
				t.Fatalf("patched metadata does not parse: %v", err)
			}
			if pm.ReplicatedFrom != "x" || len(pm.Properties) != len(m.Properties)+1 || pm.SequenceID != m.SequenceID {
				t.Fatalf("patched %+v from %+v", pm, m)
			}
			if drop && pm.HasTxnID {
				t.Fatal("txn id survived DropTxn")
			}
		}
	})
}

// TestFramePoolPut: an entry without a buffer of its own (nil) is
// released like any other: nothing to recycle.
func TestFramePoolPut(t *testing.T) {
	var p framePool
	p.put(nil, 0)
	fb := p.get(ownAbove + 1)
	p.put(fb, fb.gen.Load())
	if fb.gen.Load() != 1 {
		t.Fatalf("generation %d after one release, want 1", fb.gen.Load())
	}
	p.put(fb, 0) // the same entry released again: not recycled twice
	if fb.gen.Load() != 1 {
		t.Fatalf("generation %d after a second release of the same entry, want 1", fb.gen.Load())
	}
}

func TestSizeClass(t *testing.T) {
	prev := 0
	capacity := map[int]int{} // of each class: a class holds one capacity
	for n := 1; n < 8<<20; n += 1 + n/37 {
		class, size := sizeClass(n)
		if c, ok := capacity[class]; ok && c != size {
			t.Fatalf("class %d holds capacities %d and %d: a buffer of the one is handed out for the other", class, c, size)
		}
		capacity[class] = size
		if size < n || size > n+n/4+1 {
			t.Fatalf("size class of %d: capacity %d", n, size)
		}
		if c2, s2 := sizeClass(size); c2 != class || s2 != size {
			t.Fatalf("a buffer of capacity %d (class %d) goes back to class %d", size, class, c2)
		}
		if class < prev {
			t.Fatalf("class of %d is %d, below %d", n, class, prev)
		}
		prev = class
	}
}
