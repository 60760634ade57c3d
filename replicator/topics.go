package replicator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
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
// admin API about every topic every time: with 1,000 topics that was a
// large share of an idle sidecar's CPU (e2e/bench, scale run). A topic is
// checked again when its partition count changes, after a failure, and
// at the latest every recheckRemote. Used by one goroutine (the pair's).
type remoteChecks map[string]remoteCheck

type remoteCheck struct {
	partitions int
	at         time.Time
}

// recheckRemote is how long a topic found right on the remote is trusted.
const recheckRemote = 10 * time.Minute

func (c *remoteChecks) ensure(ctx context.Context, cp cluster.ControlPlane, t topicInfo) error {
	if v, ok := (*c)[t.name]; ok && v.partitions == t.partitions && time.Since(v.at) < recheckRemote {
		return nil
	}
	if err := ensureRemote(ctx, cp, t); err != nil {
		delete(*c, t.name)
		return err
	}
	if *c == nil {
		*c = remoteChecks{}
	}
	(*c)[t.name] = remoteCheck{partitions: t.partitions, at: time.Now()}
	return nil
}
