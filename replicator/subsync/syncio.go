package subsync

// The Pulsar side of subscription sync (sync.go): the admin calls (the
// admin route of applying an update, and the states its route is decided
// on) and the start-up re-read (the marker producer: markerwire.go), behind the small interfaces
// Sync declares, so that Sync is unit-tested with fakes.

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// NewSubAdmin is subscription.Admin and States over a cluster's admin
// API. Consumers whose names start with followPrefix are a protocol
// move's (see FollowName), not an application's: they are not counted.
//
// A Key_Shared subscription's mode is read when a also reads a topic's
// subscriptions with it (subStatsReader: the *cluster.AdminClient a
// cluster.Clients holds); with any other client (pulsaradmin's types have no
// field for it) it is never known, and no move attaches to a Key_Shared
// subscription (subscription.Decide).
func NewSubAdmin(a pulsaradmin.Client, followPrefix string) interface {
	subscription.Admin
	States
} {
	p := pulsarSubAdmin{a: a, followPrefix: followPrefix}
	p.subs, _ = a.(subStatsReader)
	return p
}

// subStatsReader reads a topic's subscriptions from its stats, with their
// Key_Shared mode, in the one request pulsaradmin's stats read makes
// (cluster.AdminClient).
type subStatsReader interface {
	SubscriptionStats(ctx context.Context, topic string) (map[string]cluster.SubscriptionStats, error)
}

// pulsarSubAdmin is subscription.Admin and States over Pulsar's admin
// API.
type pulsarSubAdmin struct {
	a            pulsaradmin.Client
	subs         subStatsReader // nil: stats through a, modes unknown
	followPrefix string
}

// FollowName names the consumer of this process's protocol moves:
// followPrefix and an instance id (in the broker's stats, and left out of
// the consumers counted there).
func FollowName(followPrefix, instance string) string { return followPrefix + instance }

// stats reads topic's subscriptions: one stats request, publishers left
// out, decoded on a goroutine of its own (cluster.OwnStack).
func (p pulsarSubAdmin) stats(ctx context.Context, topic string) (map[string]cluster.SubscriptionStats, error) {
	if p.subs != nil {
		return cluster.OwnStack(func() (map[string]cluster.SubscriptionStats, error) {
			return p.subs.SubscriptionStats(ctx, topic)
		})
	}
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	st, err := cluster.OwnStack(func() (utils.TopicStats, error) {
		return p.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, utils.GetStatsOptions{ExcludePublishers: true})
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]cluster.SubscriptionStats, len(st.Subscriptions))
	for name, ss := range st.Subscriptions {
		cs := cluster.SubscriptionStats{Type: ss.SubType, AllowOutOfOrderDelivery: ss.AllowOutOfOrderDelivery}
		for _, c := range ss.Consumers {
			cs.Consumers = append(cs.Consumers, cluster.ConsumerStats{ConsumerName: c.ConsumerName})
		}
		out[name] = cs
	}
	return out, nil
}

// stateOf is a subscription's state in its stats, without the
// mark-delete position (stats do not carry it).
func (p pulsarSubAdmin) stateOf(ss cluster.SubscriptionStats) subscription.State {
	st := subscription.State{Exists: true, Type: subscription.ParseType(ss.Type), AllowOutOfOrder: ss.AllowOutOfOrderDelivery}
	if st.Type == subscription.KeyShared {
		st.Mode = keySharedModeOf(ss.KeySharedMode)
	}
	for _, c := range ss.Consumers {
		if p.followPrefix == "" || !strings.HasPrefix(c.ConsumerName, p.followPrefix) {
			st.Consumers++
		}
	}
	return st
}

// keySharedModeOf reads a Key_Shared subscription's keySharedMode from
// its stats: exactly "AUTO_SPLIT" or "STICKY", as broker 4.0.7 writes
// them; anything else (missing, another spelling, a mode added later) is
// ModeUnknown, never AUTO_SPLIT: a move attaches to Key_Shared only with
// AUTO_SPLIT known (subscription.Decide), and attaching to a STICKY one
// can lock its application out.
func keySharedModeOf(s string) subscription.KeySharedMode {
	switch s {
	case "AUTO_SPLIT":
		return subscription.AutoSplit
	case "STICKY":
		return subscription.Sticky
	}
	return subscription.ModeUnknown
}

func (p pulsarSubAdmin) States(ctx context.Context, topic string) (map[string]subscription.State, error) {
	subs, err := p.stats(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[string]subscription.State, len(subs))
	for name, ss := range subs {
		out[name] = p.stateOf(ss)
	}
	return out, nil
}

func (p pulsarSubAdmin) State(ctx context.Context, topic, sub string) (subscription.State, error) {
	subs, err := p.stats(ctx, topic)
	if err != nil {
		return subscription.State{}, err
	}
	ss, ok := subs[sub]
	if !ok {
		return subscription.State{}, nil
	}
	internal, err := p.internalStats(ctx, topic)
	if err != nil {
		return subscription.State{}, err
	}
	md, ok := cluster.ParseEntry(internal.Cursors[sub].MarkDeletePosition)
	if !ok {
		return subscription.State{}, fmt.Errorf("no mark-delete position for %s", sub)
	}
	st := p.stateOf(ss)
	st.MarkDelete = md
	return st, nil
}

func (p pulsarSubAdmin) Create(ctx context.Context, topic, sub string, at marker.Position) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return p.a.Subscriptions().CreateWithContext(ctx, *tn, sub, utils.MessageID{LedgerID: at.Ledger, EntryID: at.Entry, PartitionIndex: -1})
}

// LastEntry is the partition's newest entry (internal stats'
// lastConfirmedEntry).
func (p pulsarSubAdmin) LastEntry(ctx context.Context, topic string) (marker.Position, error) {
	internal, err := p.internalStats(ctx, topic)
	if err != nil {
		return marker.Position{}, err
	}
	lce, ok := cluster.ParseEntry(internal.LastConfirmedEntry)
	if !ok {
		return marker.Position{}, fmt.Errorf("no last confirmed entry in %q", internal.LastConfirmedEntry)
	}
	return lce, nil
}

func (p pulsarSubAdmin) Reset(ctx context.Context, topic, sub string, at marker.Position) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return p.a.Subscriptions().ResetCursorToMessageIDWithContext(ctx, *tn, sub, utils.MessageID{LedgerID: at.Ledger, EntryID: at.Entry, PartitionIndex: -1})
}

func (p pulsarSubAdmin) internalStats(ctx context.Context, topic string) (utils.PersistentTopicInternalStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return utils.PersistentTopicInternalStats{}, err
	}
	return cluster.OwnStack(func() (utils.PersistentTopicInternalStats, error) {
		return p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	})
}
