package verify

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// fakeReader delivers its queue, then waits; MarkDelete says md.
type fakeReader struct {
	queue    []wire.Entry
	md       wire.MessageID
	hasMD    bool
	released int
}

func (f *fakeReader) Receive(ctx context.Context) (wire.Entry, error) {
	if len(f.queue) > 0 {
		e := f.queue[0]
		f.queue = f.queue[1:]
		return e, nil
	}
	<-ctx.Done()
	return wire.Entry{}, ctx.Err()
}
func (f *fakeReader) Release(wire.Entry) error           { f.released++; return nil }
func (f *fakeReader) AckCumulative(wire.MessageID) error { return nil }
func (f *fakeReader) MarkDelete(context.Context) (wire.MessageID, bool, error) {
	return f.md, f.hasMD, nil
}
func (f *fakeReader) Close() error { return nil }

func ids(entries ...uint64) []wire.Entry {
	var out []wire.Entry
	for _, e := range entries {
		out = append(out, wire.Entry{ID: wire.MessageID{Ledger: 4, Entry: e}})
	}
	return out
}

// TestStream: a stream yields each entry up to its end once, in order:
// entries delivered again (a reader that reconnected) and entries written
// after the walk began are left out, and an end the broker never
// dispatches is passed once the reader's mark-delete position says so.
func TestStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue []wire.Entry
		end   uint64
		md    uint64 // the mark-delete position, when hasMD
		hasMD bool
		want  []int64
		err   bool
	}{
		{"to the end", ids(0, 1, 2), 2, 0, false, []int64{0, 1, 2}, false},
		{"delivered again", ids(0, 1, 0, 1, 2), 2, 0, false, []int64{0, 1, 2}, false},
		{"written after the walk began", ids(0, 1, 2, 3, 4), 2, 0, false, []int64{0, 1, 2}, false},
		{"an end never dispatched", ids(0, 1), 2, 2, true, []int64{0, 1}, false},
		{"a broker that stops short", ids(0, 1), 2, 1, true, []int64{0, 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeReader{queue: tc.queue, md: wire.MessageID{Ledger: 4, Entry: tc.md}, hasMD: tc.hasMD}
				s := &stream{c: f, end: marker.Position{Ledger: 4, Entry: int64(tc.end), Batch: -1}}
				var got []int64
				var err error
				for {
					var e wire.Entry
					var ok bool
					e, ok, err = s.next(context.Background())
					if err != nil || !ok {
						break
					}
					got = append(got, int64(e.ID.Entry))
				}
				if (err != nil) != tc.err {
					t.Errorf("error %v, want one: %v", err, tc.err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Fatalf("got %v, want %v", got, tc.want)
					}
				}
			})
		})
	}
}
