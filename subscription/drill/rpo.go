package drill

// RPO and RTO, measured at the drill's switch: the moment the consumer in
// From stopped, which in a real failover is when the application leaves
// the cluster. The RPO is what a failover then would have left behind:
// what of From the target did not hold, found entry by entry by the
// verify core (geo-sidecar verify's), as the two clusters stood at the
// switch. A copy that holds an entry's bytes counts as held whether or
// not its origin is proven (a copy signed under a marker key the config
// no longer has is no loss): it is counted apart (Unproven), as the
// copy faults are, and geo-sidecar verify fails on it. The RTO is how long after the switch the subscription in To
// was ready to resume on, from admin API readings. Neither is an
// estimate from lag figures or cursors.

import (
	"context"
	"time"
)

// Prover proves what of the source the target holds, for the RPO. The
// command wires it to the verify core (replicator/verify), which reads
// both sides with non-durable readers of its own and touches neither the
// drill's subscription nor a replication cursor; this package reads no
// topic for it (subscription/ never imports replicator/). Mark is called
// from one goroutine, Prove after Mark returned, Close last.
type Prover interface {
	// Mark takes the end of every partition on both sides now: the
	// target's, then the source's.
	Mark(ctx context.Context) error
	// Prove reads both sides from since up to the ends Mark took and
	// says, per partition, what of the source the target did not hold,
	// proven, at the mark.
	Prove(ctx context.Context, since time.Time) ([]Proof, error)
	Close()
}

// NewProver connects a Prover for topic (persistent://...) from one
// cluster of the config to another.
type NewProver func(topic, from, to string) (Prover, error)

// Proof is what the verify core proved of one source partition, up to
// the ends at the mark.
type Proof struct {
	Partition string
	// Through is the publish time of the entry through which the target
	// held a copy of every entry it should (verified-through); zero when
	// nothing in the range read is proven.
	Through time.Time
	// Entries and Messages are the source's entries (all after Through)
	// that the target should hold and holds no copy of with their bytes,
	// proven or not (not yet copied, missing, or whose copies differ),
	// and the messages in them; First and Last are the publish times of
	// the first and the last of them.
	Entries, Messages int64
	First, Last       time.Time
	// Unproven are entries whose copy holds their bytes under an origin
	// signature no configured key verifies: held, but not proven (signed
	// under another marker key, or forged).
	Unproven int64
	// Faults are entries found missing, duplicated, divergent or out of
	// order: a broken copy, not one behind.
	Faults int64
}

// RPO is what of From a failover at the switch would have left behind:
// what To did not hold, proven, of what From held then, read from Since.
type RPO struct {
	// Measured: the verify core read both sides; Error says why not.
	Measured bool   `json:"measured"`
	Error    string `json:"error,omitempty"`
	// Messages and Entries To did not hold, over all partitions (an
	// entry is a batch, or one message): the Proofs' Entries.
	Messages int64 `json:"messages"`
	Entries  int64 `json:"entries"`
	// Seconds of traffic they span: per partition, the last one's
	// publish time minus that of the verified-through entry (of the first
	// of them when nothing read is proven); the most of any partition. 0
	// when To held everything.
	Seconds float64 `json:"seconds"`
	// AtLeast: on a partition with entries To did not hold nothing read
	// was proven, so what lies before Since may be missing too.
	AtLeast bool `json:"at_least"`
	// Faults the verify core found in the range (missing, duplicated,
	// divergent, out of order).
	Faults int64 `json:"faults"`
	// Unproven: entries To holds a copy of with their bytes, but under
	// an origin signature no configured marker key verifies; not in
	// Messages (they are held), a finding all the same (see Proof).
	Unproven int64 `json:"present_unproven"`
	// MarkedAfter is how long after the switch the ends were taken:
	// the RPO is as of then (copies made meanwhile count as held).
	MarkedAfter float64 `json:"marked_after_seconds"`
	// Since is where the source was read from (RFC 3339).
	Since      string         `json:"since,omitempty"`
	Partitions []PartitionRPO `json:"partitions,omitempty"`
}

// PartitionRPO is one partition's share of the RPO.
type PartitionRPO struct {
	Partition string  `json:"partition"`
	Messages  int64   `json:"messages"`
	Entries   int64   `json:"entries"`
	Seconds   float64 `json:"seconds"`
}

// rpoOf sums the partitions' proofs of a walk that read from since, to
// ends marked markedAfter the switch.
func rpoOf(proofs []Proof, since time.Time, markedAfter time.Duration) RPO {
	r := RPO{Measured: true, MarkedAfter: markedAfter.Seconds(), Since: since.UTC().Format(time.RFC3339)}
	for _, p := range proofs {
		pr := PartitionRPO{Partition: p.Partition, Messages: p.Messages, Entries: p.Entries}
		if p.Entries > 0 {
			from := p.Through
			if from.IsZero() {
				from, r.AtLeast = p.First, true
			}
			// Publish times are the producers' clocks: never below 0.
			pr.Seconds = max(p.Last.Sub(from).Seconds(), 0)
		}
		r.Messages += pr.Messages
		r.Entries += pr.Entries
		r.Seconds = max(r.Seconds, pr.Seconds)
		r.Faults += p.Faults
		r.Unproven += p.Unproven
		r.Partitions = append(r.Partitions, pr)
	}
	return r
}

// RTO is how long after the switch the subscription in To was ready to
// resume on: in step (Trailing 0), or as close as the newest snapshot
// allows (a resume then delivers Trailing backlog entries again).
type RTO struct {
	// Reached: it got there within the drill's wait; not when the drill
	// gave up (the subscription in To never moved closer, or was not
	// there on every partition).
	Reached bool `json:"reached"`
	// Seconds from the switch to the reading that saw it get there (the
	// admin API is read every 200 ms); when not reached, how long the
	// drill waited.
	Seconds  float64 `json:"seconds"`
	Trailing int64   `json:"trailing"`
}

// rtoOf is the RTO of a wait that began at the switch.
func rtoOf(st inStep) RTO {
	if st.gaveUp {
		return RTO{Seconds: st.waited.Seconds(), Trailing: st.trailing}
	}
	return RTO{Reached: true, Seconds: st.closestAfter.Seconds(), Trailing: st.trailing}
}

// atSwitch runs from the switch, at: it marks both sides' ends for the
// RPO (p may be nil: no RPO) while, at the same time, it waits for the
// subscription in To to be in step, so that the mark's reads neither
// delay the RTO's readings nor count in it. It returns how the wait
// ended, its time measured from at, and how the mark went. say is
// called from both, so it must be safe for concurrent use.
func atSwitch(ctx context.Context, at time.Time, p Prover, sample sampler, limit time.Duration, sub string,
	say func(string, ...any)) (inStep, mark) {
	return whileMarking(ctx, at, p, say, func() inStep { return waitInStep(ctx, sample, sub, say, at, limit) })
}

// whileMarking marks both sides' ends for the RPO (p may be nil: no RPO)
// while wait runs, and returns what wait returned and how the mark went.
func whileMarking(ctx context.Context, at time.Time, p Prover, say func(string, ...any), wait func() inStep) (inStep, mark) {
	marked := make(chan mark, 1)
	if p != nil {
		go func() {
			err := p.Mark(ctx)
			m := mark{after: time.Since(at), err: err}
			if err == nil {
				say("marked where each partition ends on both clusters, %.1fs after the switch: the RPO is as of then",
					m.after.Seconds())
			}
			marked <- m
		}()
	} else {
		marked <- mark{}
	}
	st := wait()
	return st, <-marked
}

// mark is how marking the ends went: how long after the switch they were
// taken, or why not.
type mark struct {
	after time.Duration
	err   error
}
