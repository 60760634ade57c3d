package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// lookBack is how far before a finding the report looks for faults.
const lookBack = 30 * time.Second

func sortTimeline(t []applied) {
	sort.SliceStable(t, func(i, j int) bool { return t[i].At < t[j].At })
}

// before returns the faults of the timeline that were under way in the
// lookBack before at (started before at, ended after at-lookBack).
func before(timeline []applied, at time.Time) []applied {
	var out []applied
	for _, a := range timeline {
		if !a.Start.After(at) && a.End.After(at.Add(-lookBack)) {
			out = append(out, a)
		}
	}
	return out
}

// lookAhead is how far after a duplicate's first copy the report looks
// for the faults that made the second: the source redelivers when its
// broker, or the sidecar's cursor, is back (a restart on the test bed:
// up to a minute and more).
const lookAhead = 2 * time.Minute

// following returns the faults of the timeline that started after at
// and within lookAhead of it.
func following(timeline []applied, at time.Time) []applied {
	var out []applied
	for _, a := range timeline {
		if a.Start.After(at) && !a.Start.After(at.Add(lookAhead)) {
			out = append(out, a)
		}
	}
	return out
}

// WriteReport writes the run's report: what was run, the fault timeline
// as applied, the counts per partition and origin producer, and every
// finding with the faults of the 30 s before it.
func WriteReport(w io.Writer, o Options, res *Result) {
	fmt.Fprintf(w, "geo-sidecar soak report\n\n")
	fmt.Fprintf(w, "seed      %d  (SOAK_SEED=%d SOAK_DURATION=%s make soak reproduces the schedule)\n", o.Seed, o.Seed, o.Duration)
	fmt.Fprintf(w, "duration  %s of load and faults, from %s\n", o.Duration, res.Start.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "pair      %s active-active, two sidecar instances per source cluster, namespace %s, deduplication on (but in dedup-off faults)\n",
		strings.Join(pair, "<->"), res.NS)
	if res.Topo.WAN != "" {
		fmt.Fprintf(w, "one-way   east->north (north's instances copy north->east: the markers' way back, no load on north); %s reaches %s through the WAN proxy\n",
			res.Topo.WANInstance(), res.Topo.WAN)
	}
	fmt.Fprintf(w, "load      %d msg/s per cluster over %d topics; acknowledged/failed sends:", o.Rate, len(runTopics(o.Reconfig)))
	for _, c := range pair {
		fmt.Fprintf(w, " %s %d/%d", c, res.Produced[c][0], res.Produced[c][1])
	}
	fmt.Fprintf(w, "; of them large (%d to %d MiB):", largeMin>>20, largeMax>>20)
	for _, c := range pair {
		fmt.Fprintf(w, " %s %d (%.1f MiB)", c, res.Large[c][0], float64(res.Large[c][1])/(1<<20))
	}
	fmt.Fprintf(w, "\ndrain     ")
	if res.Drained {
		fmt.Fprintf(w, "every backlog 0 after %s\n", res.DrainTook.Round(time.Second))
	} else {
		fmt.Fprintf(w, "NOT drained within %s (checked anyway)\n", res.DrainTook.Round(time.Second))
	}
	clusters := res.Topo.Clusters
	if len(clusters) == 0 {
		clusters = pair
	}
	fmt.Fprintf(w, "checker   Pulsar's Java client (SoakReader.java), every partition of the namespace on %s read to its end\n", strings.Join(clusters, ", "))
	fmt.Fprintf(w, "not wired %s\n", strings.Join(NotWired, "; "))

	fmt.Fprintf(w, "\nfault timeline (%d faults; offsets from the start of the load)\n", len(res.Timeline))
	for _, a := range res.Timeline {
		fmt.Fprintf(w, "  %s  applied %s..%s", a.Event, offset(res.Start, a.Start), offset(res.Start, a.End))
		if a.Err != nil {
			fmt.Fprintf(w, "  ERROR %v", a.Err)
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\nper partition and origin producer\n")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "cluster\tpartition\torigin producer\tsent\tread\tlost\tduplicate\tout of order\tproducer's own duplicate\t\n")
	for _, r := range res.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.Cluster, shortPartition(r.Partition), r.Producer,
			r.Sent, r.Read, r.Lost, r.Duplicate, r.OutOfOrder, r.OriginDuplicate)
	}
	tw.Flush()
	fmt.Fprintf(w, "(producer's own duplicate: a message its producer stored twice on its origin cluster, a resend with deduplication off there, and each copy of it; the application's, not the sidecar's, and no finding)\n")
	var untagged int64
	for _, p := range res.Partitions {
		untagged += p.Untagged
	}
	fmt.Fprintf(w, "(%d partitions read; %d untagged messages: geo-sidecar's markers)\n", len(res.Partitions), untagged)
	writeVerify(w, res.Verify)
	writeRSS(w, res.RSS)
	writeSubs(w, res.Subs)

	fmt.Fprintf(w, "\nfindings: %d\n", len(res.Findings))
	for _, f := range res.Findings {
		fmt.Fprintf(w, "  %s: %d %s on %s, %s, producer %s; first at %s", f.Kind, f.Count, f.Kind,
			f.Cluster, shortPartition(f.Partition), f.Producer, offset(res.Start, f.At))
		if f.Pos != "" {
			fmt.Fprintf(w, " (position %s)", f.Pos)
		}
		fmt.Fprintf(w, ", seqs %v\n", f.Seqs)
		if f.Kind == Lost && f.Cluster == f.Origin {
			fmt.Fprintf(w, "      (at the origin itself: acknowledged to the producer, not kept by the broker; no copy's loss)\n")
		}
		fs := before(res.Timeline, f.At)
		if len(fs) == 0 {
			fmt.Fprintf(w, "      no fault in the %s before\n", lookBack)
		}
		for _, a := range fs {
			fmt.Fprintf(w, "      after %s\n", a.Event)
		}
		if f.Kind == Duplicate {
			// A duplicate's publish time is its origin's: the second
			// copy was written later, when the source redelivered.
			after := following(res.Timeline, f.At)
			for _, a := range after {
				fmt.Fprintf(w, "      then  %s\n", a.Event)
			}
			fs = append(fs, after...)
		}
		if gap := knownGap(f, fs); gap != "" {
			fmt.Fprintf(w, "      known gap: %s\n", gap)
		}
		if cs := countedFor(f, res.Counted); f.Kind == Duplicate && len(cs) > 0 {
			fmt.Fprintf(w, "      known gap: the sidecar sent %d entries of this partition under a counted sequence id (its read-back did not find their copies: up to 100,100 entries back from the target's end, or no copy older than its start; docs/guarantees.md, Duplicates), first %s at %s by %s\n",
				len(cs), cs[0].ID, offset(res.Start, cs[0].At), cs[0].Instance)
		}
	}
}

// knownGap names the broker behaviour docs/guarantees.md (Duplicates)
// gives for a finding, when one of the faults before it is that
// behaviour's trigger; "" when none is. The finding still counts: a
// known gap is a cause, not an excuse.
//
// A duplicate on a cluster whose broker was restarted (kill -9): the
// broker stored entries whose receipts died with it, and the reloaded
// topic's deduplication record for the sidecar's producer name, rebuilt
// from the last snapshot and from the stored entries' metadata (the
// origin's producer names), is below them, so the producer's resends
// are stored again (Pulsar's MessageDeduplication.replayCursor and
// recoverProducerSequenceIdFromMetadata).
//
// A duplicate on a cluster whose deduplication was off: the copies
// stored meanwhile are in no record, so a resend of them (confirmed by
// the target, not acknowledged at the origin: a source broker's crash
// loses the acknowledgements) is stored again unless the read-back
// finds them; seen in the first run with verify (seed
// 275884680600203905, 3m: west's broker killed with east's deduplication
// off, 7 copies resent after 1,750 of east's own entries), and with the
// deduplication off only at the resend (seed 5128223041646074303: west's
// broker down for a minute, east's deduplication off from 40 s after
// the first copies; faults after a duplicate's first copy are looked at
// too, see following).
func knownGap(f Finding, faults []applied) string {
	if f.Kind != Duplicate {
		return ""
	}
	for _, a := range faults {
		if a.Kind == KindRestart && a.Target == f.Cluster {
			return "target broker restart with copies in flight: receipts lost with the broker, and its rebuilt deduplication record for the sidecar's producer name is below the stored entries (docs/guarantees.md, Duplicates)"
		}
	}
	for _, a := range faults {
		if a.Kind == KindDedupOff && a.Target == f.Cluster {
			return "target deduplication off when the first copies were stored or sent again: no record covers them (a target without deduplication reports none), and a resend (entries confirmed, not acknowledged at the origin) is dropped only if the read-back, max_pending_messages + 100 entries from the target's end, reaches them (docs/guarantees.md, Duplicates)"
		}
	}
	return ""
}

func offset(start, t time.Time) string {
	d := t.Sub(start)
	if d < 0 {
		return "-" + (-d).Truncate(100*time.Millisecond).String()
	}
	return "+" + d.Truncate(100*time.Millisecond).String()
}

// shortPartition drops "persistent://tenant/ns/" from a partition's name.
func shortPartition(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// writeVerify writes verify --complete's answers per pair and topic
// beside the checker's counts, and why a row fails the run.
func writeVerify(w io.Writer, runs []VerifyRun) {
	fmt.Fprintf(w, "\ngeo-sidecar verify --complete after the drain (entries), beside the checker (messages)\n")
	if len(runs) == 0 {
		fmt.Fprintf(w, "  not run\n")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pair\ttopic\texit\texpected\tpresent\tnot yet copied\tmissing\tduplicated\tdivergent\tout of order\tunproven\tchecker lost\tchecker duplicate\t\n")
	for _, v := range runs {
		fmt.Fprintf(tw, "%s->%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", v.From, v.To, v.Topic, v.Exit,
			v.Expected, v.Present, v.NotYetCopied, v.Missing, v.Duplicated, v.Divergent, v.OutOfOrder, v.Unproven,
			v.CheckerLost, v.CheckerDuplicate)
	}
	tw.Flush()
	bad := 0
	for _, v := range runs {
		if p := v.Problem(); p != "" {
			bad++
			fmt.Fprintf(w, "  FAIL %s->%s %s: %s", v.From, v.To, v.Topic, p)
			if v.Err != "" {
				fmt.Fprintf(w, " (%s)", oneLine(v.Err))
			}
			fmt.Fprintln(w)
		}
	}
	if bad == 0 {
		fmt.Fprintf(w, "  every pair exit 0, and verify and the checker agree on what was lost\n")
	}
}

// writeRSS writes each instance's memory judgement.
func writeRSS(w io.Writer, js []RSSJudgement) {
	fmt.Fprintf(w, "\nsidecar RSS (VmRSS every %s; each instance's longest life; warm-up %s, or the first fifth of a shorter life; growth over %.0f%% after it flagged, failing the run after a full warm-up)\n",
		rssEvery, rssWarmup, rssGrowth*100)
	if len(js) == 0 {
		fmt.Fprintf(w, "  no samples\n")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "instance\tlife\tlasted\twarm-up\tMiB at warm-up\tpeak after\tat end\tgrowth\t\t\n")
	for _, j := range js {
		if j.Note != "" {
			fmt.Fprintf(tw, "%s\t%d of %d\t%s\t\t\t\t\t\t%s\t\n", j.Instance, j.Life, j.Lives, j.Span.Round(time.Second), j.Note)
			continue
		}
		flag := "ok"
		switch {
		case j.Fails:
			flag = "GREW (fails)"
		case j.Flagged:
			flag = "grew (warm-up short of " + rssWarmup.String() + ": flagged only)"
		}
		fmt.Fprintf(tw, "%s\t%d of %d\t%s\t%s\t%.1f\t%.1f\t%.1f\t%+.1f%%\t%s\t\n", j.Instance, j.Life, j.Lives,
			j.Span.Round(time.Second), j.Warmup.Round(time.Second), mib(j.WarmKB), mib(j.PeakKB), mib(j.EndKB), j.Growth*100, flag)
	}
	tw.Flush()
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// writeSubs writes the replicated subscriptions' backlogs per pair,
// subscription and partition, source beside target, against the goal.
func writeSubs(w io.Writer, r SubsResult) {
	fmt.Fprintf(w, "\nreplicated subscriptions (applications stopped with the load; %d messages received, %d acknowledged)\n", r.Received, r.Acked)
	fmt.Fprintf(w, "goal: target backlog <= source backlog + one snapshot interval (%s) of the partition's traffic; ", snapshotInterval)
	switch {
	case len(r.Rows) == 0 && r.Err != "":
		fmt.Fprintf(w, "not read: %s\n", oneLine(r.Err))
		return
	case len(r.Rows) == 0:
		fmt.Fprintf(w, "not read\n")
		return
	case r.Settled:
		fmt.Fprintf(w, "met, read %s after the drain\n", r.After.Round(time.Second))
	default:
		fmt.Fprintf(w, "MISSED, last read %s after the drain (flagged; does not fail the run)\n", r.After.Round(time.Second))
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "subscription\tpair\tpartition\tsource backlog\ttarget backlog\tslack\tconsumed on target\t\t\n")
	for _, b := range r.Rows {
		flag := "ok"
		if b.Over() {
			flag = "OVER"
		}
		consumed := "no"
		if b.TargetConsumed {
			consumed = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s->%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", b.Sub, b.From, b.To, shortPartition(b.Partition), b.Source, b.Target, b.Slack, consumed, flag)
	}
	tw.Flush()
	fmt.Fprintf(w, "(a subscription consumed on the target is moved there by its own applications too; one that is not, only by the sidecar)\n")
	for _, b := range r.Rows {
		if b.From == "east" && b.To == "north" {
			fmt.Fprintf(w, "(east->north is one way: east's backlog also counts west's copies, which north never gets, so north's is lower by as many; a row over the goal is behind all the same)\n")
			break
		}
	}
	if len(r.Updates) > 0 {
		fmt.Fprintf(w, "the sidecars' update counters (summed over the instances, each since its last start):\n")
		writeCounters(w, r.Updates)
	}
}
