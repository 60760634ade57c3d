package replicator

// What the source cluster's admin API says of a topic's replication: its
// cursors' backlog, oldest message and rate, and the tracked
// subscriptions' backlogs on both sides. The status command and the pairs'
// backlog gauges read it.

import (
	"context"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// PairStatus is the replication state of one topic towards one target, read
// from the source cluster's admin API: it is true whether or not a sidecar
// is running, and whether or not the target is reachable.
type PairStatus struct {
	Source, Target string
	Topic          string
	Partitions     int
	// Connected counts partitions whose cursor has a consumer attached.
	Connected int
	// Backlog is the number of messages on the cursors not yet replicated.
	Backlog int64
	// OldestAge is the age of the oldest unreplicated message (0 if none).
	OldestAge time.Duration
	// Rate is messages per second read by the cursors (1-minute window).
	Rate float64
	// Subscriptions are the subscriptions kept in step, with how far their
	// copy on the target trails them.
	Subscriptions []SubStatus
}

// SubStatus is one subscription kept in step: its backlog on the source
// and on the target. Lag (target minus source) is what a failover now
// would deliver again.
type SubStatus struct {
	Name                         string
	SourceBacklog, TargetBacklog int64
	Lag                          int64
}

// inspect reads the status of topic t's cursor sub on admin's cluster.
func inspect(ctx context.Context, admin pulsaradmin.Client, t topicInfo, sub string, now time.Time) (PairStatus, error) {
	st, _, err := inspectSubs(ctx, admin, t, sub, now, false)
	return st, err
}

// inspectSubs is inspect that also returns every subscription of each
// partition (keyed by the partition's full name; the topic's own when it
// is not partitioned), with precise backlogs when precise is set: the
// same request then serves as a subscription sync's stats reading
// (subsync.ReadingOf).
func inspectSubs(ctx context.Context, admin pulsaradmin.Client, t topicInfo, sub string, now time.Time, precise bool) (PairStatus, map[string]map[string]utils.SubscriptionStats, error) {
	st := PairStatus{Topic: t.name, Partitions: t.partitions}
	tn, err := utils.GetTopicName(t.name)
	if err != nil {
		return st, nil, err
	}
	opt := utils.GetStatsOptions{GetEarliestTimeInBacklog: true, ExcludePublishers: true, GetPreciseBacklog: precise}
	var parts []utils.TopicStats
	subs := map[string]map[string]utils.SubscriptionStats{}
	if t.partitions > 0 {
		ps, err := admin.Topics().GetPartitionedStatsWithOptionWithContext(ctx, *tn, true, opt)
		if err != nil {
			return st, nil, err
		}
		for name, p := range ps.Partitions {
			parts = append(parts, p)
			subs[name] = p.Subscriptions
		}
	} else {
		s, err := admin.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
		if err != nil {
			return st, nil, err
		}
		parts = append(parts, s)
		subs[t.name] = s.Subscriptions
	}
	var oldest int64
	for _, p := range parts {
		sub, ok := p.Subscriptions[sub]
		if !ok {
			continue
		}
		if len(sub.Consumers) > 0 {
			st.Connected++
		}
		st.Backlog += sub.MsgBacklog
		st.Rate += sub.MsgRateOut
		if e := sub.EarliestMsgPublishTimeInBacklog; sub.MsgBacklog > 0 && e > 0 && (oldest == 0 || e < oldest) {
			oldest = e
		}
	}
	if oldest > 0 {
		st.OldestAge = now.Sub(time.UnixMilli(oldest))
	}
	return st, subs, nil
}

func subBacklogs(ctx context.Context, admin pulsaradmin.Client, t topicInfo) (map[string]int64, error) {
	tn, err := utils.GetTopicName(t.name)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	opt := utils.GetStatsOptions{ExcludePublishers: true, ExcludeConsumers: true, GetPreciseBacklog: true}
	if t.partitions > 0 {
		st, err := admin.Topics().GetPartitionedStatsWithOptionWithContext(ctx, *tn, false, opt)
		if err != nil {
			return nil, err
		}
		for name, s := range st.Subscriptions {
			out[name] = s.MsgBacklog
		}
		return out, nil
	}
	st, err := admin.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
	if err != nil {
		return nil, err
	}
	for name, s := range st.Subscriptions {
		out[name] = s.MsgBacklog
	}
	return out, nil
}
