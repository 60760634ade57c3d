package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBefore: a finding names the faults under way in the 30 s before
// it: started before it, and not over more than 30 s before it.
func TestBefore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	timeline := []applied{
		{Event: Event{Kind: KindKill, Target: "east-a"}, Start: at(0), End: at(10)},    // over 40 s before 50
		{Event: Event{Kind: KindUnload, Target: "west x"}, Start: at(25), End: at(25)}, // 25 s before 50
		{Event: Event{Kind: KindDedupOff, Target: "west"}, Start: at(5), End: at(60)},  // under way at 50
		{Event: Event{Kind: KindBurst, Target: "east"}, Start: at(51), End: at(55)},    // after 50
	}
	for _, tc := range []struct {
		at   int
		want []Kind
	}{
		{50, []Kind{KindUnload, KindDedupOff}},
		{3, []Kind{KindKill}},
		{100, nil},
		{52, []Kind{KindUnload, KindDedupOff, KindBurst}},
	} {
		var got []Kind
		for _, a := range before(timeline, at(tc.at)) {
			got = append(got, a.Kind)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("before +%ds: got %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestWriteReport: the report gives the seed to run again with, the
// timeline, and each finding with the faults before it.
func TestWriteReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kill := applied{Event: Event{At: 20 * time.Second, Kind: KindKill, Target: "east-a", For: 5 * time.Second},
		Start: t0.Add(20 * time.Second), End: t0.Add(26 * time.Second)}
	st := Stream{"west", "persistent://t/ns/plain", "east", "east-plain"}
	res := &Result{NS: "t/ns", Start: t0, Timeline: []applied{kill}, Drained: true,
		Produced: map[string][2]int64{"east": {10, 0}, "west": {10, 0}},
		Rows:     []Row{{Stream: st, Sent: 10, Read: 11, Duplicate: 1}},
		Findings: []Finding{{Stream: st, Kind: Duplicate, Count: 1, Seqs: []int64{7}, At: t0.Add(30 * time.Second)}}}
	var b bytes.Buffer
	WriteReport(&b, Options{Seed: 1234, Duration: 3 * time.Minute, Rate: 100}, res)
	for _, want := range []string{
		"SOAK_SEED=1234 SOAK_DURATION=3m0s",
		"+20s  kill-9    east-a for 5s  applied +20s..+26s",
		"duplicate: 1 duplicate on west, plain, producer east-plain; first at +30s, seqs [7]",
		"      after     +20s  kill-9    east-a for 5s",
		"not wired producers with Java's client",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestKnownGap: a duplicate on a cluster whose broker was restarted in
// the 30 s before it names that gap; a duplicate elsewhere, or another
// finding, does not.
func TestKnownGap(t *testing.T) {
	restart := applied{Event: Event{Kind: KindRestart, Target: "west"}}
	unload := applied{Event: Event{Kind: KindUnload, Target: "west plain"}}
	dedupOffWest := applied{Event: Event{Kind: KindDedupOff, Target: "west"}}
	onWest := Stream{Cluster: "west", Origin: "east"}
	onEast := Stream{Cluster: "east", Origin: "west"}
	for _, tc := range []struct {
		name   string
		f      Finding
		faults []applied
		gap    bool
	}{
		{"duplicate on the restarted target", Finding{Stream: onWest, Kind: Duplicate}, []applied{unload, restart}, true},
		{"duplicate on the other cluster", Finding{Stream: onEast, Kind: Duplicate}, []applied{restart}, false},
		{"duplicate after an unload only", Finding{Stream: onWest, Kind: Duplicate}, []applied{unload}, false},
		{"loss on the restarted target", Finding{Stream: onWest, Kind: Lost}, []applied{restart}, false},
		{"duplicate with the target's deduplication off", Finding{Stream: onWest, Kind: Duplicate}, []applied{dedupOffWest}, true},
		{"duplicate with the other's deduplication off", Finding{Stream: onEast, Kind: Duplicate}, []applied{dedupOffWest}, false},
		{"loss with deduplication off", Finding{Stream: onWest, Kind: Lost}, []applied{dedupOffWest}, false},
	} {
		if got := knownGap(tc.f, tc.faults) != ""; got != tc.gap {
			t.Errorf("%s: known gap %v, want %v", tc.name, got, tc.gap)
		}
	}
}

// TestWriteReportVerifyRSS: the report sets verify's counts beside the
// checker's per pair and topic and names why a pair fails; it gives each
// instance's RSS at the warm-up and the end, and the judgement.
func TestWriteReportVerifyRSS(t *testing.T) {
	res := &Result{NS: "t/ns", Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Drained: true,
		Verify: []VerifyRun{
			{From: "east", To: "west", Topic: "plain", Batched: true, Exit: 0, Expected: 50, Present: 50},
			{From: "west", To: "east", Topic: "single", Exit: 1, Expected: 9, Present: 8, Missing: 1, CheckerLost: 2, Err: "geo-sidecar verify:\n  x"},
		},
		RSS: []RSSJudgement{
			{Instance: "east-a", Life: 1, Lives: 1, Span: 3 * time.Minute, Warmup: 36 * time.Second, WarmKB: 51200, PeakKB: 53248, EndKB: 52224, Growth: 0.02},
			{Instance: "east-b", Life: 2, Lives: 3, Span: 30 * time.Minute, Warmup: 5 * time.Minute, WarmKB: 51200, PeakKB: 61440, EndKB: 61440, Growth: 0.2, Flagged: true, Fails: true},
			{Instance: "west-a", Life: 2, Lives: 2, Span: 5 * time.Second, Note: "too short to judge"},
		}}
	if !res.Failed() {
		t.Error("a failing verify pair and a grown RSS do not fail the run")
	}
	var b bytes.Buffer
	WriteReport(&b, Options{Seed: 1, Duration: 3 * time.Minute, Rate: 100}, res)
	for _, want := range []string{
		"east->west   plain     0        50       50",
		"FAIL west->east single: verify exit 1; verify lost 1 entries, the checker 2 messages (geo-sidecar verify: x)",
		"east-a  1 of 1    3m0s      36s            50.0        52.0    51.0   +2.0%                  ok",
		"east-b  2 of 3   30m0s     5m0s            50.0        60.0    60.0  +20.0%        GREW (fails)",
		"west-a  2 of 2      5s",
		"too short to judge",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	ok := &Result{Drained: true, Verify: []VerifyRun{{Exit: 0}}, RSS: []RSSJudgement{{Flagged: true}}}
	if ok.Failed() {
		t.Error("a flag after a short warm-up fails the run")
	}
}

// TestWriteReportLarge: the load line counts the large messages.
func TestWriteReportLarge(t *testing.T) {
	res := &Result{Produced: map[string][2]int64{"east": {100, 1}, "west": {90, 0}},
		Large: map[string][2]int64{"east": {2, 5 << 20}, "west": {1, 3 << 19}}}
	var b bytes.Buffer
	WriteReport(&b, Options{Rate: 100}, res)
	want := "acknowledged/failed sends: east 100/1 west 90/0; of them large (1 to 4 MiB): east 2 (5.0 MiB) west 1 (1.5 MiB)"
	if !strings.Contains(b.String(), want) {
		t.Errorf("lacks %q:\n%s", want, b.String())
	}
}

// TestFollowing: a duplicate's report also names the faults that began
// in the 2 minutes after its first copy, and the known gap of a
// deduplication off on its cluster among them.
func TestFollowing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	restart := applied{Event: Event{At: 35 * time.Second, Kind: KindRestart, Target: "west", For: 8 * time.Second}, Start: at(35), End: at(103)}
	dedup := applied{Event: Event{At: 75 * time.Second, Kind: KindDedupOff, Target: "east", For: 36 * time.Second}, Start: at(75), End: at(111)}
	late := applied{Event: Event{At: 200 * time.Second, Kind: KindBurst, Target: "east", For: 5 * time.Second}, Start: at(200), End: at(205)}
	timeline := []applied{restart, dedup, late}
	if got := following(timeline, at(34)); len(got) != 2 || got[0].Kind != KindRestart || got[1].Kind != KindDedupOff {
		t.Errorf("following +34s: %v", got)
	}
	if got := following(timeline, at(35)); len(got) != 1 {
		t.Errorf("following +35s (the restart began then, not after): %v", got)
	}
	st := Stream{"east", "persistent://t/ns/single", "west", "west-single"}
	res := &Result{Start: t0, Timeline: timeline, Findings: []Finding{
		{Stream: st, Kind: Duplicate, Count: 34, Seqs: []int64{1}, At: at(34)},
		{Stream: st, Kind: OutOfOrder, Count: 1, Seqs: []int64{2}, At: at(34)},
	}}
	var b bytes.Buffer
	WriteReport(&b, Options{}, res)
	out := b.String()
	for _, want := range []string{
		"      then      +35s  restart   west for 8s\n",
		"      then    +1m15s  dedup-off east for 36s\n",
		"known gap: target deduplication off when the first copies were stored or sent again",
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("report has %q %d times, want once (the duplicate's, not the out of order's):\n%s", want, strings.Count(out, want), out)
		}
	}
	if strings.Contains(out, "then   +3m20s") {
		t.Errorf("a fault more than 2 minutes after is named:\n%s", out)
	}
}
