package main

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reach := map[string][]string{"east": {"east", "west"}, "west": {"west", "east"}}
	const p = "persistent://t/ns/x-partition-0"
	// reads builds a partition's reads on cluster of east's producer "e0"
	// in the order given.
	reads := func(cluster, origin string, seqs ...int64) []Read {
		out := make([]Read, len(seqs))
		for i, s := range seqs {
			out[i] = Read{Cluster: cluster, Partition: p, Origin: origin, Producer: "e0", Seq: s, Publish: t0.Add(time.Duration(i) * time.Second), Pos: fmt.Sprintf("%s:%d", cluster, i)}
		}
		return out
	}
	sent := func(n int64) Sent {
		s := Sent{}
		for i := range n {
			s.Add(p, "east", "e0", i, t0.Add(time.Duration(i)*time.Second))
		}
		return s
	}
	cat := func(rs ...[]Read) []Read {
		var out []Read
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	east := Stream{"east", p, "east", "e0"}
	west := Stream{"west", p, "east", "e0"}
	for _, tc := range []struct {
		name     string
		reads    []Read
		sent     Sent
		findings []Finding
		westRow  Row
	}{
		{
			name:    "all there once in order",
			reads:   cat(reads("east", "east", 0, 1, 2, 3), reads("west", "east", 0, 1, 2, 3)),
			sent:    sent(4),
			westRow: Row{Stream: west, Sent: 4, Read: 4},
		},
		{
			name:  "lost on the target",
			reads: cat(reads("east", "east", 0, 1, 2, 3), reads("west", "east", 0, 3)),
			sent:  sent(4),
			findings: []Finding{
				{Stream: west, Kind: Lost, Count: 2, Seqs: []int64{1, 2}, At: t0.Add(time.Second)},
			},
			westRow: Row{Stream: west, Sent: 4, Read: 2, Lost: 2},
		},
		{
			name:  "lost at the origin too",
			reads: cat(reads("east", "east", 0, 1), reads("west", "east", 0, 1)),
			sent:  sent(3),
			findings: []Finding{
				{Stream: east, Kind: Lost, Count: 1, Seqs: []int64{2}, At: t0.Add(2 * time.Second)},
				{Stream: west, Kind: Lost, Count: 1, Seqs: []int64{2}, At: t0.Add(2 * time.Second)},
			},
			westRow: Row{Stream: west, Sent: 3, Read: 2, Lost: 1},
		},
		{
			// A second copy after the messages that followed the first
			// (guarantees.md, Duplicates) is a duplicate, not a reorder.
			name:  "duplicate late",
			reads: cat(reads("east", "east", 0, 1, 2), reads("west", "east", 0, 1, 2, 1, 2)),
			sent:  sent(3),
			findings: []Finding{
				{Stream: west, Kind: Duplicate, Count: 2, Seqs: []int64{1, 2}, At: t0.Add(3 * time.Second), Pos: "west:3"},
			},
			westRow: Row{Stream: west, Sent: 3, Read: 5, Duplicate: 2},
		},
		{
			name:  "reorder",
			reads: cat(reads("east", "east", 0, 1, 2, 3), reads("west", "east", 0, 2, 1, 3)),
			sent:  sent(4),
			findings: []Finding{
				{Stream: west, Kind: OutOfOrder, Count: 1, Seqs: []int64{1}, At: t0.Add(2 * time.Second), Pos: "west:2"},
			},
			westRow: Row{Stream: west, Sent: 4, Read: 4, OutOfOrder: 1},
		},
		{
			// A send that failed in a fault (not acknowledged) but was
			// stored is counted, not a finding.
			name:  "stored without acknowledgement",
			reads: cat(reads("east", "east", 0, 1, 2), reads("west", "east", 0, 1, 2)),
			sent: func() Sent {
				s := sent(3)
				delete(s[Stream{Partition: p, Origin: "east", Producer: "e0"}], 1)
				return s
			}(),
			westRow: Row{Stream: west, Sent: 2, Read: 3},
		},
		{
			// Copies of a third cluster's messages (north is no origin
			// here), and east's own messages copied back to east.
			name: "a third cluster's copies and a loop",
			reads: cat(reads("east", "east", 0, 1), reads("west", "east", 0, 1),
				reads("west", "north", 0, 1)),
			sent: sent(2),
			findings: []Finding{
				{Stream: Stream{"west", p, "north", "e0"}, Kind: Unexpected, Count: 2, Seqs: []int64{0, 1}, At: t0, Pos: "west:0"},
			},
			westRow: Row{Stream: west, Sent: 2, Read: 2},
		},
		{
			name:  "everything lost on the target",
			reads: reads("east", "east", 0, 1),
			sent:  sent(2),
			findings: []Finding{
				{Stream: west, Kind: Lost, Count: 2, Seqs: []int64{0, 1}, At: t0},
			},
			westRow: Row{Stream: west, Sent: 2, Lost: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, findings := Check(tc.reads, tc.sent, reach)
			if !reflect.DeepEqual(findings, tc.findings) {
				t.Errorf("findings:\n got %+v\nwant %+v", findings, tc.findings)
			}
			var got *Row
			for i := range rows {
				if rows[i].Stream == west {
					got = &rows[i]
				}
			}
			if got == nil || *got != tc.westRow {
				t.Errorf("west's row: got %+v, want %+v", got, tc.westRow)
			}
		})
	}
}

// TestCheckLoopBack: east's messages copied back to east (a loop: the
// copies carry a sidecar's origin properties) are unexpected on east, the
// origin, not the producer's own duplicates.
func TestCheckLoopBack(t *testing.T) {
	reach := map[string][]string{"east": {"east", "west"}}
	const p = "persistent://t/ns/x"
	var reads []Read
	for i, s := range []int64{0, 1, 0, 1} {
		reads = append(reads, Read{Cluster: "east", Partition: p, Origin: "east", Producer: "e0", Seq: s, Copy: i >= 2})
	}
	sent := Sent{}
	sent.Add(p, "east", "e0", 0, time.Time{})
	sent.Add(p, "east", "e0", 1, time.Time{})
	_, findings := Check(reads, sent, reach)
	want := []Finding{
		{Stream: Stream{"east", p, "east", "e0"}, Kind: Unexpected, Count: 2, Seqs: []int64{0, 1}},
		{Stream: Stream{"west", p, "east", "e0"}, Kind: Lost, Count: 2, Seqs: []int64{0, 1}},
	}
	if !reflect.DeepEqual(findings, want) {
		t.Errorf("findings:\n got %+v\nwant %+v", findings, want)
	}
}

// TestCheckProducersOwnDuplicates: a message the producer stored twice
// on its origin (a resend with deduplication off there: seen in the
// 30-minute soak of seed 6308975623224262676, 16 findings of that kind
// and no other) is the application's, and so is each copy of it; a copy
// more than the origin holds is the sidecar's.
func TestCheckProducersOwnDuplicates(t *testing.T) {
	reach := map[string][]string{"east": {"east", "west"}}
	const p = "persistent://t/ns/x"
	read := func(cluster string, copy bool, seqs ...int64) []Read {
		var out []Read
		for _, s := range seqs {
			out = append(out, Read{Cluster: cluster, Partition: p, Origin: "east", Producer: "e0", Seq: s, Copy: copy})
		}
		return out
	}
	sent := Sent{}
	for i := range int64(3) {
		sent.Add(p, "east", "e0", i, time.Time{})
	}
	east := Stream{"east", p, "east", "e0"}
	west := Stream{"west", p, "east", "e0"}
	for _, tc := range []struct {
		name           string
		reads          []Read
		findings       []Finding
		eastRow, westR Row
	}{
		{"stored twice at the origin, copied faithfully",
			append(read("east", false, 0, 1, 1, 2), read("west", true, 0, 1, 1, 2)...), nil,
			Row{Stream: east, Sent: 3, Read: 4, OriginDuplicate: 1}, Row{Stream: west, Sent: 3, Read: 4, OriginDuplicate: 1}},
		{"a copy more than the origin holds",
			append(read("east", false, 0, 1, 1, 2), read("west", true, 0, 1, 1, 1, 2)...),
			[]Finding{{Stream: west, Kind: Duplicate, Count: 1, Seqs: []int64{1}}},
			Row{Stream: east, Sent: 3, Read: 4, OriginDuplicate: 1}, Row{Stream: west, Sent: 3, Read: 5, Duplicate: 1, OriginDuplicate: 1}},
		{"a copy twice, once at the origin",
			append(read("east", false, 0, 1, 2), read("west", true, 0, 1, 2, 1)...),
			[]Finding{{Stream: west, Kind: Duplicate, Count: 1, Seqs: []int64{1}}},
			Row{Stream: east, Sent: 3, Read: 3}, Row{Stream: west, Sent: 3, Read: 4, Duplicate: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, findings := Check(tc.reads, sent, reach)
			if !reflect.DeepEqual(findings, tc.findings) {
				t.Errorf("findings:\n got %+v\nwant %+v", findings, tc.findings)
			}
			for _, r := range rows {
				if want := map[Stream]Row{east: tc.eastRow, west: tc.westR}[r.Stream]; r != want {
					t.Errorf("row %+v, want %+v", r, want)
				}
			}
		})
	}
}

// TestCheckNorth: with the one-way pair east->north, north must hold
// every east-origin message and none of west's; a west-origin copy on
// north is Unexpected, an east-origin one missing there Lost.
func TestCheckNorth(t *testing.T) {
	reach := topologyOf(true).Reach()
	sent := Sent{}
	at := time.Unix(1000, 0)
	sent.Add("p", "east", "e1", 0, at)
	sent.Add("p", "east", "e1", 1, at)
	sent.Add("p", "west", "w1", 0, at)
	var reads []Read
	for _, c := range []string{"east", "west"} {
		reads = append(reads, Read{Cluster: c, Partition: "p", Origin: "east", Producer: "e1", Seq: 0, Copy: c != "east"},
			Read{Cluster: c, Partition: "p", Origin: "east", Producer: "e1", Seq: 1, Copy: c != "east"},
			Read{Cluster: c, Partition: "p", Origin: "west", Producer: "w1", Seq: 0, Copy: c != "west"})
	}
	reads = append(reads, Read{Cluster: "north", Partition: "p", Origin: "east", Producer: "e1", Seq: 0, Copy: true},
		Read{Cluster: "north", Partition: "p", Origin: "west", Producer: "w1", Seq: 0, Copy: true})
	_, findings := Check(reads, sent, reach)
	var got []string
	for _, f := range findings {
		got = append(got, fmt.Sprintf("%s %s %s %v", f.Kind, f.Cluster, f.Origin, f.Seqs))
	}
	want := []string{"lost north east [1]", "unexpected north west [0]"}
	if !slices.Equal(got, want) {
		t.Errorf("findings %q, want %q", got, want)
	}
}
