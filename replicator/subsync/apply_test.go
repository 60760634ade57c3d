package subsync

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// TestApplyQueue: the queue keeps the furthest update per subscription;
// no worker runs before start or after stop, one runs while updates wait
// after start, and stop waits for the one running.
func TestApplyQueue(t *testing.T) {
	type put struct {
		sub string
		at  marker.Position
	}
	tests := []struct {
		name        string
		before      []put // queued before start
		started     bool
		stopped     bool // stop called before the puts after
		after       []put
		wantApplied []string                   // "sub at", sorted
		wantWaiting map[string]marker.Position // left in the queue
	}{
		{
			name:        "before start: waits, the furthest per subscription",
			before:      []put{{"billing", subsynctest.Pos(1, 10)}, {"billing", subsynctest.Pos(1, 5)}, {"audit", subsynctest.Pos(2, 1)}},
			wantWaiting: map[string]marker.Position{"billing": subsynctest.Pos(1, 10), "audit": subsynctest.Pos(2, 1)},
		},
		{
			name:        "start applies what waited",
			before:      []put{{"billing", subsynctest.Pos(1, 5)}, {"billing", subsynctest.Pos(1, 10)}},
			started:     true,
			wantApplied: []string{"billing 1:10:-1"},
		},
		{
			name:        "running: each update applied",
			started:     true,
			after:       []put{{"billing", subsynctest.Pos(1, 10)}, {"audit", subsynctest.Pos(2, 1)}},
			wantApplied: []string{"audit 2:1:-1", "billing 1:10:-1"},
		},
		{
			name:        "after stop: nothing applied",
			started:     true,
			stopped:     true,
			after:       []put{{"billing", subsynctest.Pos(1, 10)}},
			wantWaiting: map[string]marker.Position{"billing": subsynctest.Pos(1, 10)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					q       applyQueue
					mu      sync.Mutex
					applied []string
				)
				apply := func(_ context.Context, sub string, at marker.Position) {
					mu.Lock()
					defer mu.Unlock()
					applied = append(applied, sub+" "+at.String())
				}
				for _, p := range tt.before {
					q.put(p.sub, p.at)
				}
				if tt.started {
					q.start(context.Background(), apply, nil)
				}
				synctest.Wait()
				if tt.stopped {
					q.stop()
				}
				for _, p := range tt.after {
					q.put(p.sub, p.at)
					synctest.Wait()
				}
				q.stop()
				mu.Lock()
				defer mu.Unlock()
				if slices.Sort(applied); !slices.Equal(applied, tt.wantApplied) {
					t.Errorf("applied %v, want %v", applied, tt.wantApplied)
				}
				if got := q.waiting(); !maps.Equal(got, tt.wantWaiting) && (len(got) != 0 || len(tt.wantWaiting) != 0) {
					t.Errorf("waiting %v, want %v", got, tt.wantWaiting)
				}
				if q.running {
					t.Error("a worker still counted as running")
				}
			})
		})
	}
}

// TestApplyQueueStopWaits: stop returns only after the update being
// applied is done.
func TestApplyQueueStopWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q applyQueue
		release := make(chan struct{})
		var events []string
		var mu sync.Mutex
		note := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
		ctx, cancel := context.WithCancel(context.Background())
		q.start(ctx, func(context.Context, string, marker.Position) {
			note("apply began")
			<-release
			note("apply returned")
		}, nil)
		q.put("billing", subsynctest.Pos(1, 10))
		synctest.Wait()
		cancel()
		stopped := make(chan struct{})
		go func() { q.stop(); note("stopped"); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("stop returned while an update was being applied")
		default:
		}
		close(release)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"apply began", "apply returned", "stopped"}; !slices.Equal(events, want) {
			t.Errorf("events %v, want %v", events, want)
		}
	})
}
