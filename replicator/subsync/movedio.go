package subsync

// The Pulsar side of the shared stats reading (moved.go).

import (
	"context"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// NewStatsSource is StatsSource over a cluster's admin API: one
// partitioned-stats request (perPartition, precise backlog, no
// publishers) per partitioned topic, one stats request per other topic.
// Broker 4.0.7 answers partitioned-stats with every partition under
// "partitions", keyed by the partition's full name, each subscription
// with msgBacklog and lastMarkDeleteAdvancedTimestamp. Consumers whose
// names start with followPrefix are a protocol move's (FollowName), not
// an application's: they are not counted.
func NewStatsSource(a pulsaradmin.Client, followPrefix string) StatsSource {
	return adminStats{a: a, followPrefix: followPrefix}
}

type adminStats struct {
	a            pulsaradmin.Client
	followPrefix string
}

func (s adminStats) SubStats(ctx context.Context, topic string, partitioned bool) (map[string]map[string]SubStat, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	opt := utils.GetStatsOptions{ExcludePublishers: true, GetPreciseBacklog: true}
	if !partitioned {
		st, err := cluster.OwnStack(func() (utils.TopicStats, error) {
			return s.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
		})
		if err != nil {
			return nil, err
		}
		return map[string]map[string]SubStat{topic: s.subStats(st.Subscriptions)}, nil
	}
	st, err := cluster.OwnStack(func() (utils.PartitionedTopicStats, error) {
		return s.a.Topics().GetPartitionedStatsWithOptionWithContext(ctx, *tn, true, opt)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]SubStat, len(st.Partitions))
	for name, ps := range st.Partitions {
		out[name] = s.subStats(ps.Subscriptions)
	}
	return out, nil
}

// ReadingOf is a Reading of the stats of a topic's partitions sent at at
// (subscriptions by partition, as a stats or partitioned-stats request
// with precise backlogs returns them), read as NewStatsSource reads its
// own: for readings others make (Pollers.Offer).
func ReadingOf(at time.Time, parts map[string]map[string]utils.SubscriptionStats, followPrefix string) *Reading {
	s := adminStats{followPrefix: followPrefix}
	r := &Reading{At: at, Partitions: make(map[string]map[string]SubStat, len(parts))}
	for name, subs := range parts {
		r.Partitions[name] = s.subStats(subs)
	}
	return r
}

// subStats reads the subscriptions of one partition. A move's consumer,
// attached for a few milliseconds, is not one of the applications': a
// reading that caught it made a standby copy look consumed here, and its
// partition ask for snapshots and read positions.
func (s adminStats) subStats(subs map[string]utils.SubscriptionStats) map[string]SubStat {
	out := make(map[string]SubStat, len(subs))
	for name, ss := range subs {
		st := SubStat{Backlog: ss.MsgBacklog, MarkDeleteAdvanced: ss.LastMarkDeleteAdvancedTimestamp,
			Ranges: ss.NonContiguousDeletedMessagesRanges}
		for _, c := range ss.Consumers {
			if s.followPrefix == "" || !strings.HasPrefix(c.ConsumerName, s.followPrefix) {
				st.Consumers++
			}
		}
		out[name] = st
	}
	return out
}
