package entrypath

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// fakeWindowReader delivers the entries it holds, then nothing; entries it
// never delivers (the broker's markers, entries a filter rejects) count as
// acknowledged by the broker once every delivered one is: its mark-delete
// position then reaches skipped's last.
type fakeWindowReader struct {
	mu        sync.Mutex
	entries   []int64 // entry ids delivered, ledger 1
	inflight  []int64 // entry ids queued behind the first MarkDelete answer
	skipped   []int64 // entry ids never delivered (after the delivered ones)
	acked     map[int64]bool
	noMD      bool // the broker does not say its mark-delete position
	mdQueries int
}

func (f *fakeWindowReader) Receive(ctx context.Context) (wire.Entry, error) {
	f.mu.Lock()
	if len(f.entries) > 0 {
		id := f.entries[0]
		f.entries = f.entries[1:]
		f.mu.Unlock()
		return wire.Entry{ID: wire.EntryID(1, uint64(id))}, nil
	}
	f.mu.Unlock()
	<-ctx.Done()
	return wire.Entry{}, ctx.Err()
}

func (f *fakeWindowReader) Ack(id wire.MessageID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acked == nil {
		f.acked = map[int64]bool{}
	}
	f.acked[int64(id.Entry)] = true
	return nil
}

func (f *fakeWindowReader) Release(wire.Entry) error { return nil }

func (f *fakeWindowReader) MarkDelete(context.Context) (wire.MessageID, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mdQueries++
	f.entries = append(f.entries, f.inflight...)
	f.inflight = nil
	if f.noMD {
		return wire.MessageID{}, false, nil
	}
	// Contiguous acknowledgements from entry 0 (the window's start), the
	// skipped entries acknowledged by the broker.
	md := int64(-1)
	for f.acked[md+1] || contains(f.entries, md+1) || contains(f.skipped, md+1) {
		md++
	}
	return wire.EntryID(1, uint64(md)), true, nil
}

func contains(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A window whose last entries the broker never dispatches ends once the
// reader's mark-delete position passes them, about readbackQuiet after the
// last entry; without that answer the read waits readbackIdleTimeout and
// fails (what was read stays proof). Issue 20: every session start waited
// 30 s when the remote's newest entry was a marker its filter hid.
func TestReadWindowEnds(t *testing.T) {
	tests := []struct {
		name     string
		entries  []int64
		inflight []int64
		skipped  []int64
		noMD     bool
		wantErr  bool
		wantRead int
		maxWait  time.Duration
	}{
		{"every entry delivered", []int64{0, 1, 2, 3}, nil, nil, false, false, 4, 0},
		{"last two never dispatched", []int64{0, 1}, nil, []int64{2, 3}, false, false, 2, 2 * readbackQuiet},
		{"nothing dispatched", nil, nil, []int64{0, 1, 2, 3}, false, false, 0, 2 * readbackQuiet},
		{"dispatched entries arrive before the answer", []int64{0}, []int64{1, 2}, []int64{3}, false, false, 3, 2 * readbackQuiet},
		{"broker without mark-delete", []int64{0, 1}, nil, []int64{2, 3}, true, true, 2, readbackIdleTimeout + 2*readbackQuiet},
		{"an entry still to come", []int64{0, 1}, nil, nil, false, true, 2, readbackIdleTimeout + 2*readbackQuiet},
		// The window's last entry never dispatched, the one after it
		// delivered: the window is read, the entry past it not taken.
		{"an entry past the window", []int64{0, 1, 2, 4}, nil, []int64{3}, false, false, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := &fakeWindowReader{entries: tt.entries, inflight: tt.inflight, skipped: tt.skipped, noMD: tt.noMD}
				read := 0
				start := time.Now()
				err := readWindow(context.Background(), r,
					marker.Position{Ledger: 1, Entry: 0, Batch: -1}, marker.Position{Ledger: 1, Entry: 3, Batch: -1},
					func(marker.Position, wire.Entry) { read++ })
				took := time.Since(start)
				if (err != nil) != tt.wantErr {
					t.Fatalf("err = %v, want error %v", err, tt.wantErr)
				}
				if tt.wantErr && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want a deadline", err)
				}
				if read != tt.wantRead {
					t.Errorf("read %d entries, want %d", read, tt.wantRead)
				}
				if took > tt.maxWait {
					t.Errorf("took %v, want at most %v", took, tt.maxWait)
				}
			})
		})
	}
}

// The read stops at once when its context ends.
func TestReadWindowCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*readbackQuiet/2)
		defer cancel()
		r := &fakeWindowReader{entries: []int64{0}}
		err := readWindow(ctx, r, marker.Position{Ledger: 1, Entry: 0, Batch: -1}, marker.Position{Ledger: 1, Entry: 3, Batch: -1},
			func(marker.Position, wire.Entry) {})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's", err)
		}
	})
}
