package replicator

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/subscription"
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
	st := PairStatus{Topic: t.name, Partitions: t.partitions}
	tn, err := utils.GetTopicName(t.name)
	if err != nil {
		return st, err
	}
	opt := utils.GetStatsOptions{GetEarliestTimeInBacklog: true, ExcludePublishers: true}
	var parts []utils.TopicStats
	if t.partitions > 0 {
		ps, err := admin.Topics().GetPartitionedStatsWithOptionWithContext(ctx, *tn, true, opt)
		if err != nil {
			return st, err
		}
		for _, p := range ps.Partitions {
			parts = append(parts, p)
		}
	} else {
		s, err := admin.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
		if err != nil {
			return st, err
		}
		parts = append(parts, s)
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
	return st, nil
}

// Status reads the replication state of every topic of every pair, from the
// source clusters' admin APIs. It works whether or not Run is running (the
// status command calls it on a sidecar that never runs).
func (s *Sidecar) Status(ctx context.Context) ([]PairStatus, error) {
	s.mu.Lock()
	pairs := s.pairs
	s.mu.Unlock()
	if pairs == nil {
		var closeConns func()
		var err error
		if pairs, closeConns, err = s.build(); err != nil {
			return nil, err
		}
		defer closeConns()
	}
	var out []PairStatus
	for _, p := range pairs {
		st, err := p.status(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, st...)
	}
	return out, nil
}

func (p *pair) status(ctx context.Context) ([]PairStatus, error) {
	topics, err := listTopics(ctx, p.local.Control, p.rep)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []PairStatus
	for _, t := range topics {
		st, err := inspect(ctx, p.local.Admin, t, p.subscription, now)
		if err != nil {
			return out, err
		}
		st.Source, st.Target = p.local.Name, p.remote.Name
		if len(p.rep.Subscriptions) > 0 || len(p.rep.SubscriptionPatterns) > 0 {
			st.Subscriptions = p.subStatus(ctx, t)
		}
		out = append(out, st)
	}
	return out, nil
}

// refreshStats sets the backlog and oldest-age gauges of topics, the
// entry's topics as discovery just listed them. A topic that was caught
// up at its last refresh (no backlog, every cursor connected) is asked
// again at the next round after one of its cursors read something, and
// otherwise only after quietRefresh: one stats request per topic every
// 10 s was most of the CPU of an idle sidecar with 1,000 topics, and one
// a minute still 16.7 admin requests a second (e2e/bench, scale rows).
// A backlog can only grow on a quiet topic by new messages, which its
// cursors read (the stats are then asked for at the next round), unless
// a cursor lost its consumer meanwhile (then shown within quietRefresh;
// connected_partitions shows it at once).
func (p *pair) refreshStats(ctx context.Context, topics []topicInfo) {
	now := time.Now()
	// A topic gone from the namespace (deleted, or no longer matching)
	// takes its series with it.
	listed := make(map[string]bool, len(topics))
	for _, t := range topics {
		listed[t.name] = true
	}
	for name := range p.gauged {
		if !listed[name] {
			labels := []string{p.local.Name, p.remote.Name, metrics.TopicLabel(name)}
			p.m.Backlog.DeleteLabelValues(labels...)
			p.m.OldestAge.DeleteLabelValues(labels...)
			delete(p.gauged, name)
			delete(p.quiet, name)
		}
	}
	for _, t := range topics {
		if at, ok := p.quiet[t.name]; ok && now.Sub(at) < quietRefresh && !p.received(t) {
			continue
		}
		st, err := inspect(ctx, p.local.Admin, t, p.subscription, now)
		if err != nil {
			p.log.Debug("stats refresh failed", zap.String("topic", t.name), zap.Error(err))
			delete(p.quiet, t.name)
			continue
		}
		labels := []string{p.local.Name, p.remote.Name, metrics.TopicLabel(t.name)}
		p.gauged[t.name] = true
		p.m.Backlog.WithLabelValues(labels...).Set(float64(st.Backlog))
		p.m.OldestAge.WithLabelValues(labels...).Set(st.OldestAge.Seconds())
		if st.Backlog == 0 && st.Connected == max(t.partitions, 1) {
			p.quiet[t.name] = now
		} else {
			delete(p.quiet, t.name)
		}
	}
}

// quietRefresh is how often the stats of a caught-up topic whose cursors
// read nothing are asked for.
const quietRefresh = 10 * time.Minute

// received reports whether a cursor of t read anything since the last
// call, and clears that.
func (p *pair) received(t topicInfo) bool {
	got := false
	for _, pt := range t.partitionNames() {
		if w, ok := p.running[pt]; ok && w.received.Swap(false) {
			got = true
		}
	}
	return got
}

// subStatus compares the tracked subscriptions' backlogs on both sides.
func (p *pair) subStatus(ctx context.Context, t topicInfo) []SubStatus {
	local, err1 := subBacklogs(ctx, p.local.Admin, t)
	remote, err2 := subBacklogs(ctx, p.remote.Admin, t)
	if err1 != nil || err2 != nil {
		return nil
	}
	var out []SubStatus
	for name, lb := range local {
		if !p.rep.Tracks(p.cfg.Sidecar, name) {
			continue
		}
		rb, ok := remote[name]
		if !ok {
			rb = -1
		}
		out = append(out, SubStatus{Name: name, SourceBacklog: lb, TargetBacklog: rb, Lag: subscription.Lag(lb, max(rb, 0))})
	}
	slices.SortFunc(out, func(a, b SubStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
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
