// Package subscription keeps subscriptions in step across clusters: it
// decides which update to send when a local subscription has moved past a
// snapshot, and how to apply an update received from a remote, forward
// only, never while consumers are attached. The admin calls sit behind the
// small Admin interface; the replicator supplies the Pulsar one.
package subscription

import (
	"context"
	"fmt"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
)

// Covering is what the Planner needs of a snapshot.Machine.
type Covering interface {
	Covering(md marker.Position) (snapshot.Snapshot, bool)
}

// Planner decides the updates for one (partition, remote): for each tracked
// subscription, the newest snapshot its local mark-delete position covers,
// sent once. Not safe for concurrent use: the replicator of the pair owns
// it and calls it from one goroutine.
type Planner struct {
	// sent is, per subscription, the Remote position of the last snapshot
	// Next returned for it.
	sent map[string]marker.Position
}

// NewPlanner returns a Planner with nothing sent yet.
func NewPlanner() *Planner {
	return &Planner{sent: make(map[string]marker.Position)}
}

// Next returns the snapshot whose Remote position sub should be moved to
// on the remote, given its local mark-delete position md, if that snapshot
// is newer than the last one returned for sub.
//
// "Newer" compares Remote positions (marker.Position.Compare): a snapshot
// whose Remote is at or before the last one returned would at best repeat
// an update already sent, so nothing is returned when md does not move, nor
// when it moves backwards (after a reset of the local subscription): the
// remote is never asked to go back. A returned snapshot counts as sent; a
// caller that fails to write the update calls Forget to send it again.
func (p *Planner) Next(sub string, md marker.Position, snaps Covering) (snapshot.Snapshot, bool) {
	s, ok := snaps.Covering(md)
	if !ok {
		return snapshot.Snapshot{}, false
	}
	if last, sent := p.sent[sub]; sent && s.Remote.Compare(last) <= 0 {
		return snapshot.Snapshot{}, false
	}
	if p.sent == nil {
		p.sent = make(map[string]marker.Position)
	}
	p.sent[sub] = s.Remote
	return s, true
}

// Forget drops what was sent for sub (the subscription was deleted).
func (p *Planner) Forget(sub string) { delete(p.sent, sub) }

// State is a subscription's state on one partition.
type State struct {
	Exists     bool
	MarkDelete marker.Position // entry granular; Batch is ignored
	Consumers  int
}

// Admin is what Apply needs of a cluster's admin API, for one partition.
// Implementations must be safe for concurrent use.
type Admin interface {
	State(ctx context.Context, topic, sub string) (State, error)
	// Create creates sub so that the next message it delivers is the
	// entry at `at`.
	Create(ctx context.Context, topic, sub string, at marker.Position) error
	// Reset moves sub so that the next message it delivers is the entry at
	// `at` (Pulsar's reset-cursor, which disconnects consumers: Apply only
	// calls it when none are attached).
	Reset(ctx context.Context, topic, sub string, at marker.Position) error
}

// Outcome of Apply; the values are bounded metric labels.
type Outcome string

const (
	Applied          Outcome = "applied"
	Created          Outcome = "created"
	RefusedConsumers Outcome = "consumers-attached"
	RefusedBackwards Outcome = "not-forward"
	Failed           Outcome = "error"
)

// Apply moves sub on topic to the update position to (a position in this
// cluster's partition: everything at or before it was consumed on the
// remote). The subscription is positioned at to's entry, so that entry is
// delivered again: when to is a message inside a batch, the rest of the
// batch may not have been consumed, and re-reading a few messages is a
// duplicate where skipping them would be a loss. It never moves a
// subscription backwards, and never while consumers are attached.
//
// In detail: a missing subscription is created at to's entry (Created). An
// existing one is moved (Applied) only when no consumer is attached
// (otherwise RefusedConsumers: the reset would disconnect them) and to's
// entry is strictly after its mark-delete entry (otherwise
// RefusedBackwards). Positions are compared by ledger and entry only: the
// admin API reads and sets whole entries. Both refusals return a nil
// error; the caller counts them, and a later update retries. Failed comes
// with an error that wraps the admin's and names topic and sub.
//
// Apply is not atomic: a consumer may attach, and consume, between State
// and Reset. Reset then disconnects it and may move it back to to's entry,
// which redelivers messages: a duplicate, never a loss.
func Apply(ctx context.Context, admin Admin, topic, sub string, to marker.Position) (Outcome, error) {
	at := entryOf(to)
	st, err := admin.State(ctx, topic, sub)
	if err != nil {
		return Failed, fmt.Errorf("reading subscription %q on %s: %w", sub, topic, err)
	}
	if !st.Exists {
		if err := admin.Create(ctx, topic, sub, at); err != nil {
			return Failed, fmt.Errorf("creating subscription %q on %s at %s: %w", sub, topic, at, err)
		}
		return Created, nil
	}
	if st.Consumers > 0 {
		return RefusedConsumers, nil
	}
	// Positioned at `at`, sub's new mark-delete is just before at's entry:
	// a move only when at's entry is strictly after the current one.
	// Equal entries would redeliver the mark-delete entry, a step back.
	if at.Compare(entryOf(st.MarkDelete)) <= 0 {
		return RefusedBackwards, nil
	}
	if err := admin.Reset(ctx, topic, sub, at); err != nil {
		return Failed, fmt.Errorf("resetting subscription %q on %s to %s: %w", sub, topic, at, err)
	}
	return Applied, nil
}

// entryOf returns the entry holding p, as a whole (Batch -1): the
// granularity of the admin API. Positioning a subscription at that entry,
// rather than after it, re-reads the entry: p and the messages before it
// in the batch (consumed on the remote) come again, and those after p
// (maybe not consumed) are not skipped. Re-reading is the safe side: a
// duplicate is tolerated by at-least-once consumers, a skipped message is
// lost.
func entryOf(p marker.Position) marker.Position {
	p.Batch = -1
	return p
}

// Lag is how far the remote copy of a subscription trails the local one:
// the remote subscription's backlog minus the local one's (the messages a
// failover right now would deliver again), floored at 0: a remote that
// looks ahead (the two backlogs are read at different moments) is no lag.
func Lag(localBacklog, remoteBacklog int64) int64 {
	if remoteBacklog <= localBacklog {
		return 0
	}
	return remoteBacklog - localBacklog
}
