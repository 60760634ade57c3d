package replicator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Tests written against the mutants that survived `make mutate` in the
// data path (.ci/mutation.md): each pins a behaviour no other test did.

// rawSingle builds one message of a batch: size, SingleMessageMetadata
// (the given raw fields), payload.
func rawSingle(md []byte, payload []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(md)))
	return append(append(out, md...), payload...)
}

func kvField(key, value []byte, extra []byte) []byte {
	var kv []byte
	if key != nil {
		kv = protowire.AppendBytes(protowire.AppendTag(kv, 1, protowire.BytesType), key)
	}
	if value != nil {
		kv = protowire.AppendBytes(protowire.AppendTag(kv, 2, protowire.BytesType), value)
	}
	kv = append(kv, extra...)
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), kv)
}

func sizeField(n uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), n)
}

func originFields(id string) []byte {
	return append(kvField([]byte(PropOriginCluster), []byte("east"), nil), kvField([]byte(PropOriginID), []byte(id), nil)...)
}

// Batches as a producer on the remote can shape them: the parser never
// panics, reads what is well formed, and refuses the rest (falling back to
// the properties header, which here names no origin).
func TestParseEntryCopyBatchEdges(t *testing.T) {
	ok := func(id string) origin {
		p, _ := marker.ParsePosition(id)
		return origin{cluster: "east", pos: p, ok: true}
	}
	good := rawSingle(append(originFields("10:1:0"), sizeField(2)...), []byte("ab"))
	tests := []struct {
		name string
		n    string
		body []byte
		want []origin
	}{
		{name: "count 0", n: "0", body: good, want: []origin{{}}},
		{name: "count -1", n: "-1", body: good, want: []origin{{}}},
		{name: "empty payload last", n: "2", body: append(slices.Clone(good),
			rawSingle(append(originFields("10:1:1"), sizeField(0)...), nil)...),
			want: []origin{ok("10:1:0"), ok("10:1:1")}},
		{name: "metadata as long as the rest", n: "1",
			body: binary.BigEndian.AppendUint32(nil, 4), want: []origin{{}}},
		{name: "payload size past the end", n: "1",
			body: rawSingle(append(originFields("10:1:0"), sizeField(99)...), []byte("ab")), want: []origin{{}}},
		{name: "payload size absent", n: "1",
			body: rawSingle(originFields("10:1:0"), []byte("a")), want: []origin{{}}},
		{name: "payload size varint truncated", n: "1",
			body: rawSingle(append(originFields("10:1:0"), 0x18, 0x80), nil), want: []origin{{}}},
		{name: "payload size too large", n: "1",
			body: rawSingle(append(originFields("10:1:0"), sizeField(1<<31+1)...), nil), want: []origin{{}}},
		{name: "key-value with another bytes field", n: "1",
			body: rawSingle(append(append(kvField([]byte(PropOriginCluster), []byte("east"),
				protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte("x"))),
				kvField([]byte(PropOriginID), []byte("10:1:0"), nil)...), sizeField(0)...), nil),
			want: []origin{ok("10:1:0")}},
		{name: "key-value without value", n: "1",
			body: rawSingle(append(kvField([]byte(PropOriginID), nil, nil), sizeField(0)...), nil), want: []origin{{}}},
		{name: "key-value without key", n: "1",
			body: rawSingle(append(kvField(nil, []byte("v"), nil), sizeField(0)...), nil), want: []origin{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("X-Pulsar-Producer-Name", ours)
			h.Set("X-Pulsar-Num-Batch-Message", tt.n)
			got := parseEntryCopy(h, tt.body)
			if !slices.Equal(got.origins, tt.want) {
				t.Errorf("origins %+v, want %+v", got.origins, tt.want)
			}
		})
	}
}

func TestScanCopiesLedgerEdges(t *testing.T) {
	mixed := copyOfEntry(7)
	mixed.copy.origins = append([]origin{{}, {cluster: "north", pos: marker.Position{Ledger: 10, Entry: 9, Batch: -1}, ok: true}}, mixed.copy.origins...)
	tests := []struct {
		name      string
		ledgers   []fakeLedger
		from      int64
		want      copySet
		wantReads int
	}{
		{name: "copies in ledger 0", ledgers: []fakeLedger{{id: 0, entries: []fakeEntry{copyOfEntry(1), copyOfEntry(2)}}},
			from: 1, want: positions(1, 2), wantReads: 2},
		{name: "back over two older ledgers", ledgers: []fakeLedger{
			{id: 2, entries: []fakeEntry{copyOfEntry(1)}},
			{id: 4, entries: []fakeEntry{copyOfEntry(2)}},
			{id: 6, entries: []fakeEntry{copyOfEntry(3)}},
			{id: 8, entries: []fakeEntry{copyOfEntry(4)}}},
			from: 2, want: positions(2, 3, 4), wantReads: 4},
		{name: "unreadable and foreign origins before ours in one batch",
			ledgers: []fakeLedger{{id: 7, entries: []fakeEntry{copyOfEntry(5), mixed}}},
			from:    6, want: positions(7), wantReads: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEntries{ls: tt.ledgers}
			got, err := scanCopies(context.Background(), f, byProducer(ours), "east", marker.Position{Ledger: 10, Entry: tt.from, Batch: -1}, 100)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) || len(f.reads) != tt.wantReads {
				t.Errorf("set %v after %d reads %v, want %v after %d", slices.Collect(maps.Keys(got)), len(f.reads), f.reads,
					slices.Collect(maps.Keys(tt.want)), tt.wantReads)
			}
		})
	}
}

// runSessions restarts at once after a standby, a redelivery or a change of
// epoch, backs off after a failure, and warns once per distinct error.
func TestRunSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.WarnLevel)
		boom, bang := errors.New("boom"), errors.New("bang")
		results := []error{errStandby, errRedelivered, errEpochChanged, boom, boom, bang}
		var at []time.Duration
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		session := func(context.Context) (bool, error) {
			at = append(at, time.Since(start))
			if len(at) > len(results) {
				cancel()
				return false, nil
			}
			return false, results[len(at)-1]
		}
		if err := runSessions(ctx, zap.New(core), NewMetrics(nil), "east", "west", session); err != nil {
			t.Fatal(err)
		}
		if at[1] != 0 || at[2] != 0 || at[3] != 0 {
			t.Errorf("sessions after a standby, a redelivery and a change of epoch started at %v, %v, %v, want at once", at[1], at[2], at[3])
		}
		if at[4] < 100*time.Millisecond {
			t.Errorf("session after a failure started after %v, want a backoff", at[4]-at[3])
		}
		if n := logs.Len(); n != 2 {
			t.Errorf("%d warnings for errors boom, boom, bang; want 2 (one per distinct error)", n)
		}
	})
}

// Every send of a window confirmed after the session ended (the acker
// stopped) still finds room: the client's callback must never block, or
// the producer never finishes closing and the partition never goes on.
func TestPartitionWholeWindowConfirmedLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		for i := range 6 {
			w.publish(msg(i))
		}
		g := w.hold("m0", 1) // m0..m3 fill the window, unanswered
		w.closeHold = &gate{ch: make(chan struct{})}
		p := newTestPartition(t, w, 4)
		r := startRun(t, p, w)
		synctest.Wait()
		// The cursor becomes a standby: the session ends, its producer is
		// stuck closing past the drain timeout, the acker stops.
		w.setActive(false)
		time.Sleep(2 * p.drainTimeout)
		synctest.Wait()
		// Now the producer closes and fails all four sends at once.
		w.closeHold.release()
		g.release()
		w.setActive(true)
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		w.checkInvariants(t)
	})
}

// A byte rate alone throttles (no message rate configured).
func TestPartitionByteRateAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		const n = 100
		for i := range n {
			w.publish(msgAt(10, int64(i), -1, fmt.Sprintf("%0100d", i))) // 100 bytes each
		}
		p := newTestPartition(t, w, 16)
		p.byteRate = newLimiter(1000) // 10 messages a second
		start := time.Now()
		r := startRun(t, p, w)
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == n })
		took := time.Since(start)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if took < 8*time.Second {
			t.Errorf("10,000 bytes at 1,000 bytes/s took %v, want about 10 s", took)
		}
	})
}
