package subsync

// The Pulsar side of the shared stats reading (moved.go).

import (
	"context"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// NewStatsSource is StatsSource over a cluster's admin API: one
// partitioned-stats request (perPartition, precise backlog, no
// publishers) per partitioned topic, one stats request per other topic.
// Broker 4.0.7 answers partitioned-stats with every partition under
// "partitions", keyed by the partition's full name, each subscription
// with msgBacklog and lastMarkDeleteAdvancedTimestamp.
func NewStatsSource(a pulsaradmin.Client) StatsSource { return adminStats{a} }

type adminStats struct{ a pulsaradmin.Client }

func (s adminStats) SubStats(ctx context.Context, topic string, partitioned bool) (map[string]map[string]SubStat, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	opt := utils.GetStatsOptions{ExcludePublishers: true, GetPreciseBacklog: true}
	if !partitioned {
		st, err := s.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
		if err != nil {
			return nil, err
		}
		return map[string]map[string]SubStat{topic: subStats(st.Subscriptions)}, nil
	}
	st, err := s.a.Topics().GetPartitionedStatsWithOptionWithContext(ctx, *tn, true, opt)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]SubStat, len(st.Partitions))
	for name, ps := range st.Partitions {
		out[name] = subStats(ps.Subscriptions)
	}
	return out, nil
}

func subStats(subs map[string]utils.SubscriptionStats) map[string]SubStat {
	out := make(map[string]SubStat, len(subs))
	for name, ss := range subs {
		out[name] = SubStat{Backlog: ss.MsgBacklog, MarkDeleteAdvanced: ss.LastMarkDeleteAdvancedTimestamp, Consumers: len(ss.Consumers),
			Ranges: ss.NonContiguousDeletedMessagesRanges}
	}
	return out
}
