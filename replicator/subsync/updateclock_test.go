package subsync

import (
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// Updates are ordered by their origin in the writer's partition and aged
// against the writer's own newest write time, never against this host's
// clock (issue 21, item 6): a writer 10 minutes behind had every update
// refused as stale, and one briefly ahead (an NTP step back) every later
// update as replayed until real time caught up.
func TestUpdateAcceptanceIgnoresHostClock(t *testing.T) {
	now := time.Now()
	type update struct {
		time   time.Time
		origin marker.Position
		want   string // refusal reason, "" when queued
	}
	tests := []struct {
		name    string
		updates []update
	}{
		{"writer an hour behind", []update{
			{now.Add(-time.Hour), subsynctest.Pos(60, 1), ""},
			{now.Add(-time.Hour + time.Second), subsynctest.Pos(60, 2), ""},
		}},
		{"writer ahead, then stepped back", []update{
			{now.Add(5 * time.Minute), subsynctest.Pos(60, 1), ""},
			{now, subsynctest.Pos(60, 2), ""},
			{now.Add(time.Second), subsynctest.Pos(60, 3), ""},
		}},
		{"writer a day ahead", []update{
			{now.Add(24 * time.Hour), subsynctest.Pos(60, 1), ""},
		}},
		{"the same origin again: a replay", []update{
			{now, subsynctest.Pos(60, 5), ""},
			{now.Add(time.Second), subsynctest.Pos(60, 5), "replayed"},
			{now.Add(2 * time.Second), subsynctest.Pos(60, 4), "replayed"},
			{now.Add(3 * time.Second), subsynctest.Pos(61, 0), ""},
		}},
		{"far behind what the writer sent since: stale", []update{
			{now, subsynctest.Pos(60, 5), ""},
			{now.Add(-11 * time.Minute), subsynctest.Pos(60, 6), "stale-update"},
			{now.Add(-9 * time.Minute), subsynctest.Pos(60, 7), ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Sync{}
			for i, u := range tt.updates {
				up := marker.Marker{Kind: marker.KindUpdate, From: "west", To: "east", Subscription: "billing",
					Remote: subsynctest.Pos(9, int64(i)), Time: u.time.UnixMilli()}
				if got := s.enqueueApply(up, u.origin); got != u.want {
					t.Errorf("update %d (written %s from now, origin %s): %q, want %q", i, u.time.Sub(now).Round(time.Second), u.origin, got, u.want)
				}
			}
		})
	}
}
