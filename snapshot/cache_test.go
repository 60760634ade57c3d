package snapshot

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// snap is a snapshot completed at t0 + sec seconds at local entry e.
func snap(id string, e int64, sec int) Snapshot {
	return Snapshot{ID: id, Local: pos(e), Remote: pos(e + 1000), Time: t0.Add(time.Duration(sec) * time.Second)}
}

func ids(s []Snapshot) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, x.ID)
	}
	return out
}

func TestCacheKeepsOldestAndNewest(t *testing.T) {
	for _, size := range []int{1, 2, 3, 10} {
		for _, order := range []string{"in order", "shuffled"} {
			t.Run(fmt.Sprintf("size %d %s", size, order), func(t *testing.T) {
				const n = 200
				idx := make([]int, n)
				for i := range idx {
					idx[i] = i
				}
				if order == "shuffled" {
					rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
				}
				c := cache{size: size}
				oldest, newest := idx[0], idx[0]
				for _, i := range idx {
					c.add(snap(fmt.Sprint(i), int64(i), i))
					oldest, newest = min(oldest, i), max(newest, i)
					if len(c.s) > size {
						t.Fatalf("%d entries", len(c.s))
					}
					for j := 1; j < len(c.s); j++ {
						if !less(c.s[j-1], c.s[j]) {
							t.Fatalf("out of order: %v", ids(c.s))
						}
					}
					if got := c.s[len(c.s)-1].ID; got != fmt.Sprint(newest) {
						t.Fatalf("newest %d lost: %v", newest, ids(c.s))
					}
					if got := c.s[0].ID; size > 1 && got != fmt.Sprint(oldest) {
						t.Fatalf("oldest %d lost: %v", oldest, ids(c.s))
					}
				}
				if len(c.s) != size {
					t.Errorf("%d entries, want %d", len(c.s), size)
				}
			})
		}
	}
}

func TestCacheDeduplicatesByID(t *testing.T) {
	c := cache{size: 3}
	c.add(snap("a", 1, 1))
	c.add(snap("a", 1, 1))
	c.add(snap("a", 9, 9)) // same id, other content: the first stands
	if want := []Snapshot{snap("a", 1, 1)}; !reflect.DeepEqual(c.s, want) {
		t.Errorf("cache %+v, want %+v", c.s, want)
	}
}

// TestCacheThinsWithAge: a day of snapshots 4 s apart leaves entries
// spread geometrically over the day, so that a subscription lagging by d
// finds a snapshot not much older than d, whatever d.
func TestCacheThinsWithAge(t *testing.T) {
	const step, n = 4, 86400 / 4
	c := cache{size: 10}
	for i := range n {
		c.add(snap(fmt.Sprint(i), int64(i), i*step))
	}
	var ages []int
	for _, s := range c.s {
		ages = append(ages, (n-1-int(s.Local.Entry))*step)
	}
	t.Logf("ages after a day, in seconds: %v", ages)
	if ages[0] != (n-1)*step || ages[len(ages)-1] != 0 {
		t.Errorf("oldest or newest lost: %v", ages)
	}
	// Lag d of a subscription (in snapshots) -> age of the snapshot that
	// covers it: at most 10 d, 2 d on average over all lags.
	worst, sum := 0.0, 0.0
	for lag := 1; lag < n-1; lag++ {
		i := c.covering(pos(int64(n - 1 - lag)))
		if i < 0 {
			t.Fatalf("lag %d: nothing covered", lag)
		}
		r := float64(n-1-int(c.s[i].Local.Entry)) / float64(lag)
		worst, sum = max(worst, r), sum+r
	}
	mean := sum / float64(n-2)
	t.Logf("covering snapshot age / lag: worst %.1f, mean %.1f", worst, mean)
	if worst > 10 || mean > 3 {
		t.Errorf("covering snapshot age / lag: worst %.1f (want <= 10), mean %.1f (want <= 3)", worst, mean)
	}
}

func TestCovering(t *testing.T) {
	at := func(l, e int64, b int32) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: b} }
	c := cache{size: 10}
	for _, s := range []Snapshot{
		{ID: "s1", Local: at(1, 5, -1)},
		{ID: "s2", Local: at(1, 7, 2)},
		{ID: "s3", Local: at(1, 7, 4)},
		{ID: "s4", Local: at(3, 0, -1)},
		{ID: "s5", Local: at(3, 2, 0)},
	} {
		c.add(s)
	}
	tests := []struct {
		md    marker.Position
		want  string // "" for none
		after []string
	}{
		{at(0, 100, -1), "", []string{"s1", "s2", "s3", "s4", "s5"}},
		{at(1, 4, -1), "", []string{"s1", "s2", "s3", "s4", "s5"}},
		{at(1, 5, -1), "s1", []string{"s1", "s2", "s3", "s4", "s5"}},
		{at(1, 5, 0), "s1", []string{"s1", "s2", "s3", "s4", "s5"}}, // md's batch ignored
		{at(1, 6, -1), "s1", []string{"s1", "s2", "s3", "s4", "s5"}},
		{at(1, 7, -1), "s3", []string{"s3", "s4", "s5"}}, // the whole entry 7 is consumed
		{at(1, 7, 0), "s3", []string{"s3", "s4", "s5"}},
		{at(2, 100, -1), "s3", []string{"s3", "s4", "s5"}},
		{at(3, 0, -1), "s4", []string{"s4", "s5"}},
		{at(3, 1, -1), "s4", []string{"s4", "s5"}},
		{at(3, 2, -1), "s5", []string{"s5"}},
		{at(9, 0, -1), "s5", []string{"s5"}},
	}
	for _, tt := range tests {
		t.Run(tt.md.String(), func(t *testing.T) {
			m := New(Config{Topic: topic, Local: "A", Remote: "B"})
			m.cache.s = append([]Snapshot(nil), c.s...)
			got, ok := m.Covering(tt.md)
			if ok != (tt.want != "") || got.ID != tt.want {
				t.Errorf("Covering = %q, %v; want %q", got.ID, ok, tt.want)
			}
			m.Prune(tt.md)
			if got := ids(m.cache.s); !reflect.DeepEqual(got, tt.after) {
				t.Errorf("after Prune: %v, want %v", got, tt.after)
			}
			// Prune keeps what Covering returned.
			if again, ok2 := m.Covering(tt.md); again != got || ok2 != ok {
				t.Errorf("Covering after Prune = %q, want %q", again.ID, got.ID)
			}
		})
	}
}

func TestMachineNewest(t *testing.T) {
	m := New(Config{Topic: "t", Local: "a", Remote: "b", CacheSize: 3})
	if _, ok := m.Newest(); ok {
		t.Fatal("Newest() of an empty cache: ok")
	}
	for i, l := range []int64{5, 9, 7} {
		m.Marker(marker.Position{Ledger: 1, Entry: l}, marker.Marker{Kind: marker.KindSnapshot, From: "a", To: "b", Topic: "t",
			SnapshotID: fmt.Sprint(i), Local: marker.Position{Ledger: 1, Entry: l, Batch: -1}})
	}
	if s, ok := m.Newest(); !ok || s.Local.Entry != 9 {
		t.Errorf("Newest() = %+v, %v; want the snapshot at 1:9", s, ok)
	}
}

// After Forget, a request is not answered until the third origin's
// watermark is learned again, however fresh the machine was.
func TestMachineForget(t *testing.T) {
	m := New(Config{Topic: "t", Local: "a", Remote: "b", ThirdOrigins: []string{"c"}, Fresh: true, CacheSize: 3})
	req := marker.Marker{Kind: marker.KindSnapshotRequest, From: "b", To: "a", Topic: "t", SnapshotID: "r"}
	m.Data(marker.Position{Ledger: 1, Entry: 1, Batch: -1}, "c", marker.Position{Ledger: 9, Entry: 4, Batch: -1})
	if got := m.Marker(marker.Position{Ledger: 1, Entry: 2, Batch: -1}, req); len(got) != 1 {
		t.Fatalf("before Forget: %d markers in answer, want a response", len(got))
	}
	m.Forget()
	if m.Fresh() {
		t.Error("Fresh() after Forget")
	}
	if got := m.Marker(marker.Position{Ledger: 1, Entry: 3, Batch: -1}, req); len(got) != 0 {
		t.Errorf("after Forget: answered %+v, want no answer until c's watermark is known", got)
	}
	m.Learn("c", marker.Position{Ledger: 9, Entry: 7, Batch: -1})
	got := m.Marker(marker.Position{Ledger: 1, Entry: 4, Batch: -1}, req)
	if len(got) != 1 || got[0].Watermarks["c"] != (marker.Position{Ledger: 9, Entry: 7, Batch: -1}) {
		t.Errorf("after Learn: %+v, want a response naming c at 9:7", got)
	}
}
