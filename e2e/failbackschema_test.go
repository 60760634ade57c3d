package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestFailbackSchema: geo-sidecar failback copies late (--park, --replay)
// entries written with a schema, each under the target's number for its
// own schema: schema numbers are per cluster and per topic, and the
// numbers here are made to differ. (Batched, one message a batch: the
// late flag is then on the batch, which applications do not see; the
// check tells the copies by their values instead.) East (the test bed's north) registers
// Avro v1 then v2 (versions 0 and 1 there) and writes 6 messages with v2
// and then 4 with v1, none of which reaches west (no sidecar runs: the
// whole topic is the stranded tail); west's own producer wrote with v2
// first (version 0 on west), and the park topic takes the tail's first
// schema, v2, first. So a late copy under east's number would name the
// other schema on west and on the park topic.
//
// First --park to a topic holding a STRING schema: the target refuses
// the Avro schema there, the failback stops naming the topic and the
// entry, exit 2, nothing copied. Then --park to a fresh topic and
// --replay: every copy decodes, with the schema its own number names on
// its cluster, to exactly the values written: checked by Pulsar's Java
// client reading with Schema.AUTO_CONSUME() (e2e/pulsar/Failback.java
// typed) and by the test through west's and north's schema registries.
// A third run finds nothing stranded.
func TestFailbackSchema(t *testing.T) {
	if err := Up(home); err != nil {
		t.Fatal(err)
	}
	awaitClusters(t, home, "west")
	UseClusters(t, home, "west")
	ns := NewNamespace(t, home, "west")
	topic := Topic(ns, "orders")
	CreatePartitioned(t, topic, 2, home, "west")
	partitions := []string{topic + "-partition-0", topic + "-partition-1"}
	east, west := Client(t, home), Client(t, "west")
	cfg := filepath.Join(t.TempDir(), "geo.yaml")
	if err := os.WriteFile(cfg, []byte(Config(FreeAddr(t), []string{home, "west"}, entry(home, ns, all, "west"))), 0o600); err != nil {
		t.Fatal(err)
	}
	java := newJavaProgram(t, "Failback.java")

	sendAvro := func(c pulsar.Client, def string, vals ...any) {
		t.Helper()
		// Batched, one message a batch (each send waits for its receipt):
		// pulsar-client-go 0.21 writes no schema version on unbatched
		// messages (genMetadata leaves it out), only on batches.
		// Partitions in turn from partition 0, whatever the timing: the
		// default router keeps a partition for its batching delay, and
		// sends within 10 ms of each other all went to one, so that a
		// partition's tail could begin with a v1 message, register v1
		// first on the park topic, and give it east's numbers (seen in
		// the e2e run of 2026-12-08: "the numbers did not differ").
		next := 0
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(def, nil),
			MessageRouter: func(_ *pulsar.ProducerMessage, tm pulsar.TopicMetadata) int {
				i := next % int(tm.NumPartitions())
				next++
				return i
			}})
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
		defer p.Close()
		for _, v := range vals {
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Value: v}); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
	}
	// West's own traffic first, with v2: west's version 0 is v2.
	sendAvro(west, avroV2, &orderV2{ID: 900, Item: "w", Qty: 9})
	// East: v1 registered first (version 0), then the messages.
	sendAvro(east, avroV1)
	type value struct {
		ID   int32
		Item string
		Qty  int32 // 0: v1, no such field
	}
	var want []value
	var v2s, v1s []any
	for i := range 6 {
		v := orderV2{ID: int32(i), Item: fmt.Sprintf("v2-%d", i), Qty: int32(i + 2)}
		v2s = append(v2s, &v)
		want = append(want, value{v.ID, v.Item, v.Qty})
	}
	for i := range 4 {
		v := orderV1{ID: int32(100 + i), Item: fmt.Sprintf("v1-%d", i)}
		v1s = append(v1s, &v)
		want = append(want, value{v.ID, v.Item, 0})
	}
	sendAvro(east, avroV2, v2s...)
	sendAvro(east, avroV1, v1s...)
	sortValues := func(vs []value) {
		slices.SortFunc(vs, func(a, b value) int { return int(a.ID - b.ID) })
	}
	sortValues(want)

	// A park topic whose schema is a STRING: the target refuses Avro there.
	strTopic := Topic(ns, "aside-string")
	sp, err := east.CreateProducer(pulsar.ProducerOptions{Topic: strTopic, Schema: pulsar.NewStringSchema(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Send(context.Background(), &pulsar.ProducerMessage{Value: "not an order"}); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	code, rep, errOut := runFailback(t, cfg, topic, "--park", strTopic)
	t.Logf("failback --park %s (a STRING schema): exit %d, copied %d: %s", strTopic, code, rep.Copied, strings.TrimSpace(errOut))
	if code != 2 || rep.Copied != 0 || rep.RPO.Entries != int64(len(want)) ||
		!strings.Contains(errOut, strTopic) || !strings.Contains(errOut, "entry ") || !strings.Contains(errOut, "does not take it") {
		t.Errorf("failback --park to a topic of another schema: exit %d, copied %d, stranded %d; want 2, 0, %d and an error naming %s and the entry\n%s",
			code, rep.Copied, rep.RPO.Entries, len(want), strTopic, errOut)
	}
	if n := len(readOutside(t, east, []string{strTopic})); n != 1 {
		t.Errorf("the refused park topic holds %d messages, want its own 1", n)
	}

	parkTopic := Topic(ns, "orders-stranded")
	code, rep, errOut = runFailback(t, cfg, topic, "--park", parkTopic)
	t.Logf("failback --park: exit %d in %.1f s, stranded %d, copied %d", code, rep.Seconds, rep.RPO.Entries, rep.Copied)
	if code != 0 || rep.Copied != int64(len(want)) {
		t.Fatalf("failback --park: exit %d, copied %d, want 0, %d\n%s", code, rep.Copied, len(want), errOut)
	}
	code, rep, errOut = runFailback(t, cfg, topic, "--replay")
	t.Logf("failback --replay: exit %d in %.1f s, stranded %d, copied %d", code, rep.Seconds, rep.RPO.Entries, rep.Copied)
	if code != 0 || rep.Copied != int64(len(want)) {
		t.Fatalf("failback --replay: exit %d, copied %d, want 0, %d\n%s", code, rep.Copied, len(want), errOut)
	}
	code, rep, errOut = runFailback(t, cfg, topic, "--replay")
	if code != 0 || rep.RPO.Entries != 0 || rep.Copied != 0 {
		t.Errorf("failback --replay again: exit %d, stranded %d, copied %d; want 0, 0, 0\n%s", code, rep.RPO.Entries, rep.Copied, errOut)
	}

	// The schema-aware reader of each cluster: every late copy decodes to
	// exactly what was written.
	type typed struct {
		Topic         string         `json:"topic"`
		Fields        map[string]any `json:"fields"`
		SchemaVersion int64          `json:"schema_version"`
		Late          bool           `json:"late"`
		Error         string         `json:"error"`
	}
	read := func(cluster string, topics ...string) []typed {
		t.Helper()
		lines, err := java.run(append([]string{"typed", Get(cluster).ServiceURL, "3"}, topics...)...)
		if err != nil {
			t.Fatalf("Failback.java typed on %s: %v", cluster, err)
		}
		var out []typed
		for _, l := range lines {
			var m typed
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("Failback.java printed %s: %v", l, err)
			}
			out = append(out, m)
		}
		return out
	}
	check := func(where string, msgs []typed) {
		t.Helper()
		var got []value
		versions := map[int64]int{}
		for _, m := range msgs {
			if m.Error != "" {
				t.Errorf("%s: a message under schema version %d does not decode: %s", where, m.SchemaVersion, m.Error)
				continue
			}
			if m.Fields["item"] == "w" {
				continue // west's own
			}
			versions[m.SchemaVersion]++
			id, _ := m.Fields["id"].(float64)
			item, _ := m.Fields["item"].(string)
			qty, _ := m.Fields["qty"].(float64)
			v := value{int32(id), item, int32(qty)}
			if _, has := m.Fields["qty"]; has != (v.Qty != 0) || len(m.Fields) != 2 && len(m.Fields) != 3 {
				t.Errorf("%s: a late copy decodes to %v", where, m.Fields)
			}
			got = append(got, v)
		}
		sortValues(got)
		t.Logf("%s: %d late copies (schema versions there: %v) decode with Schema.AUTO_CONSUME() to %v", where, len(got), versions, got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the late copies decode to %v\nwant %v", where, got, want)
		}
	}
	check("west "+topic, read("west", topic))
	check("north "+parkTopic, read(home, parkTopic))

	// The same through the registries: each copy's number names, on its
	// cluster and topic, the schema its source entry's number names on
	// east, and the numbers differ.
	eastDef := map[string]string{} // payload → east's schema
	for _, m := range readSchemas(t, east, partitions) {
		eastDef[string(m.Payload())] = schemaDef(t, home, topic, m.SchemaVersion())
	}
	for _, c := range []struct {
		cluster, topic string
		client         pulsar.Client
		parts          []string
	}{{"west", topic, west, partitions}, {home, parkTopic, east, []string{parkTopic}}} {
		differ := 0
		n := 0
		for _, m := range readSchemas(t, c.client, c.parts) {
			src, ok := eastDef[string(m.Payload())]
			if !ok {
				continue // west's own
			}
			n++
			if got := schemaDef(t, c.cluster, c.topic, m.SchemaVersion()); !sameJSON(t, got, src) {
				t.Errorf("%s %s: a late copy's schema version %x names %s there, its entry's on east %s", c.cluster, c.topic, m.SchemaVersion(), got, src)
			}
			if got := schemaDef(t, home, topic, m.SchemaVersion()); !sameJSON(t, got, src) {
				differ++
			}
		}
		t.Logf("%s %s: each of the %d late copies names its own schema; %d of them under a number that names the other schema on east", c.cluster, c.topic, n, differ)
		if n != len(want) {
			t.Errorf("%s %s: %d late copies, want %d", c.cluster, c.topic, n, len(want))
		}
		if differ == 0 {
			t.Errorf("%s %s: the numbers did not differ from east's: the test proves nothing", c.cluster, c.topic)
		}
	}
}

// readSchemas reads every message of each partition with
// pulsar-client-go readers (bytes; the schema version as stored).
func readSchemas(t *testing.T, c pulsar.Client, partitions []string) []pulsar.Message {
	t.Helper()
	var out []pulsar.Message
	for _, part := range partitions {
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: part, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatalf("reader of %s: %v", part, err)
		}
		for r.HasNext() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := r.Next(ctx)
			cancel()
			if err != nil {
				r.Close()
				t.Fatalf("read %s: %v", part, err)
			}
			out = append(out, m)
		}
		r.Close()
	}
	return out
}

// schemaDef is the definition schema version ver names for topic on
// cluster ("" when there is none).
func schemaDef(t *testing.T, cluster, topic string, ver []byte) string {
	t.Helper()
	if len(ver) != 8 {
		return ""
	}
	info, err := Admin(t, cluster).Schemas().GetSchemaInfoByVersion(strings.TrimPrefix(topic, "persistent://"), int64(binary.BigEndian.Uint64(ver)))
	if err != nil {
		return ""
	}
	return string(info.Schema)
}
