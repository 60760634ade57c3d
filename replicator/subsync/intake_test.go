package subsync

import (
	"fmt"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// The outbox holds outboxSize markers: the oldest goes when one more is
// written (gremlins survivor sync.go:213, `>`: one more held).
func TestOutboxBound(t *testing.T) {
	var o outbox
	mk := func(i int) marker.Marker {
		return marker.Marker{Kind: marker.KindSnapshotRequest, SnapshotID: fmt.Sprint(i), From: "east", To: "west", Time: 1}
	}
	for i := range outboxSize + 1 {
		o.put(mk(i))
	}
	if o.take(mk(0), subsynctest.Pos(1, 1)) {
		t.Error("the oldest marker still held past outboxSize")
	}
	if !o.take(mk(1), subsynctest.Pos(1, 2)) {
		t.Error("the second oldest marker evicted")
	}
}

// TestGateCopied: a copy of the remote's marker is taken only read after
// the last one taken and with an origin after its origin; one read again
// at or before it was judged already.
func TestGateCopied(t *testing.T) {
	type copyAt struct {
		pos, origin marker.Position
	}
	tests := []struct {
		name       string
		before     []copyAt // taken first
		c          copyAt
		wantAgain  bool
		wantReason string
	}{
		{"first copy", nil, copyAt{subsynctest.Pos(5, 1), subsynctest.Pos(90, 1)}, false, ""},
		{"after the last", []copyAt{{subsynctest.Pos(5, 1), subsynctest.Pos(90, 1)}}, copyAt{subsynctest.Pos(5, 2), subsynctest.Pos(90, 2)}, false, ""},
		{"read again at the same position", []copyAt{{subsynctest.Pos(5, 1), subsynctest.Pos(90, 1)}}, copyAt{subsynctest.Pos(5, 1), subsynctest.Pos(90, 1)}, true, ""},
		{"read again before", []copyAt{{subsynctest.Pos(5, 2), subsynctest.Pos(90, 2)}}, copyAt{subsynctest.Pos(5, 1), subsynctest.Pos(90, 9)}, true, ""},
		{"replayed: origin not after", []copyAt{{subsynctest.Pos(5, 1), subsynctest.Pos(90, 2)}}, copyAt{subsynctest.Pos(5, 2), subsynctest.Pos(90, 2)}, false, "replayed"},
		{"replayed: origin before", []copyAt{{subsynctest.Pos(5, 1), subsynctest.Pos(90, 2)}}, copyAt{subsynctest.Pos(5, 2), subsynctest.Pos(90, 1)}, false, "replayed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g gate
			for _, c := range tt.before {
				if again, reason := g.copied(c.pos, c.origin, 1); again || reason != "" {
					t.Fatalf("setup copy refused: %v %q", again, reason)
				}
			}
			again, reason := g.copied(tt.c.pos, tt.c.origin, 1)
			if again != tt.wantAgain || reason != tt.wantReason {
				t.Errorf("copied = %v, %q; want %v, %q", again, reason, tt.wantAgain, tt.wantReason)
			}
		})
	}
}

// TestGateUpdate: an update is taken only with an origin after the last
// one taken for its subscription, and not more than maxUpdateAge behind
// the newest write time of any copy from its writer (its own clock).
func TestGateUpdate(t *testing.T) {
	const t0 = int64(1_000_000_000)
	minutes := func(m int64) int64 { return t0 + m*int64(time.Minute/time.Millisecond) }
	tests := []struct {
		name       string
		copyTime   int64 // write time of a copy taken first (0: none)
		before     []string
		sub        string
		origin     int64 // entry in ledger 90
		time       int64
		wantReason string
	}{
		{"first", 0, nil, "billing", 2, t0, ""},
		{"origin after", 0, []string{"billing"}, "billing", 2, t0, ""},
		{"same origin", 0, []string{"billing"}, "billing", 1, t0, "replayed"},
		{"another subscription", 0, []string{"billing"}, "audit", 1, t0, ""},
		{"maxUpdateAge behind the writer's newest", minutes(10), nil, "billing", 2, t0, ""},
		{"more than maxUpdateAge behind", minutes(10) + 1, nil, "billing", 2, t0, "stale-update"},
		{"writer's clock far from ours", 0, nil, "billing", 2, t0 / 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g gate
			if tt.copyTime != 0 {
				g.copied(subsynctest.Pos(5, 1), subsynctest.Pos(80, 1), tt.copyTime)
			}
			for _, sub := range tt.before {
				if reason := g.update(sub, subsynctest.Pos(90, 1), t0); reason != "" {
					t.Fatalf("setup update refused: %q", reason)
				}
			}
			if got := g.update(tt.sub, subsynctest.Pos(90, tt.origin), tt.time); got != tt.wantReason {
				t.Errorf("update = %q, want %q", got, tt.wantReason)
			}
		})
	}
}

// TestGateLogDue: an invalid marker is logged at most every 10 s.
func TestGateLogDue(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var g gate
	for _, tt := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {time.Second, false}, {10 * time.Second, false}, {10*time.Second + 1, true}, {11 * time.Second, false}} {
		if got := g.logDue(now.Add(tt.at)); got != tt.want {
			t.Errorf("logDue at +%v = %v, want %v", tt.at, got, tt.want)
		}
	}
}
