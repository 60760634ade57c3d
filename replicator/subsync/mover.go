package subsync

// The protocol mover of the apply side (docs/replicated-subscriptions.md,
// Which route moves a subscription): subscription.Mover over a wire
// client of its own (MoveClient). The admin route's calls are
// subscription.Admin (syncio.go); what the route is decided on,
// target.go; applying an update, route.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// MoveClient is what a protocol move needs of a cluster: wire.Client's
// MoveSubscription, on a client of its own (apart from the data path's,
// so that cutting a stuck move's connection never touches replication).
// Implementations must be safe for concurrent use.
type MoveClient interface {
	MoveSubscription(ctx context.Context, m wire.Move) (wire.MoveResult, error)
}

// wireMover is subscription.Mover over a MoveClient for one partition: it
// names the move's consumer, and gives Shared and Key_Shared moves the
// partition's ledgers (read once, and again when a move needs ledgers not
// listed).
type wireMover struct {
	f      MoveClient
	name   string
	layout func(ctx context.Context) (*cluster.Layout, error) // nil: never read
	log    *zap.Logger

	mu      sync.Mutex
	ledgers []wire.Ledger // nil: not read
}

// wireTypes are the types a move attaches with.
var wireTypes = map[subscription.Type]wire.SubType{
	subscription.Failover: wire.Failover, subscription.Shared: wire.Shared, subscription.KeyShared: wire.KeyShared,
}

func (w *wireMover) Move(ctx context.Context, topic, sub string, d subscription.Decision) (subscription.Moved, error) {
	typ, ok := wireTypes[d.Type]
	if !ok {
		return subscription.Moved{}, fmt.Errorf("no protocol move for type %v", d.Type)
	}
	m := wire.Move{Topic: topic, Subscription: sub, Type: typ, KeySharedAllowOutOfOrder: d.AllowOutOfOrder,
		ConsumerName: w.name, To: wireTo(d.At)}
	if d.Ack == subscription.Individual {
		w.mu.Lock()
		m.Ledgers = w.ledgers
		w.mu.Unlock()
	}
	res, err := w.f.MoveSubscription(ctx, m)
	if d.Ack == subscription.Individual && w.layout != nil && w.stale(err, res) {
		// A ledger between the mark-delete position and the target is not
		// listed, or one listed grew since: read them and move again.
		if l, lerr := w.layout(ctx); lerr == nil {
			m.Ledgers = ledgersOf(l)
			w.mu.Lock()
			w.ledgers = m.Ledgers
			w.mu.Unlock()
			res, err = w.f.MoveSubscription(ctx, m)
		}
	}
	if errors.Is(err, wire.ErrSubscriptionBusy) {
		return subscription.Moved{}, fmt.Errorf("%w: %w", subscription.ErrBusy, err)
	}
	if err != nil {
		return subscription.Moved{}, err
	}
	if m.Type == wire.Failover && res.ActiveTold && res.Active {
		// Chosen by the broker although at the lowest priority: no
		// application consumer is attached at a lower level (design §5).
		w.log.Debug("the move's consumer was told it is the active one", zap.String("subscription", sub))
	}
	mv := subscription.Moved{After: wirePosition(res.MarkDelete), HasBefore: res.HasBefore}
	if res.HasBefore {
		mv.Before = wirePosition(res.Before)
	}
	return mv, nil
}

// stale reports whether a Shared or Key_Shared move's ledger list was not
// enough: a ledger it needed is not listed, or it stopped short of the
// target in another ledger than the one it started in (a ledger listed
// while it was written holds more entries now).
func (w *wireMover) stale(err error, res wire.MoveResult) bool {
	if errors.Is(err, wire.ErrLedgersUnknown) {
		return true
	}
	return err == nil && !res.Reached() && res.HasBefore && res.Before.Ledger != res.Target.Ledger &&
		res.MarkDelete == res.Before
}

// wireTo is the wire.Move.To whose target is p (an entry; entry -1 is
// the one before a ledger's first).
func wireTo(p marker.Position) wire.MessageID {
	if p.Entry < 0 {
		id := wire.EntryID(uint64(p.Ledger), 0)
		id.BatchIndex = 0 // inside entry 0: the target is entry -1
		return id
	}
	return wire.EntryID(uint64(p.Ledger), uint64(p.Entry))
}

// wirePosition is a wire entry id as a position (entry -1: all ones).
func wirePosition(id wire.MessageID) marker.Position {
	return marker.Position{Ledger: int64(id.Ledger), Entry: int64(id.Entry), Batch: -1}
}

func ledgersOf(l *cluster.Layout) []wire.Ledger {
	out := make([]wire.Ledger, 0, len(l.Ledgers))
	for _, s := range l.Ledgers {
		out = append(out, wire.Ledger{ID: uint64(s.ID), Entries: s.Entries})
	}
	return out
}
