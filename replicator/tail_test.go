package replicator

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// fakeEntries is a remote partition as the tail scan sees it: ledgers of
// entries, each an entryCopy or a read error.
type fakeEntries struct {
	ls      []fakeLedger
	reads   []string // "ledger:entry" in read order
	listErr error
}

type fakeLedger struct {
	id      int64
	entries []fakeEntry
}

type fakeEntry struct {
	copy entryCopy
	err  error
}

func (f *fakeEntries) lastEntry(context.Context) (int64, int64, error) {
	for i := len(f.ls) - 1; i >= 0; i-- {
		if n := len(f.ls[i].entries); n > 0 {
			return f.ls[i].id, int64(n - 1), nil
		}
	}
	return -1, -1, nil
}

func (f *fakeEntries) ledgers(context.Context) ([]ledgerInfo, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []ledgerInfo
	for _, l := range f.ls {
		out = append(out, ledgerInfo{id: l.id, entries: int64(len(l.entries))})
	}
	return out, nil
}

func (f *fakeEntries) entry(_ context.Context, ledger, entry int64) (entryCopy, error) {
	f.reads = append(f.reads, posString(marker.Position{Ledger: ledger, Entry: entry, Batch: -1}))
	for _, l := range f.ls {
		if l.id == ledger && entry >= 0 && entry < int64(len(l.entries)) {
			e := l.entries[entry]
			return e.copy, e.err
		}
	}
	return entryCopy{}, errNoEntry
}

func posString(p marker.Position) string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }

const ours = "geo-sidecar.east-->west"

// copyOfEntry is an entry our producer wrote, holding copies of the given
// origin positions (entries of ledger 10 at the origin).
func copyOfEntry(entries ...int64) fakeEntry {
	e := entryCopy{producer: ours}
	for _, n := range entries {
		e.origins = append(e.origins, origin{cluster: "east", pos: marker.Position{Ledger: 10, Entry: n, Batch: -1}, ok: true})
	}
	return fakeEntry{copy: e}
}

func foreign(producer string, entries ...int64) fakeEntry {
	e := copyOfEntry(entries...)
	e.copy.producer = producer
	return e
}

func positions(entries ...int64) copySet {
	s := copySet{}
	for _, n := range entries {
		s[marker.Position{Ledger: 10, Entry: n, Batch: -1}] = struct{}{}
	}
	return s
}

func TestScanCopies(t *testing.T) {
	boom := errors.New("admin down")
	tests := []struct {
		name      string
		ledgers   []fakeLedger
		listErr   error
		from      int64 // origin entry of the first message to send
		limit     int
		want      copySet
		wantErr   error
		wantReads int
	}{
		{name: "empty topic", want: copySet{}},
		{name: "stops at the first copy older than from",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{
				copyOfEntry(1, 2), copyOfEntry(3, 4), copyOfEntry(5, 6), copyOfEntry(7)}}},
			from: 5, limit: 100, want: positions(5, 6, 7), wantReads: 3},
		{name: "a copy from before from in the same batch ends the walk",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{copyOfEntry(1), copyOfEntry(4, 5, 6)}}},
			from:    5, limit: 100, want: positions(5, 6), wantReads: 1},
		{name: "entries of other producers are no proof, even with our origin data",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{
				copyOfEntry(4), copyOfEntry(5), foreign("app", 6, 7, 8), foreign("pulsar.repl.east-->west", 9)}}},
			from: 5, limit: 100, want: positions(5), wantReads: 4},
		{name: "copies of another origin cluster are skipped",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{copyOfEntry(4), {copy: entryCopy{producer: ours,
				origins: []origin{{cluster: "north", pos: marker.Position{Ledger: 10, Entry: 9, Batch: -1}, ok: true}, {}}}}, copyOfEntry(5)}}},
			from: 5, limit: 100, want: positions(5), wantReads: 3},
		{name: "the walk goes on into older ledgers",
			ledgers: []fakeLedger{
				{id: 3, entries: []fakeEntry{copyOfEntry(1), copyOfEntry(2)}},
				{id: 5, entries: nil},
				{id: 7, entries: []fakeEntry{copyOfEntry(3)}}},
			from: 2, limit: 100, want: positions(2, 3), wantReads: 3},
		{name: "limit", ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{
			copyOfEntry(1), copyOfEntry(2), copyOfEntry(3), copyOfEntry(4)}}},
			from: 0, limit: 2, want: positions(3, 4), wantReads: 2},
		{name: "an error keeps what was read",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{copyOfEntry(1), {err: boom}, copyOfEntry(3)}}},
			from:    0, limit: 100, want: positions(3), wantErr: boom, wantReads: 2},
		{name: "a missing entry is passed over",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{copyOfEntry(1), {err: errNoEntry}, copyOfEntry(3)}}},
			from:    0, limit: 100, want: positions(1, 3), wantReads: 3},
		{name: "ledger listing fails",
			ledgers: []fakeLedger{{id: 3, entries: []fakeEntry{copyOfEntry(1)}}, {id: 7, entries: []fakeEntry{copyOfEntry(2)}}},
			listErr: boom, from: 0, limit: 100, want: positions(2), wantErr: boom, wantReads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEntries{ls: tt.ledgers, listErr: tt.listErr}
			got, err := scanCopies(context.Background(), f, byProducer(ours), "east", marker.Position{Ledger: 10, Entry: tt.from, Batch: -1}, tt.limit)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("set = %v, want %v", slices.Collect(maps.Keys(got)), slices.Collect(maps.Keys(tt.want)))
			}
			if len(f.reads) != tt.wantReads {
				t.Errorf("read %d entries %v, want %d", len(f.reads), f.reads, tt.wantReads)
			}
		})
	}
}

// batchBody builds an uncompressed batch payload: per message a size, a
// SingleMessageMetadata with the properties and the payload size, then the
// payload.
func batchBody(msgs ...map[string]string) []byte {
	var out []byte
	for i, props := range msgs {
		payload := []byte{byte('a' + i), 'x'}
		var md []byte
		for _, k := range slices.Sorted(maps.Keys(props)) {
			var kv []byte
			kv = protowire.AppendTag(kv, 1, protowire.BytesType)
			kv = protowire.AppendString(kv, k)
			kv = protowire.AppendTag(kv, 2, protowire.BytesType)
			kv = protowire.AppendString(kv, props[k])
			md = protowire.AppendTag(md, 1, protowire.BytesType)
			md = protowire.AppendBytes(md, kv)
		}
		md = protowire.AppendTag(md, 3, protowire.VarintType)
		md = protowire.AppendVarint(md, uint64(len(payload)))
		md = protowire.AppendTag(md, 5, protowire.VarintType) // event_time: skipped
		md = protowire.AppendVarint(md, 12345)
		out = binary.BigEndian.AppendUint32(out, uint32(len(md)))
		out = append(out, md...)
		out = append(out, payload...)
	}
	return out
}

func copyProps(id string) map[string]string {
	return map[string]string{PropOriginCluster: "east", PropOriginID: id, "app": "v"}
}

func TestParseEntryCopy(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	ok := func(id string) origin {
		p, _ := marker.ParsePosition(id)
		return origin{cluster: "east", pos: p, ok: true}
	}
	tests := []struct {
		name string
		h    http.Header
		body []byte
		want entryCopy
	}{
		{name: "batch: each message's own origin",
			h:    hdr("X-Pulsar-Producer-Name", ours, "X-Pulsar-Num-Batch-Message", "3"),
			body: batchBody(copyProps("10:1:-1"), copyProps("10:2:0"), copyProps("10:2:1")),
			want: entryCopy{producer: ours, origins: []origin{ok("10:1:-1"), ok("10:2:0"), ok("10:2:1")}}},
		{name: "batch with a message without origin",
			h:    hdr("X-Pulsar-Producer-Name", ours, "X-Pulsar-Num-Batch-Message", "2"),
			body: batchBody(map[string]string{"app": "v"}, copyProps("10:2:-1")),
			want: entryCopy{producer: ours, origins: []origin{{}, ok("10:2:-1")}}},
		{name: "not a batch: properties header",
			h:    hdr("X-Pulsar-Producer-Name", ours, "X-Pulsar-Property", `{"geo-sidecar.origin-cluster":"east","geo-sidecar.origin-id":"10:5:-1"}`),
			body: []byte("payload"),
			want: entryCopy{producer: ours, origins: []origin{ok("10:5:-1")}}},
		{name: "truncated batch falls back to the header (no origin)",
			h:    hdr("X-Pulsar-Producer-Name", ours, "X-Pulsar-Num-Batch-Message", "3"),
			body: batchBody(copyProps("10:1:-1"))[:5],
			want: entryCopy{producer: ours, origins: []origin{{}}}},
		{name: "compressed batch is not read",
			h:    hdr("X-Pulsar-Producer-Name", ours, "X-Pulsar-Num-Batch-Message", "1", "X-Pulsar-Compression", "LZ4"),
			body: batchBody(copyProps("10:1:-1")),
			want: entryCopy{producer: ours, origins: []origin{{}}}},
		{name: "bad properties JSON",
			h:    hdr("X-Pulsar-Producer-Name", "p", "X-Pulsar-Property", `{`),
			want: entryCopy{producer: "p", origins: []origin{{}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseEntryCopy(tt.h, tt.body)
			if got.producer != tt.want.producer || !slices.Equal(got.origins, tt.want.origins) {
				t.Errorf("parseEntryCopy = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseEntryCopy feeds the admin API's answer for an entry (what any
// producer on the remote topic can shape) to the parser: it must never
// panic, and every origin it reports must come from the input.
func FuzzParseEntryCopy(f *testing.F) {
	f.Add("3", "", batchBody(copyProps("10:1:-1"), copyProps("10:2:0"), copyProps("10:2:1")))
	f.Add("", `{"geo-sidecar.origin-id":"1:2:3"}`, []byte("x"))
	f.Add("1000000", "", []byte{0, 0, 0, 1, 0x0a})
	f.Add("2", "", []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, n, props string, body []byte) {
		h := http.Header{}
		h.Set("X-Pulsar-Num-Batch-Message", n)
		h.Set("X-Pulsar-Property", props)
		e := parseEntryCopy(h, body)
		if len(e.origins) == 0 {
			t.Fatal("no origins: an entry holds at least one message")
		}
	})
}

// The admin API hands back neither the metadata's bytes nor a batch's
// payload as stored, so an entry-level origin read through it proves
// nothing, however valid its signature: the digest it signs cannot be
// checked (issue 20 item 2).
func TestAdminEntryIsNoProof(t *testing.T) {
	keys := marker.NewKeys([]byte("0123456789abcdef"))
	const topic = "persistent://t/ns/x-partition-0"
	raw := wire.MetadataBuilder{ProducerName: "app-producer", SequenceID: 1, PublishTime: 2}.Append(nil)
	payload := []byte("payload")
	md := signedCopyMD(raw, payload, keys.Current(), topic, "east", "west", "10:5:-1")
	parsed, err := wire.ParseMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{}
	for _, kv := range parsed.Properties {
		props[kv.Key] = kv.Value
	}
	j, err := json.Marshal(props)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Pulsar-Producer-Name", "app-producer")
	h.Set("X-Pulsar-Property", string(j))
	e := parseEntryCopy(h, payload)
	if len(e.origins) != 1 || e.origins[0].pos != (marker.Position{Ledger: 10, Entry: 5, Batch: -1}) {
		t.Errorf("origins %+v, want the one entry-level origin 10:5:-1", e.origins)
	}
	if bySignature(keys, topic, "west")(e) {
		t.Error("an origin read through the admin API was taken as proof")
	}
	// The same entry read over the binary protocol is proof.
	if !bySignature(keys, topic, "west")(readBackCopy(wire.Entry{Metadata: md, Payload: payload})) {
		t.Error("the same copy read over the binary protocol is not proof")
	}
}
