package subsync

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
)

// TestLagReport: a reading sets the gauges of the tracked subscriptions
// found on both sides, drops those gone since the last one, names the
// ones the remote lacks, and counts as complete (its time kept) only
// without those; aged moves only the ages of copies that trail.
func TestLagReport(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name           string
		before         map[string]lagReading // reported by the reading before
		sent           bool                  // an update was sent for every subscription (just now)
		local, remote  map[string]int64
		want           map[string][2]float64 // entries, age > 0 as 1
		wantMissing    []string
		wantComplete   bool
		wantLargest    float64
		wantAgedSeries map[string][2]float64 // after aged, the ages as 1 where they count
	}{
		{
			name:  "both sides, one untracked",
			local: map[string]int64{"billing": 3, "audit": 9, "adhoc": 1}, remote: map[string]int64{"billing": 10, "audit": 4, "adhoc": 50},
			want:         map[string][2]float64{"billing": {7, 0}, "audit": {0, 0}},
			wantComplete: true, wantLargest: 7,
			wantAgedSeries: map[string][2]float64{"billing": {7, 0}, "audit": {0, 0}},
		},
		{
			name:  "missing on the remote",
			local: map[string]int64{"billing": 3, "only-here": 2}, remote: map[string]int64{"billing": 10, "only-there": 7},
			want:        map[string][2]float64{"billing": {7, 0}},
			wantMissing: []string{"only-here"}, wantComplete: false, wantLargest: 7,
			wantAgedSeries: map[string][2]float64{"billing": {7, 0}},
		},
		{
			name:   "gone since the last reading",
			before: map[string]lagReading{"gone": {entries: 4}},
			local:  map[string]int64{"billing": 3}, remote: map[string]int64{"billing": 3},
			want:         map[string][2]float64{"billing": {0, 0}},
			wantComplete: true, wantLargest: 0,
			wantAgedSeries: map[string][2]float64{"billing": {0, 0}},
		},
		{
			name:  "an update sent: the trailing copy ages",
			sent:  true,
			local: map[string]int64{"billing": 3, "audit": 9}, remote: map[string]int64{"billing": 10, "audit": 4},
			want:         map[string][2]float64{"billing": {7, 1}, "audit": {0, 0}},
			wantComplete: true, wantLargest: 7,
			wantAgedSeries: map[string][2]float64{"billing": {7, 1}, "audit": {0, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New(nil)
			g := lagGauges{m: m, local: "east", remote: "west", topic: syncTopic}
			var l lagReport
			for name, r := range tt.before {
				g.set(name, r.entries, 0)
			}
			l.reported = maps.Clone(tt.before)
			if tt.sent {
				for name := range tt.local {
					l.sentUpdate(name, snapshot.Snapshot{Time: time.Now().Add(-time.Minute)})
				}
			}
			var missing []string
			tracked := func(sub string) bool { return sub != "adhoc" }
			l.report(g, tt.local, tt.remote, tracked, func(sub string) { missing = append(missing, sub) }, at)

			if got := ageSet(lagSeries(t, m)); !maps.Equal(got, tt.want) {
				t.Errorf("gauges = %v, want %v", got, tt.want)
			}
			if slices.Sort(missing); !slices.Equal(missing, tt.wantMissing) {
				t.Errorf("missing = %v, want %v", missing, tt.wantMissing)
			}
			if got := l.at.Equal(at); got != tt.wantComplete {
				t.Errorf("complete = %v, want %v", got, tt.wantComplete)
			}
			if l.largest != tt.wantLargest {
				t.Errorf("largest = %v, want %v", l.largest, tt.wantLargest)
			}
			for _, name := range tt.wantMissing {
				if l.onRemote[name] {
					t.Errorf("%s counted as found on the remote", name)
				}
			}
			l.aged(g)
			if got := ageSet(lagSeries(t, m)); !maps.Equal(got, tt.wantAgedSeries) {
				t.Errorf("after aged: gauges = %v, want %v", got, tt.wantAgedSeries)
			}
		})
	}
}

// ageSet replaces each positive age by 1: the tests tell only whether it
// counts.
func ageSet(series map[string][2]float64) map[string][2]float64 {
	out := map[string][2]float64{}
	for k, v := range series {
		if v[1] > 0 {
			v[1] = 1
		}
		out[k] = v
	}
	return out
}

// TestLagReportFresh: a complete reading stands for lagRefresh, none
// before the first.
func TestLagReportFresh(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		last time.Time
		now  time.Time
		want bool
	}{
		{"never read", time.Time{}, at, false},
		{"just read", at, at.Add(time.Second), true},
		{"refresh due", at, at.Add(lagRefresh), false},
	}
	for _, tt := range tests {
		if got := (&lagReport{at: tt.last}).fresh(tt.now); got != tt.want {
			t.Errorf("%s: fresh = %v, want %v", tt.name, got, tt.want)
		}
	}
}
