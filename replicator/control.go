package replicator

// The control plane: every question discovery, the subscription sync
// and start-up ask a cluster's admin API, behind one small interface, so
// that they are unit-tested with fakes (control_test.go, sync_test.go).
// The data plane (cursors, producers, the read-back in entryreadback.go)
// is not here.

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// controlPlane is one cluster's admin API as geo-sidecar uses it.
// Implementations must be safe for concurrent use.
type controlPlane interface {
	// topics lists the persistent topics of namespace: the partitioned
	// ones, and the others (partitions of partitioned topics included,
	// as Pulsar lists them).
	topics(ctx context.Context, namespace string) (partitioned, plain []string, err error)
	// partitions returns a topic's partition count (0 for a
	// non-partitioned topic); found is false when the cluster has no
	// metadata for the name at all.
	partitions(ctx context.Context, topic string) (n int, found bool, err error)
	// createTopic creates a partitioned topic; errTopicExists when the
	// name is taken (by a non-partitioned topic, say).
	createTopic(ctx context.Context, topic string, partitions int) error
	// growTopic raises a partitioned topic's partition count.
	growTopic(ctx context.Context, topic string, partitions int) error
	// layout returns where a partition's entries are and its cursors'
	// positions (one internal-stats call).
	layout(ctx context.Context, topic string) (*partitionLayout, error)
	syncAdmin
}

// errTopicExists is createTopic's answer for a name already taken.
var errTopicExists = errors.New("topic exists")

// pulsarControl is controlPlane over pulsaradmin.
type pulsarControl struct{ a pulsaradmin.Client }

func (p pulsarControl) topics(ctx context.Context, namespace string) ([]string, []string, error) {
	ns, err := utils.GetNamespaceName(namespace)
	if err != nil {
		return nil, nil, err
	}
	return p.a.Topics().ListWithContext(ctx, *ns)
}

func (p pulsarControl) partitions(ctx context.Context, topic string) (int, bool, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return 0, false, err
	}
	md, err := p.a.Topics().GetMetadataWithContext(ctx, *tn)
	switch {
	case isNotFound(err):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return md.Partitions, true, nil
}

func (p pulsarControl) createTopic(ctx context.Context, topic string, partitions int) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	err = p.a.Topics().CreateWithContext(ctx, *tn, partitions)
	if isConflict(err) {
		return fmt.Errorf("%w: %w", errTopicExists, err)
	}
	return err
}

func (p pulsarControl) growTopic(ctx context.Context, topic string, partitions int) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return p.a.Topics().UpdateWithContext(ctx, *tn, partitions)
}

func (p pulsarControl) layout(ctx context.Context, topic string) (*partitionLayout, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	st, err := p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	if err != nil {
		return nil, err
	}
	return layoutOf(st), nil
}

// layoutOf reads a partition's layout from its internal stats. The
// ledger being written reports its entries only in lastConfirmedEntry.
func layoutOf(st utils.PersistentTopicInternalStats) *partitionLayout {
	l := &partitionLayout{markDeletes: map[string]marker.Position{}, writing: -1}
	lac, hasLAC := parseEntry(st.LastConfirmedEntry)
	for _, li := range st.Ledgers {
		l.writing = li.LedgerID
		n := li.Entries
		if hasLAC && li.LedgerID == lac.Ledger {
			n = max(n, lac.Entry+1)
		}
		if n > 0 {
			l.ledgers = append(l.ledgers, ledgerSpan{id: li.LedgerID, entries: n})
		}
	}
	for name, c := range st.Cursors {
		l.cursors = append(l.cursors, name)
		if md, ok := parseEntry(c.MarkDeletePosition); ok {
			l.markDeletes[name] = md
		}
	}
	return l
}

func (p pulsarControl) markDeletes(ctx context.Context, topic string) (map[string]marker.Position, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	internal, err := p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	if err != nil {
		return nil, fmt.Errorf("internal stats: %w", err)
	}
	out := make(map[string]marker.Position, len(internal.Cursors))
	for name, c := range internal.Cursors {
		if md, ok := parseEntry(c.MarkDeletePosition); ok {
			out[name] = md
		}
	}
	return out, nil
}

func (p pulsarControl) backlogs(ctx context.Context, topic string) (map[string]int64, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	opt := utils.GetStatsOptions{ExcludePublishers: true, GetPreciseBacklog: true}
	st, err := p.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(st.Subscriptions))
	for name, ss := range st.Subscriptions {
		out[name] = ss.MsgBacklog
	}
	return out, nil
}
