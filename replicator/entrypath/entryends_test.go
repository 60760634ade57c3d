package entrypath

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Unit tests of wireEndpoints (entryends.go) through its seams: the
// options the replication cursor is subscribed with, and the read-back's
// bounds. The wire client itself is built (it connects only on use) and
// never used.

func testConn(name string) *cluster.Clients {
	return &cluster.Clients{Name: name, Config: config.Cluster{Name: name, ServiceURL: "pulsar://127.0.0.1:6650"}, Log: zap.NewNop()}
}

// The replication cursor reserves from its target's receive pool before
// it grants permits (Budget), and takes its share of the pool as its
// window: asked again at every grant, so it shrinks as other cursors
// open and widens as they close; a cursor closed, or one that could not
// be opened, gives its share back.
//
// Fails for: `Budget: nil` or `MaxBytes: nil` on the replication cursor,
// leave() not called on Close or on a failed subscribe.
func TestWireEndpointsCursorWindow(t *testing.T) {
	pool := newReceivePool(receiveBudget, nil)
	var others []func()
	for range 31 {
		others = append(others, pool.join())
	}
	var opts wire.ConsumerOptions
	var refuse error
	e := &wireEndpoints{
		local: testConn("east"), remote: testConn("west"), topic: "persistent://t/ns/x-partition-0",
		subscription: "geo-sidecar.west", permits: 6400, pool: pool, log: zap.NewNop(),
		subscribe: func(_ context.Context, c *wire.Client, o wire.ConsumerOptions) (entrySource, error) {
			if c == nil {
				t.Error("subscribed without the local cluster's wire client")
			}
			opts = o
			if refuse != nil {
				return nil, refuse
			}
			return &fakeEntrySource{w: newFakeEntryWorld(), closed: make(chan struct{})}, nil
		},
	}
	src, err := e.openCursor(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Topic != e.topic || opts.Subscription != e.subscription || opts.Permits != 6400 || opts.Name != instanceConsumerName {
		t.Errorf("subscribed with %+v; want the partition, the subscription, 6400 permits and the instance's consumer name", opts)
	}
	if opts.MaxBytes == nil {
		t.Fatal("the replication cursor has no byte window (MaxBytes nil): a drain over many partitions holds cursorWindowBytes each")
	}
	if opts.Budget != wire.ByteBudget(pool) {
		t.Fatalf("the replication cursor reserves from %v, want its target's pool: nothing bounds what all cursors hold", opts.Budget)
	}
	if got, want := opts.MaxBytes(), int64(receiveBudget/32); got != want {
		t.Errorf("window with 32 cursors open = %d, want %d (the budget shared)", got, want)
	}
	for _, leave := range others {
		leave()
	}
	if got := opts.MaxBytes(); got != cursorWindowBytes {
		t.Errorf("window once the others closed = %d, want %d (asked again at each grant)", got, cursorWindowBytes)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if n := pool.open.Load(); n != 0 {
		t.Errorf("%d cursors counted open after the last closed, want 0", n)
	}
	refuse = errors.New("not authorized")
	if _, err := e.openCursor(context.Background(), nil); !errors.Is(err, refuse) {
		t.Fatalf("openCursor() = %v, want the refusal", err)
	}
	if n := pool.open.Load(); n != 0 {
		t.Errorf("%d cursors counted open after a refused subscribe, want 0", n)
	}
}

// copiedSince reads back from the remote's end until it reaches a copy
// from before the start, past the usual window (max_pending_messages +
// lookBack entries) and whatever reach says; only copies of this
// cluster's entries, signed under the key, count.
//
// Fails for: the read stopping at the usual window; the `o.cluster != local` filter
// removed from scanTail (in an aggregate topology, east→west and
// north→west, north's copy of its own entry at the same position would be
// taken as proof that east's is there).
func TestWireEndpointsCopiedSince(t *testing.T) {
	const topic = "persistent://t/ns/x-partition-0"
	key := []byte("0123456789abcdef")
	at := func(e int64) marker.Position { return marker.Position{Ledger: 10, Entry: e, Batch: -1} }
	digest := marker.OriginDigest([]byte("metadata"), []byte("payload")) // as if computed from the bytes read
	copyOf := func(cluster string, e int64, key []byte) entryCopy {
		p := at(e)
		sig := marker.OriginSig(key, topic, cluster, "west", p.String(), &digest)
		return entryCopy{origins: []origin{{cluster: cluster, pos: p, ok: true, sig: sig, digest: &digest}}}
	}
	// The remote: east's copies of 10:0..10:1499 in ledger 7, but for two
	// entries at 10:1450 and 10:1460 that are not east's.
	remote := func() *fakeTail {
		l := make([]entryCopy, 1500)
		for i := range l {
			l[i] = copyOf("east", int64(i), key)
		}
		l[1450] = copyOf("north", 1450, key)                        // aggregate: north→west, same position
		l[1460] = copyOf("east", 1460, []byte("another-key-01234")) // not signed under the key
		return &fakeTail{ledgerIDs: []int64{7}, entries: [][]entryCopy{l}}
	}
	span := func(from, to int64, except ...int64) []int64 {
		var out []int64
		for e := from; e <= to; e++ {
			if !slices.Contains(except, e) {
				out = append(out, e)
			}
		}
		return out
	}
	tests := []struct {
		name  string
		from  int64
		reach int64
		want  []int64
	}{
		{"the usual window", 1400, 0, span(1400, 1499, 1450, 1460)},
		{"on past the usual window to a copy from before the start", 300, 0, span(300, 1499, 1450, 1460)},
		{"reach within the in-flight window", 300, 80, span(300, 1499, 1450, 1460)},
		{"reach past the usual window", 300, 1200, span(300, 1499, 1450, 1460)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tail := remote()
			e := &wireEndpoints{local: testConn("east"), remote: testConn("west"), topic: topic, maxPending: 100, keys: marker.NewKeys(key),
				readBackPool: newReadBackPool(readbackWindowBytes, nil), readBack: func() (tailReader, error) { return tail, nil }}
			set, err := e.copiedSince(context.Background(), at(tt.from), tt.reach)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for p := range set {
				got = append(got, p.Entry)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("found %d copies (%v..), want %d (%v..)", len(got), got[:min(len(got), 3)], len(tt.want), tt.want[:3])
				for _, x := range []int64{1450, 1460} {
					if slices.Contains(got, x) {
						t.Errorf("10:%d counted as east's copy", x)
					}
				}
			}
		})
	}
	boom := errors.New("no wire client")
	e := &wireEndpoints{local: testConn("east"), maxPending: 100, readBackPool: newReadBackPool(readbackWindowBytes, nil),
		readBack: func() (tailReader, error) { return nil, boom }}
	if set, err := e.copiedSince(context.Background(), at(0), 0); !errors.Is(err, boom) || len(set) != 0 {
		t.Errorf("copiedSince() = %v, %v; want nothing and the error", set, err)
	}
}

// The read-back takes only copies of local's entries as proof: another
// origin's copy at a colliding position is not.
//
// Fails for: the `o.cluster != local` filter removed from scanTail.
func TestReadBackOnlyLocalOrigins(t *testing.T) {
	at := func(e int64) marker.Position { return marker.Position{Ledger: 1, Entry: e, Batch: -1} }
	entries := copies(0, 20)
	entries[12] = "x12" // north's copy of its 1:12
	f := tailOf([]int{20}, []int64{7}, entries...)
	f.entries[0][12] = entryCopy{origins: []origin{{cluster: "north", pos: at(12), ok: true, sig: fakeSig}}}
	want := []int64{5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19}
	set, err := scanTail(context.Background(), f, fakeOurs, "east", at(5), 1100)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for p := range set {
		got = append(got, p.Entry)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("scanTail found %v, want %v (not north's 1:12)", got, want)
	}
}

// A partition whose cursor link is down leaves connected_partitions while
// its producer is open, and comes back with the link; the local cluster's
// wire client exports its oldest unconfirmed send.
func TestWireEndpointsLinkHealth(t *testing.T) {
	m := metrics.New(nil)
	local, remote := testConn("east"), testConn("west")
	local.CountAdmin(m)
	e := &wireEndpoints{
		local: local, remote: remote, topic: "persistent://t/ns/x-partition-0", pool: newReceivePool(receiveBudget, nil), log: zap.NewNop(),
		subscribe: func(context.Context, *wire.Client, wire.ConsumerOptions) (entrySource, error) {
			return &fakeEntrySource{w: newFakeEntryWorld(), closed: make(chan struct{})}, nil
		},
	}
	src, err := e.openCursor(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	connected := func() float64 { return metricstest.Gauge(m.Connected, "east", "west") }
	m.Connected.WithLabelValues("east", "west").Inc() // the entry pipe counts the open producer
	e.health.update(func(h *linkHealth) { h.open = true })
	hs := src.(*healthySource)
	hs.linkChanged(false)
	if got := connected(); got != 0 {
		t.Errorf("connected_partitions = %v with the cursor's link down, want 0", got)
	}
	hs.linkChanged(true)
	if got := connected(); got != 1 {
		t.Errorf("connected_partitions = %v with the link back, want 1", got)
	}
	hs.linkChanged(false)
	_ = src.Close()
	if got := connected(); got != 1 {
		t.Errorf("connected_partitions = %v after the cursor closed, want 1 (the producer's count is the entry pipe's)", got)
	}
	hs.linkChanged(false) // a report after Close is ignored
	if got := connected(); got != 1 {
		t.Errorf("connected_partitions = %v after a late report, want 1", got)
	}
	if !unconfirmedWatched(t, m.Links, "east") {
		t.Error("the local cluster's oldest unconfirmed send is not exported")
	}
}

// The entry pipe's producer: the partition, its window, and the producer
// name of the epoch of the entries it sends (see entrySeq), epoch 0's
// being the name of the versions before epochs.
func TestEntryProducerOptions(t *testing.T) {
	e := &wireEndpoints{topic: "persistent://t/ns/x-partition-1", producerName: "geo-sidecar.east-->west", maxPending: 500}
	for _, tt := range []struct {
		epoch uint64
		name  string
	}{
		{0, "geo-sidecar.east-->west"},
		{1, "geo-sidecar.east-->west.epoch1"},
		{2, "geo-sidecar.east-->west.epoch2"},
		{512, "geo-sidecar.east-->west.epoch512"},
	} {
		o := e.producerOptions(tt.epoch, nil)
		if o.Name != tt.name || o.Topic != e.topic || o.MaxPending != 500 {
			t.Errorf("epoch %d: producer %q on %q with %d pending, want %q on %q with 500", tt.epoch, o.Name, o.Topic, o.MaxPending, tt.name, e.topic)
		}
	}
}

// unconfirmedWatched reports whether l exports cluster's oldest unconfirmed
// send (link_unconfirmed_age_seconds).
func unconfirmedWatched(t *testing.T, l *metrics.LinkMetrics, cluster string) bool {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	l.Collect(ch)
	close(ch)
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(pm.Desc().String(), "link_unconfirmed_age_seconds") {
			for _, lp := range d.GetLabel() {
				if lp.GetName() == "cluster" && lp.GetValue() == cluster {
					return true
				}
			}
		}
	}
	return false
}

// The soak's duplicate with seed 1382347120672031276 (issue 38), as west
// held it: east's copies of 268:2300..268:2378 in ledger 138 (among
// west's own entries), then west's own 1,341 entries (the rest of ledger
// 138, and ledger 144 after an unload), none of them a copy. East's
// cursor starts again at 268:2316 (acknowledgements lost with east's
// broker), and west's record for the producer name, rebuilt at the
// reload from its last snapshot, is 268:1912: below the start, so it
// widens nothing (recordReach 0). The read-back must still find the
// copies of 268:2316..268:2378: they are west's, signed, and the usual
// window (max_pending_messages + 100 = 1,100 entries back) holds none.
// It reads on until a copy from before the start (268:2315 and older
// are there), and no further.
//
// Fails for: the read stopping at the usual window (it found nothing, and
// the session sent the 63 entries again under their own ids, above the
// stale record: stored twice).
func TestCopiedSinceReadsPastOthersToTheStart(t *testing.T) {
	const topic = "persistent://soak/ns/single"
	key := []byte("0123456789abcdef")
	at := func(e int64) marker.Position { return marker.Position{Ledger: 268, Entry: e, Batch: -1} }
	digest := marker.OriginDigest([]byte("metadata"), []byte("payload"))
	copyOf := func(e int64) entryCopy {
		sig := marker.OriginSig(key, topic, "east", "west", at(e).String(), &digest)
		return entryCopy{origins: []origin{{cluster: "east", pos: at(e), ok: true, sig: sig, digest: &digest}}}
	}
	west := entryCopy{origins: []origin{{}}} // west's own entry
	var l138, l144 []entryCopy
	for range 400 {
		l138 = append(l138, west)
	}
	for e := int64(2300); e <= 2378; e++ {
		l138 = append(l138, copyOf(e), west) // interleaved with west's own
	}
	for len(l138) < 859 {
		l138 = append(l138, west)
	}
	for range 1036 {
		l144 = append(l144, west)
	}
	tail := &fakeTail{ledgerIDs: []int64{138, 144}, entries: [][]entryCopy{l138, l144}}
	e := &wireEndpoints{local: testConn("east"), remote: testConn("west"), topic: topic, maxPending: 1000, keys: marker.NewKeys(key),
		readBackPool: newReadBackPool(readbackWindowBytes, nil), readBack: func() (tailReader, error) { return tail, nil }}
	from := at(2316)
	record := int64(268)<<32 | 1912
	set, err := e.copiedSince(context.Background(), from, recordReach(record, from))
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for p := range set {
		got = append(got, p.Entry)
	}
	slices.Sort(got)
	if want := seq(2316, 2378-2316+1); !slices.Equal(got, want) {
		t.Errorf("found %d copies %v, want the %d of 268:2316..268:2378", len(got), got[:min(len(got), 4)], len(want))
	}
	// West's 1,341 entries after the last copy, the 158 copies and west's
	// entries between them, and no more than the window that reached the
	// older copies.
	if most := 1341 + 158 + 2048; tail.readEntries > most {
		t.Errorf("%d entries read, want at most %d", tail.readEntries, most)
	}

	// The bound: with readBackMost entries of west's own after them, the
	// copies are out of reach (duplicates, never loss), and the read
	// stops there.
	far := slices.Clone(l138)
	for range readBackMost {
		far = append(far, west)
	}
	tail = &fakeTail{ledgerIDs: []int64{138}, entries: [][]entryCopy{far}}
	set, err = e.copiedSince(context.Background(), from, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 0 || tail.readEntries != readBackMost {
		t.Errorf("past the bound: found %d copies in %d entries read, want none in %d", len(set), tail.readEntries, readBackMost)
	}
}
