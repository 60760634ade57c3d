package snapshot

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// FuzzMachine decodes its input into a sequence of calls (data, markers,
// ticks, markers read back, prunes) with small positions, and checks that
// the Machine never panics, writes only markers that encode, keeps its
// cache bounded and sorted, and that Covering is monotone in md.
func FuzzMachine(f *testing.F) {
	// A full round: data, a request, its response, both read back (the
	// snapshot enters the cache), then a prune.
	f.Add([]byte{0x83, 0, 0, 0, 0, 0, 2, 20, 0, 5, 0, 0, 0, 0, 3, 0, 3, 0, 4, 1, 15})
	f.Add([]byte{0x83, 0, 0, 1, 2, 2, 0, 0, 3, 5, 1, 3, 3, 3, 3})
	f.Add([]byte{0x01, 0, 2, 1, 1, 2, 0, 20, 5, 1, 0, 3, 3, 0, 2, 5, 3, 3, 0, 3, 3, 2, 1, 200, 4, 7})
	f.Add([]byte("\x04\x00\x00\x00\x02\x00\x00\x05\x03\x01\x03\x03\x00\x00\x00\x02\x00\x0a\x05\x02\x00\x03\x03"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 1024 {
			return // longer inputs bring nothing new but slow fuzzing
		}
		take := func() byte {
			if len(in) == 0 {
				return 0
			}
			c := in[0]
			in = in[1:]
			return c
		}
		small := func() marker.Position {
			a, b := take(), take()
			return marker.Position{Ledger: int64(a % 3), Entry: int64(b % 16), Batch: int32(b>>4%4) - 1}
		}
		first := take()
		size := 1 + int(first%5)
		now := t0
		ids := 0
		m := New(Config{
			Topic: topic, Local: "A", Remote: "B",
			Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, CacheSize: size,
			ThirdOrigins: []string{"C", "D"}, Fresh: first&0x80 != 0,
			NewID: func() string { ids++; return fmt.Sprintf("id-%d", ids) },
			Now:   func() time.Time { return now },
		})
		clusters := []string{"", "A", "B", "C", "D"}
		var written []marker.Marker // markers the Machine wrote, read back by op 3
		var read int64              // the reading position, mostly advancing
		readPos := func() marker.Position {
			if c := take(); c >= 0xf0 {
				read -= int64(c & 0x0f) // a rewind
			}
			read++
			return marker.Position{Ledger: 1 + read/8, Entry: read % 8, Batch: -1}
		}
		var lastReq string
		var prev Stats
		for len(in) > 0 {
			var out []marker.Marker
			op := take() % 6
			switch op {
			case 0:
				out = m.Data(readPos(), clusters[take()%5], small())
			case 1:
				mk := marker.Marker{
					Kind: marker.Kind(10 + take()%4), From: clusters[1+take()%4], To: clusters[1+take()%4],
					Topic: topic, SnapshotID: fmt.Sprintf("id-%d", take()%4), Local: small(), Remote: small(),
					Subscription: "s",
				}
				if c := take(); c&1 != 0 {
					mk.Topic = "other"
				} else if c&2 != 0 {
					mk.Watermarks = map[string]marker.Position{clusters[2+c>>2%3]: small()}
				}
				out = m.Marker(readPos(), mk)
			case 2:
				now = now.Add(time.Duration(take()) * time.Millisecond)
				out = m.Tick(take()&1 == 0)
			case 3:
				if len(written) > 0 {
					out = m.Marker(readPos(), written[0])
					written = written[1:]
				}
			case 4:
				m.Prune(small())
			case 5:
				var wm map[string]marker.Position
				if c := take(); c&1 != 0 {
					wm = map[string]marker.Position{clusters[3+c>>1%2]: small()}
				}
				out = m.Marker(readPos(), marker.Marker{Kind: marker.KindSnapshotResponse, From: "B", To: "A",
					Topic: topic, SnapshotID: lastReq, Local: small(), Watermarks: wm})
			}
			for _, mk := range out {
				if _, err := marker.Encode(mk, []byte("k")); err != nil {
					t.Fatalf("wrote a marker that does not encode: %+v: %v", mk, err)
				}
				if mk.Kind == marker.KindSnapshotRequest {
					lastReq = mk.SnapshotID
				}
			}
			written = append(written, out...)
			st := m.Stats()
			if st.Started < prev.Started || st.Completed < prev.Completed || st.TimedOut < prev.TimedOut || st.Unanswered < prev.Unanswered {
				t.Fatalf("stats went back: %+v after %+v", st, prev)
			}
			prev = st
			if op == 1 || op == 3 || op == 4 { // may have changed the cache
				checkCache(t, m, size)
			}
		}
	})
}

// mdGrid are mark-delete positions in Compare order, covering the small
// positions of FuzzMachine.
var mdGrid = func() []marker.Position {
	var g []marker.Position
	for l := range int64(4) {
		for e := range int64(18) {
			for _, b := range []int32{0, 2, -1} {
				g = append(g, marker.Position{Ledger: l, Entry: e, Batch: b})
			}
		}
	}
	if !slices.IsSortedFunc(g, marker.Position.Compare) {
		panic("grid out of order")
	}
	return g
}()

func checkCache(t *testing.T, m *Machine, size int) {
	t.Helper()
	m.mu.Lock()
	cached := slices.Clone(m.cache.s)
	m.mu.Unlock()
	if len(cached) > size {
		t.Fatalf("%d cached, more than %d", len(cached), size)
	}
	for i := 1; i < len(cached); i++ {
		if !less(cached[i-1], cached[i]) {
			t.Fatalf("cache out of order: %+v", cached)
		}
	}
	var last Snapshot
	var lastOK bool
	for _, md := range mdGrid {
		s, ok := m.Covering(md)
		if lastOK && !ok {
			t.Fatalf("Covering(%s) found nothing, but a snapshot at an earlier md", md)
		}
		if ok {
			if !entryAtOrBefore(s.Local, md) {
				t.Fatalf("Covering(%s) = %s, not consumed", md, s.Local)
			}
			if lastOK && s.Local.Compare(last.Local) < 0 {
				t.Fatalf("Covering(%s) = %s, before %s for an earlier md", md, s.Local, last.Local)
			}
			for _, c := range cached {
				if entryAtOrBefore(c.Local, md) && less(s, c) {
					t.Fatalf("Covering(%s) = %s, but %s is newer and covered", md, s.Local, c.Local)
				}
			}
		}
		last, lastOK = s, ok
	}
}
