package main

// Replicated subscriptions under the soak: applications on both clusters
// consume the load topics with subscriptions the sidecars keep in step,
// acknowledging each message a while after receiving it; after the load
// and the copy stop, each subscription's backlog on a pair's target is
// set against its backlog on the source (issue 38's goal: at most the
// source's plus one snapshot interval of traffic).

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// appSub is one replicated subscription and how its applications
// consume it.
type appSub struct {
	Name string
	Type pulsar.SubscriptionType
	// Consumers per cluster where applications run: several make
	// Failover fail over and Shared share.
	Consumers  int
	Cumulative bool     // acknowledge cumulatively (else each message)
	Clusters   []string // where applications consume
}

// appSubs are the soak's replicated subscriptions. Exclusive is consumed
// on east only: the sidecar moves an Exclusive subscription only where
// nobody is attached (a reset-cursor), and refuses one consumed in both
// regions (docs/replicated-subscriptions.md, Which route moves a
// subscription).
var appSubs = []appSub{
	{Name: "soak-failover", Type: pulsar.Failover, Consumers: 2, Clusters: pair},
	{Name: "soak-shared", Type: pulsar.Shared, Consumers: 2, Clusters: pair},
	{Name: "soak-exclusive", Type: pulsar.Exclusive, Consumers: 1, Cumulative: true, Clusters: []string{"east"}},
}

func isAppSub(name string) bool {
	for _, s := range appSubs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// appsSummary names the applications for the log.
func appsSummary() string {
	var parts []string
	for _, s := range appSubs {
		ack := "individual acks"
		if s.Cumulative {
			ack = "cumulative acks"
		}
		parts = append(parts, fmt.Sprintf("%s (%s, %d consumer(s) on each of %s, %s after up to %s)",
			s.Name, typeName(s.Type), s.Consumers, strings.Join(s.Clusters, ", "), ack, ackDelayMax))
	}
	return strings.Join(parts, "; ")
}

func typeName(t pulsar.SubscriptionType) string {
	switch t {
	case pulsar.Exclusive:
		return "Exclusive"
	case pulsar.Shared:
		return "Shared"
	case pulsar.Failover:
		return "Failover"
	case pulsar.KeyShared:
		return "Key_Shared"
	}
	return fmt.Sprint(int(t))
}

// snapshotInterval is the sidecars' snapshot.interval (the config's
// default, which the soak's config keeps).
const snapshotInterval = time.Second

// The applications' acknowledgement delay: individual acknowledgements
// after a random delay up to ackDelayMax (so that they come out of order
// and leave holes), cumulative ones after ackDelayMax.
const ackDelayMax = 500 * time.Millisecond

// createAppSubs creates every replicated subscription on every load
// topic on both clusters at the earliest position, before the load, so
// that each sees every message (and Exclusive's, consumed on east only,
// exists on west for the sidecar to move).
func createAppSubs(admins map[string]pulsaradmin.Client, clusters []string, ns string) error {
	for _, c := range clusters {
		for _, tk := range appTopics() {
			tn, err := utils.GetTopicName("persistent://" + ns + "/" + tk.Short)
			if err != nil {
				return err
			}
			for _, s := range appSubs {
				if err := admins[c].Subscriptions().Create(*tn, s.Name, utils.Earliest); err != nil {
					return fmt.Errorf("subscription %s on %s %s: %w", s.Name, c, tk.Short, err)
				}
			}
		}
	}
	return nil
}

// Apps are the consuming applications of one run.
type Apps struct {
	received, acked atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
	cons   []pulsar.Consumer
}

// StartApps subscribes every application's consumers and starts them;
// they consume until ctx is done or Stop.
func StartApps(ctx context.Context, clients map[string]pulsar.Client, ns string, seed int64) (*Apps, error) {
	ctx, cancel := context.WithCancel(ctx)
	a := &Apps{cancel: cancel}
	var topics []string
	for _, tk := range appTopics() {
		topics = append(topics, "persistent://"+ns+"/"+tk.Short)
	}
	n := 0
	for _, s := range appSubs {
		for _, c := range s.Clusters {
			for i := range s.Consumers {
				con, err := clients[c].Subscribe(pulsar.ConsumerOptions{
					Topics: topics, SubscriptionName: s.Name, Type: s.Type,
					Name:                        fmt.Sprintf("%s-%s-%d", c, s.Name, i),
					SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
				})
				if err != nil {
					a.Stop()
					return nil, fmt.Errorf("application %s on %s: %w", s.Name, c, err)
				}
				a.cons = append(a.cons, con)
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
				n++
				a.wg.Add(1)
				go func() { defer a.wg.Done(); a.consume(ctx, con, s.Cumulative, rng) }()
			}
		}
	}
	return a, nil
}

// consume receives until ctx is done and acknowledges each message
// (markers too: an application without the entry filter sees them)
// after its delay; acknowledgements still pending at the end are not
// made.
func (a *Apps) consume(ctx context.Context, c pulsar.Consumer, cumulative bool, rng *rand.Rand) {
	var timers sync.WaitGroup
	defer timers.Wait()
	for {
		m, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		a.received.Add(1)
		delay := ackDelayMax
		if !cumulative {
			delay = time.Duration(rng.Int64N(int64(ackDelayMax)))
		}
		timers.Add(1)
		go func() {
			defer timers.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			var err error
			if cumulative {
				err = c.AckCumulative(m)
			} else {
				err = c.Ack(m)
			}
			if err == nil {
				a.acked.Add(1)
			}
		}()
	}
}

// Stop stops the applications, waits for them and closes the consumers.
func (a *Apps) Stop() {
	a.cancel()
	a.wg.Wait()
	for _, c := range a.cons {
		c.Close()
	}
	a.cons = nil
}

// SubBacklog is one replicated subscription on one partition of one
// pair: its backlog on the source and on the target, and the goal's
// slack (one snapshot interval of the partition's traffic).
type SubBacklog struct {
	Sub, Partition, From, To string
	Source, Target, Slack    int64
	// TargetConsumed: applications consume the subscription on the
	// target too, moving it there themselves; where they do not
	// (Exclusive on west), only the sidecar moves it.
	TargetConsumed bool
}

// Over says whether the target's backlog misses the goal.
func (b SubBacklog) Over() bool { return b.Target > b.Source+b.Slack }

// SubsResult is the replicated subscriptions' reading after the drain.
type SubsResult struct {
	Received, Acked int64
	Rows            []SubBacklog
	Settled         bool          // every row within the goal
	After           time.Duration // from the drain's end to the reading
	Err             string        // the last reading's error, if any
	// Updates are the sidecars' update counters, summed over the
	// instances (each since its last start), read after the backlogs.
	Updates map[string]float64
}

// slackOf is one snapshot interval of a partition's traffic: both
// clusters' load, spread over the topics and the topic's partitions.
func slackOf(rate int, tk topicKind) int64 {
	per := 2 * float64(rate) / float64(len(loadTopics)) / float64(max(1, tk.Partitions))
	return int64(math.Ceil(per * snapshotInterval.Seconds()))
}

// readSubBacklogs reads every replicated subscription's backlog on every
// partition on both clusters and pairs them up, both directions.
func readSubBacklogs(admins map[string]pulsaradmin.Client, topo topology, ns string, rate int) ([]SubBacklog, error) {
	backlogs := map[string]map[string]map[string]int64{} // cluster -> partition -> sub
	for _, c := range topo.Clusters {
		backlogs[c] = map[string]map[string]int64{}
		for _, tk := range appTopics() {
			for _, p := range topicPartitions(ns, tk) {
				tn, err := utils.GetTopicName(p)
				if err != nil {
					return nil, err
				}
				st, err := admins[c].Topics().GetStats(*tn)
				if err != nil {
					return nil, fmt.Errorf("stats of %s on %s: %w", p, c, err)
				}
				backlogs[c][p] = map[string]int64{}
				for name, s := range st.Subscriptions {
					if isAppSub(name) {
						backlogs[c][p][name] = s.MsgBacklog
					}
				}
			}
		}
	}
	var rows []SubBacklog
	for _, p := range topo.Verified {
		from, to := p[0], p[1]
		for _, tk := range appTopics() {
			for _, p := range topicPartitions(ns, tk) {
				for _, s := range appSubs {
					src, ok1 := backlogs[from][p][s.Name]
					dst, ok2 := backlogs[to][p][s.Name]
					if !ok1 || !ok2 {
						return nil, fmt.Errorf("subscription %s missing on %s", s.Name, p)
					}
					rows = append(rows, SubBacklog{Sub: s.Name, Partition: p, From: from, To: to, Source: src, Target: dst,
						Slack: slackOf(rate, tk), TargetConsumed: contains(s.Clusters, to)})
				}
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Sub != rows[j].Sub {
			return rows[i].Sub < rows[j].Sub
		}
		return rows[i].From < rows[j].From
	})
	return rows, nil
}

// topicPartitions names a load topic's partitions (the topic itself when
// not partitioned).
func topicPartitions(ns string, tk topicKind) []string {
	base := "persistent://" + ns + "/" + tk.Short
	if tk.Partitions == 0 {
		return []string{base}
	}
	out := make([]string, tk.Partitions)
	for i := range out {
		out[i] = fmt.Sprintf("%s-partition-%d", base, i)
	}
	return out
}

// subsSettle bounds the wait (by default: Options.SubsSettle) for the
// subscriptions to follow after the
// drain (a follow is seconds; several snapshot rounds).
const subsSettle = 60 * time.Second

// waitSubs reads the backlogs after a first snapshot interval and again
// every 2 s until every row is within the goal or settle passed; it
// keeps the last reading.
func waitSubs(ctx context.Context, admins map[string]pulsaradmin.Client, topo topology, ns string, rate int, settle time.Duration) SubsResult {
	start := time.Now()
	var r SubsResult
	for wait := 2 * snapshotInterval; ; wait = 2 * time.Second {
		select {
		case <-ctx.Done():
			return r
		case <-time.After(wait):
		}
		rows, err := readSubBacklogs(admins, topo, ns, rate)
		r.After = time.Since(start)
		if err != nil {
			r.Err = err.Error()
		} else {
			r.Rows, r.Err = rows, ""
			r.Settled = true
			for _, b := range rows {
				if b.Over() {
					r.Settled = false
				}
			}
		}
		if r.Settled || time.Since(start) > settle {
			return r
		}
	}
}

// subsSummary is one line per subscription and direction for the log.
func subsSummary(rows []SubBacklog) string {
	type key struct{ sub, from, to string }
	sums := map[key][2]int64{}
	var keys []key
	for _, b := range rows {
		k := key{b.Sub, b.From, b.To}
		if _, ok := sums[k]; !ok {
			keys = append(keys, k)
		}
		s := sums[k]
		sums[k] = [2]int64{s[0] + b.Source, s[1] + b.Target}
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s->%s %d/%d", k.sub, k.from, k.to, sums[k][0], sums[k][1]))
	}
	return strings.Join(parts, ", ")
}
