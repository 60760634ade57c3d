package main

import (
	"fmt"
	"sort"
	"time"
)

// The properties the load generator tags every message with, so that the
// checker can tell every copy's origin producer and place without reading
// anything the sidecar writes.
const (
	PropOrigin   = "soak-origin"   // cluster the message was produced on
	PropProducer = "soak-producer" // the load generator's producer id
	PropSeq      = "soak-seq"      // per producer, from 0, one per send
)

// Read is one tagged message as the checker's reader saw it on Cluster,
// in Partition's order.
type Read struct {
	Cluster   string
	Partition string // full name of the partition (the topic when not partitioned)
	Origin    string
	Producer  string
	Seq       int64
	Publish   time.Time // publish time of this copy
	Pos       string    // ledger:entry:batch index of this copy, for looking into it
	// Copy: it carries a sidecar's origin properties (a copy the sidecar
	// wrote), where a message its producer sent does not.
	Copy bool
}

// Stream names one origin producer's messages in one partition on one
// cluster: the unit the checker counts in.
type Stream struct {
	Cluster, Partition, Origin, Producer string
}

// Sent is what the load generator's producers had acknowledged: per
// partition and producer (cluster left empty), each sequence number and
// when its send was acknowledged.
type Sent map[Stream]map[int64]time.Time

// Add records an acknowledged send.
func (s Sent) Add(partition, origin, producer string, seq int64, at time.Time) {
	k := Stream{Partition: partition, Origin: origin, Producer: producer}
	if s[k] == nil {
		s[k] = map[int64]time.Time{}
	}
	s[k][seq] = at
}

// FindingKind is what the checker found wrong with a stream.
type FindingKind string

// The kinds of findings.
const (
	// Lost: acknowledged to the producer at the origin, absent on a
	// cluster it must reach.
	Lost FindingKind = "lost"
	// Duplicate: a second (or later) copy of a sequence number, more
	// copies of it than its origin cluster holds (what the producer
	// stored twice there, with deduplication off, is the application's:
	// Row.OriginDuplicate).
	Duplicate FindingKind = "duplicate"
	// OutOfOrder: the first copy of a sequence number came after the
	// first copy of a higher one of the same producer in the partition.
	OutOfOrder FindingKind = "out-of-order"
	// Unexpected: a copy on a cluster the origin's messages must not
	// reach (a third cluster's copy), or a sidecar's copy on the origin
	// cluster itself (a loop back).
	Unexpected FindingKind = "unexpected"
)

// Finding is one run of one kind in one stream: Seqs (the first
// maxSeqs of them) and Count in all; At is when the first went wrong
// (the copy's publish time, or the acknowledgement of a lost send), Pos
// where (the copy's position; empty for a loss).
type Finding struct {
	Stream
	Kind  FindingKind
	Count int
	Seqs  []int64
	At    time.Time
	Pos   string
}

const maxSeqs = 10

// Row is the count of one stream for the report.
type Row struct {
	Stream
	Sent, Read, Lost, Duplicate, OutOfOrder int
	// OriginDuplicate counts the second and later messages of a sequence
	// number that its origin cluster holds too: the producer stored them
	// twice there (a resend after a reconnect while the origin's
	// deduplication was off), and a copy of each is no duplicate of the
	// sidecar's. No finding.
	OriginDuplicate int
}

// Check counts every stream: reads are every tagged message read on
// every cluster, per partition in the order read; sent is what the
// producers had acknowledged; reach says, per origin cluster, which
// clusters must hold its messages (the origin itself and its targets).
// A message read but never acknowledged (its send failed in a fault, or
// the acknowledgement was lost) is counted in Read and is no finding.
func Check(reads []Read, sent Sent, reach map[string][]string) ([]Row, []Finding) {
	rows := map[Stream]*Row{}
	row := func(k Stream) *Row {
		if rows[k] == nil {
			rows[k] = &Row{Stream: k}
		}
		return rows[k]
	}
	// At the origin cluster, how many messages the producer stored per
	// sequence number (its own sends, not a sidecar's copies).
	atOrigin := map[Stream]map[int64]int{}
	for _, r := range reads {
		if r.Cluster == r.Origin && !r.Copy {
			k := Stream{Partition: r.Partition, Origin: r.Origin, Producer: r.Producer}
			if atOrigin[k] == nil {
				atOrigin[k] = map[int64]int{}
			}
			atOrigin[k][r.Seq]++
		}
	}
	count := map[Stream]map[int64]int{}
	seen := map[Stream]map[int64]bool{}
	maxSeq := map[Stream]int64{}
	var findings []Finding
	open := map[Stream]map[FindingKind]*Finding{}
	note := func(k Stream, kind FindingKind, seq int64, at time.Time, pos string) {
		if open[k] == nil {
			open[k] = map[FindingKind]*Finding{}
		}
		f := open[k][kind]
		if f == nil {
			f = &Finding{Stream: k, Kind: kind, At: at, Pos: pos}
			open[k][kind] = f
		}
		f.Count++
		if len(f.Seqs) < maxSeqs {
			f.Seqs = append(f.Seqs, seq)
		}
	}
	for _, r := range reads {
		k := Stream{r.Cluster, r.Partition, r.Origin, r.Producer}
		rw := row(k)
		rw.Read++
		if !contains(reach[r.Origin], r.Cluster) || (r.Cluster == r.Origin && r.Copy) {
			note(k, Unexpected, r.Seq, r.Publish, r.Pos)
			continue
		}
		if seen[k] == nil {
			seen[k] = map[int64]bool{}
			count[k] = map[int64]int{}
			maxSeq[k] = -1
		}
		count[k][r.Seq]++
		switch {
		case seen[k][r.Seq] && count[k][r.Seq] <= atOrigin[Stream{Partition: r.Partition, Origin: r.Origin, Producer: r.Producer}][r.Seq]:
			rw.OriginDuplicate++
		case seen[k][r.Seq]:
			rw.Duplicate++
			note(k, Duplicate, r.Seq, r.Publish, r.Pos)
		case r.Seq < maxSeq[k]:
			rw.OutOfOrder++
			note(k, OutOfOrder, r.Seq, r.Publish, r.Pos)
		}
		seen[k][r.Seq] = true
		if r.Seq > maxSeq[k] {
			maxSeq[k] = r.Seq
		}
	}
	for sk, seqs := range sent {
		for _, cluster := range reach[sk.Origin] {
			k := Stream{cluster, sk.Partition, sk.Origin, sk.Producer}
			rw := row(k)
			rw.Sent = len(seqs)
			var lost []int64
			for seq := range seqs {
				if !seen[k][seq] {
					lost = append(lost, seq)
				}
			}
			sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
			for _, seq := range lost {
				rw.Lost++
				note(k, Lost, seq, seqs[seq], "")
			}
		}
	}
	for _, byKind := range open {
		for _, f := range byKind {
			findings = append(findings, *f)
		}
	}
	sort.Slice(findings, func(i, j int) bool { return less(findings[i], findings[j]) })
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return streamLess(out[i].Stream, out[j].Stream) })
	return out, findings
}

func less(a, b Finding) bool {
	if a.Stream != b.Stream {
		return streamLess(a.Stream, b.Stream)
	}
	return a.Kind < b.Kind
}

func streamLess(a, b Stream) bool {
	return fmt.Sprint(a.Cluster, " ", a.Partition, " ", a.Origin, " ", a.Producer) <
		fmt.Sprint(b.Cluster, " ", b.Partition, " ", b.Origin, " ", b.Producer)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
