package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/crypto"
)

// sent is what the test wrote on the origin, to compare with the copy.
type sent struct {
	payload     []byte
	null        bool
	key         string
	orderingKey string
	props       map[string]string
	eventTime   time.Time
}

// TestEntryPipeFidelity writes what real applications send (every
// compression codec, batched and not, keys, ordering keys, properties,
// event times, null values, an encrypted producer, a chunked message of
// 20 MB, replicate_to and disableReplication) and checks each copy on the
// target field by field against the origin: forwarded entry by entry,
// nothing is unpacked, so everything must be equal, publish time and
// producer name included.
func TestEntryPipeFidelity(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "fidelity")
	east, west := Client(t, "east"), Client(t, "west")
	keys := rsaKeys(t)
	enc := &pulsar.ProducerEncryptionInfo{KeyReader: keys, Keys: []string{"e2e"}}

	type producerCase struct {
		name string
		opts pulsar.ProducerOptions
		msgs int
	}
	cases := []producerCase{
		{name: "batched-none", opts: pulsar.ProducerOptions{CompressionType: pulsar.NoCompression}, msgs: 50},
		{name: "batched-lz4", opts: pulsar.ProducerOptions{CompressionType: pulsar.LZ4}, msgs: 50},
		{name: "batched-zlib", opts: pulsar.ProducerOptions{CompressionType: pulsar.ZLib}, msgs: 50},
		{name: "batched-zstd", opts: pulsar.ProducerOptions{CompressionType: pulsar.ZSTD}, msgs: 50},
		{name: "single-none", opts: pulsar.ProducerOptions{DisableBatching: true}, msgs: 10},
		{name: "single-zstd", opts: pulsar.ProducerOptions{DisableBatching: true, CompressionType: pulsar.ZSTD}, msgs: 10},
		{name: "encrypted", opts: pulsar.ProducerOptions{Encryption: enc}, msgs: 20},
	}
	var want []sent
	wantProducer := map[string]string{} // payload -> producer name
	evt := time.UnixMilli(1_700_000_000_123)
	for _, c := range cases {
		c.opts.Topic, c.opts.Name = topic, "app-"+c.name
		c.opts.BatchingMaxPublishDelay = 50 * time.Millisecond
		p, err := east.CreateProducer(c.opts)
		if err != nil {
			t.Fatalf("producer %s: %v", c.name, err)
		}
		for i := range c.msgs {
			m := sent{payload: []byte(fmt.Sprintf("%s-%d-%s", c.name, i, strings.Repeat("x", i*7))),
				key: fmt.Sprintf("k%d", i%5), orderingKey: fmt.Sprintf("o%d", i%3),
				props: map[string]string{"app": c.name, "i": fmt.Sprint(i)}, eventTime: evt.Add(time.Duration(i) * time.Millisecond)}
			if i == 3 && c.name == "batched-none" {
				m.payload, m.null = nil, true
			}
			want = append(want, m)
			wantProducer[string(m.payload)] = c.opts.Name
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: m.payload, Key: m.key, OrderingKey: m.orderingKey,
				Properties: m.props, EventTime: m.eventTime}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					t.Errorf("send %s: %v", c.name, err)
				}
			})
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	// replicate_to: only the messages naming west (or naming no cluster)
	// are copied.
	rp, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "app-replicate-to", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		payload string
		to      []string
		off     bool
	}{{"to-east-only", []string{"east"}, false}, {"to-west", []string{"east", "west"}, false}, {"disabled", nil, true}} {
		if _, err := rp.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(m.payload),
			ReplicationClusters: m.to, DisableReplication: m.off}); err != nil {
			t.Fatal(err)
		}
	}
	rp.Close()
	want = append(want, sent{payload: []byte("to-west")})
	wantProducer["to-west"] = "app-replicate-to"

	// A chunked message of 20 MB, in 1 MB chunks.
	big := bytes.Repeat([]byte("0123456789abcdef"), 20<<20/16)
	cp, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "app-chunked", DisableBatching: true,
		EnableChunking: true, ChunkMaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Send(context.Background(), &pulsar.ProducerMessage{Payload: big, Key: "big"}); err != nil {
		t.Fatalf("chunked send: %v", err)
	}
	cp.Close()
	want = append(want, sent{payload: big, key: "big"})
	wantProducer[string(big)] = "app-chunked"

	origin := map[string]pulsar.Message{}
	for _, m := range readAll(t, east, topic, keys, len(want)+2) {
		origin[string(m.Payload())] = m
	}
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	got := readAll(t, west, topic, keys, len(want))
	if len(got) != len(want) {
		t.Fatalf("west has %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		g, o, w := got[i], origin[string(want[i].payload)], want[i]
		what := fmt.Sprintf("message %d (%.20q)", i, w.payload)
		if !bytes.Equal(g.Payload(), w.payload) || g.IsNullValue() != w.null {
			t.Errorf("%s: payload %d bytes (null %v), want %d bytes (null %v)", what, len(g.Payload()), g.IsNullValue(), len(w.payload), w.null)
			continue
		}
		if g.Key() != w.key || g.OrderingKey() != w.orderingKey {
			t.Errorf("%s: key %q ordering key %q, want %q %q", what, g.Key(), g.OrderingKey(), w.key, w.orderingKey)
		}
		if w.props != nil && !maps.Equal(appProps(g.Properties()), w.props) {
			t.Errorf("%s: properties %v, want %v", what, appProps(g.Properties()), w.props)
		}
		if !g.EventTime().Equal(o.EventTime()) || !g.PublishTime().Equal(o.PublishTime()) {
			t.Errorf("%s: event/publish time %v %v, origin's %v %v", what, g.EventTime(), g.PublishTime(), o.EventTime(), o.PublishTime())
		}
		if g.ProducerName() != wantProducer[string(w.payload)] {
			t.Errorf("%s: producer name %q, want the origin's %q", what, g.ProducerName(), wantProducer[string(w.payload)])
		}
		if !g.IsReplicated() || g.GetReplicatedFrom() != "east" {
			t.Errorf("%s: replicated %v from %q, want from east", what, g.IsReplicated(), g.GetReplicatedFrom())
		}
	}

	// The read-back recognises the copies: with the cursor gone (a new
	// one starts at the earliest entry), a restarted sidecar skips every
	// entry it finds on west instead of copying it again.
	s.Stop()
	if err := Admin(t, "east").Subscriptions().Delete(*mustTopicName(t, topic), "geo-sidecar.repl.west"); err != nil {
		t.Fatalf("delete the cursor: %v", err)
	}
	s = s.Restart()
	Eventually(t, time.Minute, func() error {
		if v := s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`); v < float64(len(want)) {
			return fmt.Errorf("%v messages skipped as already on west, want %d", v, len(want))
		}
		return nil
	})
	if again := readAllAs(t, west, topic, "fidelity-recheck", keys, len(want)+1); len(again) != len(want) {
		t.Errorf("after a restart with a new cursor west has %d messages, want %d (copies recognised, none sent again)", len(again), len(want))
	}
	t.Logf("entry pipe fidelity: %d messages (7 producers: none/LZ4/ZLIB/ZSTD batched, none/ZSTD single, encrypted; 20 MB chunked; replicate_to) equal field by field on west; %.0f entries skipped by replicate_to",
		len(want), s.Metric("geo_sidecar_skipped_messages_total", `reason="replicate-to"`))
}

// appProps drops the sidecar's own origin properties, which a
// non-batched copy shows (they are entry-level metadata).
func appProps(p map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		if !strings.HasPrefix(k, "geo-sidecar.") {
			out[k] = v
		}
	}
	return out
}

// readAll reads every message of topic from the start (as a new
// subscription "fidelity-check") with a consumer that can decrypt the
// test's encrypted producer, until n arrived (or a minute passed). (A
// Reader would do, but pulsar-client-go's Reader panics on a message it
// cannot decrypt.)
func readAll(t *testing.T, c pulsar.Client, topic string, keys crypto.KeyReader, n int) []pulsar.Message {
	t.Helper()
	return readAllAs(t, c, topic, "fidelity-check", keys, n)
}

func readAllAs(t *testing.T, c pulsar.Client, topic, sub string, keys crypto.KeyReader, n int) []pulsar.Message {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		Decryption:                  &pulsar.MessageDecryptionInfo{KeyReader: keys}})
	if err != nil {
		t.Fatalf("consumer on %s: %v", topic, err)
	}
	defer cons.Close()
	timeout := time.Minute
	if sub != "fidelity-check" {
		timeout = 5 * time.Second // counting what is there: wait a little past the last
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got []pulsar.Message
	for len(got) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			break
		}
		_ = cons.Ack(m)
		got = append(got, m)
	}
	return got
}

// rsaKeys makes an RSA key pair with openssl for the encrypted producer.
func rsaKeys(t *testing.T) *crypto.FileKeyReader {
	t.Helper()
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "private.pem"), filepath.Join(dir, "public.pem")
	for _, args := range [][]string{
		{"genrsa", "-traditional", "-out", priv, "2048"}, // PKCS #1, as pulsar-client-go reads it
		{"rsa", "-in", priv, "-pubout", "-out", pub},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	return crypto.NewFileKeyReader(pub, priv)
}

// TestForgedOriginOnTarget: a producer other than the sidecar writes, on
// the target, messages that claim to be copies of every source entry not
// yet replicated (origin cluster and position, a made-up signature). The
// sidecar must skip none of them: proof of a copy is a valid signature.
func TestForgedOriginOnTarget(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "forged")
	east, west := Client(t, "east"), Client(t, "west")
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []pulsar.MessageID
	for i := range 20 {
		id, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	p.Close()
	forger, err := west.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "geo-sidecar-impostor"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		for _, batch := range []int32{-1, 0} {
			oid := fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), batch)
			forger.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte("forged"), Properties: map[string]string{
				"geo-sidecar.origin-cluster": "east", "geo-sidecar.origin-id": oid,
				"geo-sidecar.origin-sig": "00112233445566778899aabbccddeeff"}}, nil)
		}
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	forger.Close()
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	got := drain(t, west, topic, "check", 60, 30*time.Second, 2*time.Second)
	missing, dups, breaks := checkCopies(t, onlyPrefix(got, "m-"), "m", 20, false)
	t.Logf("forged origin data on the target: 20 messages, %d missing, %d duplicates, %d out of order; %.0f skipped as already copied",
		missing, dups, breaks, s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`))
	if v := s.Metric("geo_sidecar_skipped_messages_total", `reason="already-copied"`); v != 0 {
		t.Errorf("%v messages skipped as already copied on the strength of forged data", v)
	}
}

func onlyPrefix(msgs []pulsar.Message, prefix string) []pulsar.Message {
	var out []pulsar.Message
	for _, m := range msgs {
		if strings.HasPrefix(string(m.Payload()), prefix) {
			out = append(out, m)
		}
	}
	return out
}

// Avro schemas of the schema test: v2 adds a field with a default, so the
// namespace's default compatibility accepts it after v1.
const (
	avroV1 = `{"type":"record","name":"Order","namespace":"e2e","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}`
	avroV2 = `{"type":"record","name":"Order","namespace":"e2e","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"},{"name":"qty","type":"int","default":1}]}`
)

type orderV1 struct {
	ID   int32  `avro:"id"`
	Item string `avro:"item"`
}

type orderV2 struct {
	ID   int32  `avro:"id"`
	Item string `avro:"item"`
	Qty  int32  `avro:"qty"`
}

// TestEntryPipeSchemas: a topic whose producers move from Avro schema v1
// to v2. Schema versions are per cluster, so each copy must point at the
// target's version of the very schema it was written with, registered
// there by the sidecar, and decode with it.
func TestEntryPipeSchemas(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "avro")
	east, west := Client(t, "east"), Client(t, "west")
	for v, def := range []string{avroV1, avroV2} {
		p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(def, nil)})
		if err != nil {
			t.Fatalf("producer with schema v%d: %v", v+1, err)
		}
		for i := range 5 {
			var val any = &orderV1{ID: int32(i), Item: fmt.Sprintf("v1-%d", i)}
			if v == 1 {
				val = &orderV2{ID: int32(10 + i), Item: fmt.Sprintf("v2-%d", i), Qty: int32(i + 2)}
			}
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Value: val}); err != nil {
				t.Fatalf("send v%d: %v", v+1, err)
			}
		}
		p.Close()
	}
	StartSidecar(t, []string{"east", "west"}, entry("east", ns, all, "west"))
	got := Consume(t, west, topic, "check", 10, time.Minute)
	if len(got) != 10 {
		t.Fatalf("west has %d messages, want 10", len(got))
	}
	// East's registrations of v1 and v2 (versions 0 and 1 there), as the
	// client normalised them.
	short := strings.TrimPrefix(topic, "persistent://")
	var eastDefs [2]string
	for v := range eastDefs {
		info, err := Admin(t, "east").Schemas().GetSchemaInfoByVersion(short, int64(v))
		if err != nil {
			t.Fatalf("east schema version %d: %v", v, err)
		}
		eastDefs[v] = string(info.Schema)
	}
	admin := Admin(t, "west")
	for i, m := range got {
		ver := m.SchemaVersion()
		if len(ver) != 8 {
			t.Fatalf("message %d: schema version %x, want 8 bytes", i, ver)
		}
		info, err := admin.Schemas().GetSchemaInfoByVersion(short, int64(binary.BigEndian.Uint64(ver)))
		if err != nil {
			t.Fatalf("message %d: schema version %d on west: %v", i, binary.BigEndian.Uint64(ver), err)
		}
		want, wantDef := "v1", eastDefs[0]
		if i >= 5 {
			want, wantDef = "v2", eastDefs[1]
		}
		if !sameJSON(t, string(info.Schema), wantDef) {
			t.Errorf("message %d: west's schema for it is %s, want %s's", i, info.Schema, want)
			continue
		}
		if i < 5 {
			var o orderV1
			if err := pulsar.NewAvroSchema(avroV1, nil).Decode(m.Payload(), &o); err != nil || o.Item != fmt.Sprintf("v1-%d", i) {
				t.Errorf("message %d: decoded %+v, %v with v1", i, o, err)
			}
		} else {
			var o orderV2
			if err := pulsar.NewAvroSchema(avroV2, nil).Decode(m.Payload(), &o); err != nil || o.Qty != int32(i-5+2) {
				t.Errorf("message %d: decoded %+v, %v with v2", i, o, err)
			}
		}
	}
	t.Logf("schemas: 5 messages written with Avro v1 and 5 with v2 on east; on west each points at west's registration of its own schema and decodes with it")
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}
