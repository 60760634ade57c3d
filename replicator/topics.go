package replicator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// topicInfo is one replicated topic as the source cluster has it.
type topicInfo struct {
	name       string // persistent://tenant/ns/short
	partitions int    // 0 for a non-partitioned topic
}

// partitionNames are the topics that partition replicators read: each
// partition of a partitioned topic, or the topic itself.
func (t topicInfo) partitionNames() []string {
	if t.partitions == 0 {
		return []string{t.name}
	}
	out := make([]string, t.partitions)
	for i := range out {
		out[i] = fmt.Sprintf("%s-partition-%d", t.name, i)
	}
	return out
}

var partitionSuffix = regexp.MustCompile(`-partition-\d+$`)

// listTopics returns the persistent topics of r's namespace that r selects,
// with their partition counts. System topics (names starting "__") are
// never replicated.
func listTopics(ctx context.Context, cp cluster.ControlPlane, r config.Replication) ([]topicInfo, error) {
	partitioned, plain, err := cp.Topics(ctx, r.Namespace)
	if err != nil {
		return nil, err
	}
	isPartitioned := map[string]bool{}
	var out []topicInfo
	for _, name := range partitioned {
		if !selected(r, name) {
			continue
		}
		isPartitioned[name] = true
		n, _, err := cp.Partitions(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", name, err)
		}
		out = append(out, topicInfo{name: name, partitions: n})
	}
	for _, name := range plain {
		if base := partitionSuffix.ReplaceAllString(name, ""); base != name && isPartitioned[base] {
			continue
		}
		if partitionSuffix.MatchString(name) {
			// A partition whose topic metadata is gone: not ours to copy.
			continue
		}
		if selected(r, name) {
			out = append(out, topicInfo{name: name})
		}
	}
	return out, nil
}

// shortName is a topic's name without its domain, tenant and namespace.
func shortName(topic string) string { return topic[strings.LastIndex(topic, "/")+1:] }

func selected(r config.Replication, name string) bool {
	if !strings.HasPrefix(name, "persistent://") {
		return false
	}
	short := shortName(name)
	return !strings.HasPrefix(short, "__") && r.MatchesTopic(short)
}

// errPartitionMismatch is returned when the remote topic exists with a
// partition count the sidecar cannot reconcile (more partitions than the
// source, or partitioned on one side only).
var errPartitionMismatch = errors.New("partition count mismatch")

// ensureRemote creates t on the remote with the same partitions when it is
// missing, and grows the remote's partitions when the source grew. The
// remote's tenant and namespace must exist: creating them is an operator's
// decision.
func ensureRemote(ctx context.Context, cp cluster.ControlPlane, t topicInfo) error {
	have, found, err := cp.Partitions(ctx, t.name)
	if err != nil {
		return fmt.Errorf("read remote metadata: %w", err)
	}
	switch {
	case have == t.partitions && (have > 0 || found):
		return nil
	case have == 0 && t.partitions == 0:
		// A non-partitioned topic is created by the producer on first use.
		return nil
	case have == 0:
		// Absent, or non-partitioned and empty of metadata: create.
		err := cp.CreateTopic(ctx, t.name, t.partitions)
		if errors.Is(err, cluster.ErrTopicExists) {
			return fmt.Errorf("%w: source has %d partitions, remote has a non-partitioned topic", errPartitionMismatch, t.partitions)
		}
		if err != nil {
			return fmt.Errorf("create remote topic with %d partitions: %w", t.partitions, err)
		}
		return nil
	case t.partitions > have:
		if err := cp.GrowTopic(ctx, t.name, t.partitions); err != nil {
			return fmt.Errorf("grow remote topic from %d to %d partitions: %w", have, t.partitions, err)
		}
		return nil
	default:
		return fmt.Errorf("%w: source has %d partitions, remote has %d", errPartitionMismatch, t.partitions, have)
	}
}

// remoteChecks remembers the topics ensureRemote found right on the remote,
// with their partition count, so that discovery does not ask the remote's
// admin API about every topic every time: with many topics that was a
// large share of an idle sidecar's CPU (docs/benchmark.md, History). A
// topic is checked again when its partition count changes, after a
// failure, and once it was trusted for recheckRemote (within
// recheckPerPass a pass).
// Used by one goroutine (the pair's); ensureAll's checks in flight touch
// only the remote, not the map.
type remoteChecks map[string]remoteCheck

type remoteCheck struct {
	partitions int
	at         time.Time
}

// recheckRemote is how long a topic found right on the remote is trusted;
// recheckPerPass bounds how many are checked again in one discovery pass,
// so that the topics of one start-up do not all expire at once: with
// 10,000 topics, a burst of 10,000 requests every 10 minutes. Past that
// bound (with the default 30 s discovery, beyond 1,000 topics) a topic is
// checked again every len/recheckPerPass passes.
const (
	recheckRemote  = 10 * time.Minute
	recheckPerPass = 50
)

func (c *remoteChecks) ensure(ctx context.Context, cp cluster.ControlPlane, t topicInfo) error {
	return c.ensureAll(ctx, cp, []topicInfo{t})[t.name]
}

// listingWorth is how many expired non-partitioned topics of a namespace
// make one listing of the remote namespace cheaper than checking each
// (a listing is up to four requests).
const listingWorth = 4

// retrustListed trusts again, from one listing of the remote namespace,
// the expired non-partitioned topics of each namespace holding at least
// listingWorth of them, and returns the expired topics left to check one
// by one. For a non-partitioned topic the re-check can only find a
// partitioned topic of the same name made on the remote since
// (ensureRemote: a missing one is created by the producer on first use),
// and the listing names every partitioned topic there. Checked one by
// one, many topics' re-checks were most of an idle sidecar's admin
// requests (docs/benchmark.md, History). A listing that fails leaves its
// topics to the one-by-one checks.
func (c *remoteChecks) retrustListed(ctx context.Context, cp cluster.ControlPlane, expired []topicInfo) []topicInfo {
	byNS := map[string][]topicInfo{}
	for _, t := range expired {
		if t.partitions == 0 {
			ns := namespaceOf(t.name)
			byNS[ns] = append(byNS[ns], t)
		}
	}
	retrusted := map[string]bool{}
	now := time.Now()
	for ns, ts := range byNS {
		if ns == "" || len(ts) < listingWorth {
			continue
		}
		partitioned, _, err := cp.Topics(ctx, ns)
		if err != nil {
			continue
		}
		listed := make(map[string]bool, len(partitioned))
		for _, name := range partitioned {
			listed[name] = true
		}
		for _, t := range ts {
			if !listed[t.name] {
				(*c)[t.name] = remoteCheck{partitions: 0, at: now}
				retrusted[t.name] = true
			}
		}
	}
	if len(retrusted) == 0 {
		return expired
	}
	return slices.DeleteFunc(expired, func(t topicInfo) bool { return retrusted[t.name] })
}

// namespaceOf is "tenant/ns" of a topic name "persistent://tenant/ns/x"
// ("" when the name has no such form).
func namespaceOf(topic string) string {
	_, rest, ok := strings.Cut(topic, "://")
	if !ok {
		return ""
	}
	tenant, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	ns, _, ok := strings.Cut(rest, "/")
	if !ok || tenant == "" || ns == "" {
		return ""
	}
	return tenant + "/" + ns
}

// remoteCheckers is how many topics ensureAll checks on the remote at
// once. Asked one after another, the checks of a first discovery of many
// topics held back the first partition's start by seconds
// (docs/benchmark.md, History).
const remoteCheckers = 8

// ensureAll runs ensureRemote for each of topics not checked recently, up
// to remoteCheckers at once, and returns the errors by topic name (no
// entry: the topic is right on the remote).
func (c *remoteChecks) ensureAll(ctx context.Context, cp cluster.ControlPlane, topics []topicInfo) map[string]error {
	var todo, expired []topicInfo
	for _, t := range topics {
		switch v, ok := (*c)[t.name]; {
		case !ok || v.partitions != t.partitions:
			todo = append(todo, t)
		case time.Since(v.at) >= recheckRemote:
			expired = append(expired, t)
		}
	}
	expired = c.retrustListed(ctx, cp, expired)
	// The oldest checks first, recheckPerPass of them.
	slices.SortFunc(expired, func(a, b topicInfo) int { return (*c)[a.name].at.Compare((*c)[b.name].at) })
	todo = append(todo, expired[:min(len(expired), recheckPerPass)]...)
	errs := make([]error, len(todo))
	turns := make(chan struct{}, remoteCheckers)
	var wg sync.WaitGroup
	for i, t := range todo {
		turns <- struct{}{}
		wg.Go(func() {
			defer func() { <-turns }()
			errs[i] = ensureRemote(ctx, cp, t)
		})
	}
	wg.Wait()
	if *c == nil {
		*c = remoteChecks{}
	}
	failed := map[string]error{}
	now := time.Now()
	for i, t := range todo {
		if errs[i] != nil {
			delete(*c, t.name)
			failed[t.name] = errs[i]
			continue
		}
		(*c)[t.name] = remoteCheck{partitions: t.partitions, at: now}
	}
	return failed
}
