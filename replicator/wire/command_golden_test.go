package wire

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire/internal/cmdgen"
)

// The command codec's golden test pins the bytes of every command and the
// result of decoding them, and of decoding every command with each of its
// fields left out or replaced by a value of every wire type: the codec can
// be rewritten (it is generated from commands.txt) without changing a byte
// or an error. Run with -update-golden to rewrite testdata/commands.golden
// after a change meant to alter the encoding, and review its diff.

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/commands.golden")

const goldenPath = "testdata/commands.golden"

// TestCommandGenUpToDate fails when command_gen.go is not what the
// generator writes from commands.txt.
func TestCommandGenUpToDate(t *testing.T) {
	src, err := os.ReadFile("commands.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := cmdgen.Generate(src, "commands.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("command_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	i := 0
	for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
		i++
	}
	t.Fatalf("command_gen.go is stale: line %d is %q, commands.txt makes it %q; run go generate ./replicator/wire",
		i+1, line(gl, i), line(wl, i))
}

// goldenCases are representative values of every command: all fields set
// (the first case of a type, also the base of the decode sweep) and the
// edges of the omission rules. The zero value of every type is added.
func goldenCases() []struct {
	name string
	body Body
} {
	id := MessageID{Ledger: 10, Entry: 20, Partition: 3, BatchIndex: 5, BatchSize: 9}
	all := ^uint64(0)
	return []struct {
		name string
		body Body
	}{
		{"full", &Connect{ClientVersion: "geo-sidecar 1", AuthMethodName: "token", AuthData: []byte("secret"), ProtocolVersion: 20, ProxyToBrokerURL: "broker-1:6650", SupportsAuthRefresh: true}},
		{"empty auth data", &Connect{ClientVersion: "v", AuthData: []byte{}, ProtocolVersion: -1}},
		{"long", &Connect{ClientVersion: strings.Repeat("v", 130), ProtocolVersion: 20}},
		{"full", &Connected{ServerVersion: "Pulsar 4.0.7", ProtocolVersion: 21, MaxMessageSize: 5 << 20}},
		{"negative max size", &Connected{ServerVersion: "s", ProtocolVersion: 20, MaxMessageSize: -1}},
		{"full", &SubscribeCommand{Topic: "persistent://t/n/x", Subscription: "s", SubType: KeyShared, ConsumerID: 1 << 40, RequestID: 7,
			ConsumerName: "c", PriorityLevel: -2, InitialPosition: Earliest, NoTopicCreation: true, ConsumerEpoch: 3, NonDurable: true,
			StartMessageID: &MessageID{Ledger: 1, Entry: 2, Partition: 4, BatchIndex: 0, BatchSize: 3}}},
		{"durable", &SubscribeCommand{Topic: "t", Subscription: "s", SubType: Failover, ConsumerID: 1, RequestID: 2, PriorityLevel: 1}},
		{"start at entry", &SubscribeCommand{Topic: "t", Subscription: "r", NonDurable: true, StartMessageID: &MessageID{Ledger: 1, Entry: 2, Partition: -1, BatchIndex: -1}}},
		{"key shared", &SubscribeCommand{Topic: "t", Subscription: "s", SubType: KeyShared, ConsumerID: 1, RequestID: 2, PriorityLevel: 1<<31 - 1,
			NoTopicCreation: true, KeySharedMeta: &KeySharedMeta{Mode: KeySharedAutoSplit, AllowOutOfOrderDelivery: true}}},
		{"key shared sticky", &SubscribeCommand{Topic: "t", Subscription: "s", SubType: KeyShared, KeySharedMeta: &KeySharedMeta{Mode: KeySharedSticky}}},
		{"key shared meta zero", &SubscribeCommand{Topic: "t", Subscription: "s", SubType: KeyShared, KeySharedMeta: &KeySharedMeta{}}},
		{"full", &ProducerCommand{Topic: "t", ProducerID: 1, RequestID: 2, ProducerName: "p", Encrypted: true}},
		{"unnamed", &ProducerCommand{Topic: "t", ProducerID: 1, RequestID: 2}},
		{"full", &ProducerSuccess{RequestID: 2, ProducerName: "p", LastSequenceID: 1 << 40, SchemaVersion: []byte{0, 1}, NotReady: true}},
		{"no sequence", &ProducerSuccess{RequestID: 2, ProducerName: "p", LastSequenceID: -1, SchemaVersion: []byte{}}},
		{"full", &Send{ProducerID: 1, SequenceID: 5, NumMessages: 10, HighestSequenceID: 14, IsChunk: true, Marker: true}},
		{"one message", &Send{ProducerID: 1, SequenceID: 5, NumMessages: 1}},
		{"negative count", &Send{ProducerID: 1, SequenceID: 5, NumMessages: -3}},
		{"full", &SendReceipt{ProducerID: 1, SequenceID: 5, MessageID: id, HighestSequenceID: 14}},
		{"duplicate", &SendReceipt{ProducerID: 1, SequenceID: 5, MessageID: MessageID{Ledger: all, Entry: all, Partition: -1, BatchIndex: -1}, HighestSequenceID: all}},
		{"full", &SendError{ProducerID: 1, SequenceID: 5, Error: ChecksumError, Message: "bad"}},
		{"full", &Message{ConsumerID: 1, MessageID: id, RedeliveryCount: 3, ConsumerEpoch: 4, HasConsumerEpoch: true}},
		{"epoch zero", &Message{ConsumerID: 1, MessageID: EntryID(1, 2), HasConsumerEpoch: true}},
		{"epoch without flag", &Message{ConsumerID: 1, MessageID: EntryID(1, 2), ConsumerEpoch: 4}},
		{"full", &Ack{ConsumerID: 1, AckType: AckCumulative, MessageIDs: []MessageID{id, EntryID(1, 2)}}},
		{"no ids", &Ack{ConsumerID: 1, MessageIDs: []MessageID{}}},
		{"entry -1", &Ack{ConsumerID: 1, AckType: AckCumulative, MessageIDs: []MessageID{EntryID(7, all)}}},
		{"full", &Flow{ConsumerID: 1, Permits: 1000}},
		{"full", &Success{RequestID: 9}},
		{"full", &Error{RequestID: 9, Error: TopicNotFound, Message: "no"}},
		{"full", &CloseProducer{ProducerID: 1, RequestID: 2, AssignedBrokerURL: "pulsar://b:1", AssignedBrokerURLTLS: "pulsar+ssl://b:2"}},
		{"full", &CloseConsumer{ConsumerID: 1, RequestID: 2, AssignedBrokerURL: "pulsar://b:1", AssignedBrokerURLTLS: "pulsar+ssl://b:2"}},
		{"full", &Ping{}},
		{"full", &Pong{}},
		{"full", &RedeliverUnacknowledged{ConsumerID: 1, MessageIDs: []MessageID{id, EntryID(3, 4)}, ConsumerEpoch: 2}},
		{"full", &PartitionedMetadata{Topic: "t", RequestID: 1}},
		{"full", &PartitionedMetadataResponse{RequestID: 1, Failed: true, Error: AuthorizationError, Message: "denied", Partitions: 4}},
		{"partitioned", &PartitionedMetadataResponse{RequestID: 1, Partitions: 4, Error: AuthorizationError, Message: "unsent"}},
		{"full", &Lookup{Topic: "t", RequestID: 1, Authoritative: true}},
		{"full", &LookupResponse{RequestID: 1, Kind: LookupFailed, BrokerServiceURL: "pulsar://a:1", BrokerServiceURLTLS: "pulsar+ssl://a:2",
			Authoritative: true, ProxyThroughServiceURL: true, Error: ServiceNotReady, Message: "later"}},
		{"redirect", &LookupResponse{RequestID: 1, Kind: LookupRedirect, BrokerServiceURL: "pulsar://a:1", Error: ServiceNotReady, Message: "unsent"}},
		{"connect", &LookupResponse{RequestID: 1, Kind: LookupConnect, BrokerServiceURLTLS: "pulsar+ssl://a:2"}},
		{"full", &ReachedEndOfTopic{ConsumerID: 4}},
		{"full", &ActiveConsumerChange{ConsumerID: 4, IsActive: true}},
		{"full", &AuthChallenge{ServerVersion: "s", Challenge: AuthData{MethodName: "token", Data: []byte("c")}, ProtocolVersion: 20}},
		{"no method", &AuthChallenge{Challenge: AuthData{Data: []byte{}}}},
		{"full", &AuthResponse{ClientVersion: "c", Response: AuthData{MethodName: "token", Data: []byte("r")}, ProtocolVersion: 20}},
		{"full", &TopicMigrated{ResourceID: 3, ResourceType: 1, BrokerServiceURL: "pulsar://x:1", BrokerServiceURLTLS: "pulsar+ssl://x:2"}},
		{"full", &GetLastMessageID{ConsumerID: 1, RequestID: 2}},
		{"full", &GetLastMessageIDResponse{RequestID: 2, LastMessageID: id, MarkDelete: MessageID{Ledger: 7, Entry: 3, Partition: -1, BatchIndex: -1}, HasMarkDelete: true}},
		{"no mark-delete", &GetLastMessageIDResponse{RequestID: 2, LastMessageID: EntryID(all, all), MarkDelete: id}},
		{"full", &GetSchema{RequestID: 1, Topic: "t", Version: []byte{0, 0, 0, 0, 0, 0, 0, 2}}},
		{"latest", &GetSchema{RequestID: 1, Topic: "t"}},
		{"full", &GetSchemaResponse{RequestID: 1, HasError: true, ErrorCode: TopicNotFound, ErrorMessage: "none",
			Schema: &Schema{Name: "n", Data: []byte("{}"), Type: 2, Properties: []KeyValue{{"k", "v"}, {"k2", ""}}}, Version: []byte{1}}},
		{"schema", &GetSchemaResponse{RequestID: 1, Schema: &Schema{Name: "n", Type: 4}, Version: []byte{}, ErrorCode: TopicNotFound, ErrorMessage: "unsent"}},
		{"full", &GetOrCreateSchema{RequestID: 1, Topic: "t", Schema: Schema{Name: "n", Data: []byte("{}"), Type: 4, Properties: []KeyValue{{"a", "b"}}}}},
		{"full", &GetOrCreateSchemaResponse{RequestID: 1, HasError: true, ErrorCode: IncompatibleSchema, ErrorMessage: "no", Version: []byte{0, 0, 0, 0, 0, 0, 0, 0}}},
		{"version", &GetOrCreateSchemaResponse{RequestID: 1, Version: []byte{0, 0, 0, 0, 0, 0, 0, 3}, ErrorMessage: "unsent"}},
	}
}

// goldenTypes are the command types the package decodes, by number.
func goldenTypes() []CommandType {
	var ts []CommandType
	for t := CommandType(0); t < 128; t++ {
		if newBody(t) != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

func TestCommandGolden(t *testing.T) {
	got := commandGolden(t)
	if *updateGolden {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	n := 0
	for i := 0; i < max(len(gl), len(wl)) && n < 20; i++ {
		g, w := line(gl, i), line(wl, i)
		if g != w {
			t.Errorf("%s:%d:\n got  %s\n want %s", goldenPath, i+1, g, w)
			n++
		}
	}
	t.Fatalf("the codec's bytes or decoding changed (go test -run TestCommandGolden -update-golden rewrites %s)", goldenPath)
}

func line(ls []string, i int) string {
	if i < len(ls) {
		return ls[i]
	}
	return "<end of file>"
}

func commandGolden(t *testing.T) []byte {
	var out bytes.Buffer
	out.WriteString("# Golden file of TestCommandGolden (command_golden_test.go); -update-golden rewrites it.\n")
	out.WriteString("#\n# Encode: a value, its BaseCommand bytes, and those bytes decoded.\n")
	cases := goldenCases()
	seen := map[CommandType]bool{}
	for _, ct := range goldenTypes() {
		cases = append(cases, struct {
			name string
			body Body
		}{"zero", newBody(ct)})
	}
	base := map[CommandType]Body{}
	for _, c := range cases {
		typ := c.body.Type()
		if !seen[typ] {
			seen[typ] = true
			base[typ] = c.body
		}
		enc := AppendCommand(nil, c.body)
		fmt.Fprintf(&out, "\n%v %s\n  in    %s\n  bytes %x\n", typ, c.name, dump(c.body), enc)
		got, err := DecodeCommand(enc)
		if err != nil {
			fmt.Fprintf(&out, "  error %v\n", err)
			continue
		}
		fmt.Fprintf(&out, "  out   %s\n", dump(got.Body))
	}
	for _, ct := range goldenTypes() {
		if base[ct] == nil {
			t.Errorf("no golden case of %v", ct)
		}
	}

	out.WriteString("\n# Decode: each command of the first case of its type, with field N left out\n")
	out.WriteString("# (drop) or appended once more as: varint 0, 2, 1<<33|7, -1; bytes empty,\n")
	out.WriteString("# bytes of a message id 5:6 with batch index 0, bytes 0x0a; fixed32 7; fixed64 8.\n")
	out.WriteString("# N runs over the fields of the encoding and the one after the highest.\n")
	out.WriteString("# ok lists the fields that differ from the first case's decoding.\n\n")
	for _, ct := range goldenTypes() {
		sub := base[ct].appendTo(nil)
		baseline, err := DecodeCommand(AppendCommand(nil, base[ct]))
		if err != nil {
			t.Fatalf("%v: %v", ct, err)
		}
		was := flatten(baseline.Body)
		var nums []protowire.Number
		for _, f := range rawFields(t, sub) {
			if !slices.Contains(nums, f.num) {
				nums = append(nums, f.num)
			}
		}
		slices.Sort(nums)
		top := protowire.Number(1)
		if len(nums) > 0 {
			top = nums[len(nums)-1] + 1
		}
		nums = append(nums, top)
		for _, n := range nums {
			for _, v := range goldenVariants {
				b := v.mutate(t, sub, n)
				in := appendBytes(appendU64(nil, 1, uint64(ct)), protowire.Number(ct), b)
				fmt.Fprintf(&out, "%v %d %s: %s\n", ct, n, v.name, decodeResult(in, was))
			}
		}
	}

	out.WriteString("\n# BaseCommand\n\n")
	for _, c := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"type only, flow", appendU64(nil, 1, uint64(TypeFlow))},
		{"type only, ping", appendU64(nil, 1, uint64(TypePing))},
		{"type only, pong", appendU64(nil, 1, uint64(TypePong))},
		{"type only, unknown", appendU64(nil, 1, 99)},
		{"unknown with body", appendBytes(appendU64(nil, 1, 99), 99, []byte{8, 1})},
		{"no type", appendBytes(nil, 11, (&Flow{ConsumerID: 1, Permits: 2}).appendTo(nil))},
		{"type as bytes", appendBytes(nil, 1, []byte{11})},
		{"type twice", appendBytes(appendU64(appendU64(nil, 1, 13), 1, 11), 11, (&Flow{ConsumerID: 1, Permits: 2}).appendTo(nil))},
		{"negative type", appendU64(nil, 1, uint64(1<<64-1))},
		{"type and body differ", appendBytes(appendU64(nil, 1, uint64(TypeFlow)), 13, (&Success{RequestID: 1}).appendTo(nil))},
		{"two bodies", appendBytes(appendBytes(appendU64(nil, 1, uint64(TypeFlow)), 11, nil), 11, nil)},
		{"body as varint", appendU64(appendU64(nil, 1, uint64(TypeSuccess)), 13, 1)},
		{"body before type", appendU64(appendBytes(nil, 13, appendU64(nil, 1, 5)), 1, uint64(TypeSuccess))},
		{"bad tag", []byte{0x80}},
		{"truncated body", AppendCommand(nil, &Flow{ConsumerID: 1, Permits: 2})[:5]},
		{"group", append(appendU64(nil, 1, uint64(TypePing)), 0x13, 0x14)},
	} {
		fmt.Fprintf(&out, "%s: %s\n", c.name, decodeResult(c.in, nil))
	}
	return out.Bytes()
}

func decodeResult(in []byte, was []string) string {
	c, err := DecodeCommand(in)
	if err != nil {
		return "error " + err.Error()
	}
	if c.Body == nil {
		return fmt.Sprintf("ok %v without body", c.Type)
	}
	if was == nil {
		return fmt.Sprintf("ok %v %s", c.Type, dump(c.Body))
	}
	now := flatten(c.Body)
	var diff []string
	for _, kv := range now {
		if !slices.Contains(was, kv) {
			diff = append(diff, kv)
		}
	}
	for _, kv := range was {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(now, func(s string) bool { return strings.HasPrefix(s, k+"=") }) {
			diff = append(diff, k+" gone")
		}
	}
	if len(diff) == 0 {
		return "ok same"
	}
	return "ok " + strings.Join(diff, " ")
}

type rawField struct {
	num protowire.Number
	b   []byte // the whole field, tag included
}

func rawFields(t *testing.T, b []byte) []rawField {
	var fs []rawField
	for len(b) > 0 {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			t.Fatalf("%x: %v", b, protowire.ParseError(n))
		}
		fs = append(fs, rawField{num, b[:n]})
		b = b[n:]
	}
	return fs
}

var goldenVariants = []struct {
	name   string
	mutate func(t *testing.T, sub []byte, n protowire.Number) []byte
}{
	{"drop", func(t *testing.T, sub []byte, n protowire.Number) []byte {
		var b []byte
		for _, f := range rawFields(t, sub) {
			if f.num != n {
				b = append(b, f.b...)
			}
		}
		return b
	}},
	{"v0", varintVariant(0)},
	{"v2", varintVariant(2)},
	{"vbig", varintVariant(1<<33 | 7)},
	{"vneg", varintVariant(1<<64 - 1)},
	{"b0", bytesVariant(nil)},
	{"bid", bytesVariant(MessageID{Ledger: 5, Entry: 6, Partition: -1}.appendTo(nil))},
	{"bbad", bytesVariant([]byte{0x0a})},
	{"f32", func(_ *testing.T, sub []byte, n protowire.Number) []byte {
		return protowire.AppendFixed32(protowire.AppendTag(bytes.Clone(sub), n, protowire.Fixed32Type), 7)
	}},
	{"f64", func(_ *testing.T, sub []byte, n protowire.Number) []byte {
		return protowire.AppendFixed64(protowire.AppendTag(bytes.Clone(sub), n, protowire.Fixed64Type), 8)
	}},
}

func varintVariant(v uint64) func(*testing.T, []byte, protowire.Number) []byte {
	return func(_ *testing.T, sub []byte, n protowire.Number) []byte { return appendU64(bytes.Clone(sub), n, v) }
}

func bytesVariant(v []byte) func(*testing.T, []byte, protowire.Number) []byte {
	return func(_ *testing.T, sub []byte, n protowire.Number) []byte { return appendBytes(bytes.Clone(sub), n, v) }
}

// dump writes a body as its flattened fields, deterministically (no
// pointers, no String methods).
func dump(body Body) string {
	return fmt.Sprintf("%T{%s}", body, strings.Join(flatten(body), " "))
}

// flatten lists a value's fields as path=value, nil and empty slices told
// apart.
func flatten(v any) []string {
	var out []string
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				out = append(out, path+"=nil")
				return
			}
			if path != "" {
				out = append(out, path+"=&")
			}
			walk(path, v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				p := v.Type().Field(i).Name
				if path != "" {
					p = path + "." + p
				}
				walk(p, v.Field(i))
			}
		case reflect.Slice:
			switch {
			case v.IsNil():
				out = append(out, path+"=nil")
			case v.Type().Elem().Kind() == reflect.Uint8:
				out = append(out, path+"=0x"+hex.EncodeToString(v.Bytes()))
			default:
				out = append(out, path+".len="+strconv.Itoa(v.Len()))
				for i := range v.Len() {
					walk(fmt.Sprintf("%s[%d]", path, i), v.Index(i))
				}
			}
		case reflect.String:
			out = append(out, path+"="+strconv.Quote(v.String()))
		case reflect.Bool:
			out = append(out, path+"="+strconv.FormatBool(v.Bool()))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			out = append(out, path+"="+strconv.FormatInt(v.Int(), 10))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			out = append(out, path+"="+strconv.FormatUint(v.Uint(), 10))
		default:
			panic("flatten: " + v.Kind().String())
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}

// BenchmarkCommandCodec is the codec alone on the commands of the data
// path: encode SEND, ACK and FLOW, decode MESSAGE and SEND_RECEIPT.
func BenchmarkCommandCodec(b *testing.B) {
	id := MessageID{Ledger: 123456, Entry: 789, Partition: -1, BatchIndex: -1}
	encode := []Body{
		&Send{ProducerID: 1, SequenceID: 1 << 20, NumMessages: 127, HighestSequenceID: 1<<20 + 126},
		&Ack{ConsumerID: 1, MessageIDs: []MessageID{id}},
		&Flow{ConsumerID: 1, Permits: 1000},
	}
	decode := [][]byte{
		AppendCommand(nil, &Message{ConsumerID: 1, MessageID: id, RedeliveryCount: 1}),
		AppendCommand(nil, &SendReceipt{ProducerID: 1, SequenceID: 1 << 20, MessageID: id, HighestSequenceID: 1<<20 + 126}),
	}
	b.Run("encode", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			for _, body := range encode {
				buf = AppendCommand(buf[:0], body)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, in := range decode {
				if _, err := DecodeCommand(in); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
