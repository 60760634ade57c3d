package cluster

// The control plane: every question discovery, the subscription sync
// and start-up ask a cluster's admin API, behind one small interface, so
// that they are unit-tested with fakes (replicator's control_test.go,
// subsync's tests). The data plane (cursors, producers, the read-back:
// replicator/entrypath) is not here.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// ControlPlane is one cluster's admin API as geo-sidecar uses it.
// Implementations must be safe for concurrent use.
type ControlPlane interface {
	// Topics lists the persistent topics of namespace: the partitioned
	// ones, and the others (partitions of partitioned topics included,
	// as Pulsar lists them).
	Topics(ctx context.Context, namespace string) (partitioned, plain []string, err error)
	// Partitions returns a topic's partition count (0 for a
	// non-partitioned topic); found is false when the cluster has no
	// metadata for the name at all.
	Partitions(ctx context.Context, topic string) (n int, found bool, err error)
	// CreateTopic creates a partitioned topic; ErrTopicExists when the
	// name is taken (by a non-partitioned topic, say).
	CreateTopic(ctx context.Context, topic string, partitions int) error
	// GrowTopic raises a partitioned topic's partition count.
	GrowTopic(ctx context.Context, topic string, partitions int) error
	// Layout returns where a partition's entries are and its cursors'
	// positions (one internal-stats call).
	Layout(ctx context.Context, topic string) (*Layout, error)
	// MarkDeletes returns the mark-delete position (entry granular, Batch
	// -1) of each subscription of topic, leaving out any reported without
	// a readable one.
	MarkDeletes(ctx context.Context, topic string) (map[string]marker.Position, error)
	// Backlogs returns the precise backlog, in entries, of each
	// subscription of topic.
	Backlogs(ctx context.Context, topic string) (map[string]int64, error)
}

// ErrTopicExists is createTopic's answer for a name already taken.
var ErrTopicExists = errors.New("topic exists")

// pulsarControl is ControlPlane over pulsaradmin.
type pulsarControl struct {
	a     pulsaradmin.Client
	lists topicLister
}

func (p pulsarControl) Topics(ctx context.Context, namespace string) ([]string, []string, error) {
	ns, err := utils.GetNamespaceName(namespace)
	if err != nil {
		return nil, nil, err
	}
	return p.lists.list(ctx, ns.String())
}

func (p pulsarControl) Partitions(ctx context.Context, topic string) (int, bool, error) {
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

func (p pulsarControl) CreateTopic(ctx context.Context, topic string, partitions int) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	err = p.a.Topics().CreateWithContext(ctx, *tn, partitions)
	if isConflict(err) {
		return fmt.Errorf("%w: %w", ErrTopicExists, err)
	}
	return err
}

func (p pulsarControl) GrowTopic(ctx context.Context, topic string, partitions int) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return p.a.Topics().UpdateWithContext(ctx, *tn, partitions)
}

func (p pulsarControl) Layout(ctx context.Context, topic string) (*Layout, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	st, err := OwnStack(func() (utils.PersistentTopicInternalStats, error) {
		return p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	})
	if err != nil {
		return nil, err
	}
	return layoutOf(st), nil
}

// layoutOf reads a partition's layout from its internal stats. The
// ledger being written reports its entries only in lastConfirmedEntry.
func layoutOf(st utils.PersistentTopicInternalStats) *Layout {
	l := &Layout{MarkDeletes: map[string]marker.Position{}, Writing: -1}
	lac, hasLAC := ParseEntry(st.LastConfirmedEntry)
	for _, li := range st.Ledgers {
		l.Writing = li.LedgerID
		n := li.Entries
		if hasLAC && li.LedgerID == lac.Ledger {
			n = max(n, lac.Entry+1)
		}
		if n > 0 {
			l.Ledgers = append(l.Ledgers, LedgerSpan{ID: li.LedgerID, Entries: n})
		}
	}
	for name, c := range st.Cursors {
		l.Cursors = append(l.Cursors, name)
		if md, ok := ParseEntry(c.MarkDeletePosition); ok {
			l.MarkDeletes[name] = md
		}
	}
	return l
}

func (p pulsarControl) MarkDeletes(ctx context.Context, topic string) (map[string]marker.Position, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	internal, err := OwnStack(func() (utils.PersistentTopicInternalStats, error) {
		return p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	})
	if err != nil {
		return nil, fmt.Errorf("internal stats: %w", err)
	}
	out := make(map[string]marker.Position, len(internal.Cursors))
	for name, c := range internal.Cursors {
		if md, ok := ParseEntry(c.MarkDeletePosition); ok {
			out[name] = md
		}
	}
	return out, nil
}

func (p pulsarControl) Backlogs(ctx context.Context, topic string) (map[string]int64, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	opt := utils.GetStatsOptions{ExcludePublishers: true, GetPreciseBacklog: true}
	st, err := OwnStack(func() (utils.TopicStats, error) {
		return p.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, opt)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(st.Subscriptions))
	for name, ss := range st.Subscriptions {
		out[name] = ss.MsgBacklog
	}
	return out, nil
}

// ParseEntry reads Pulsar's "ledger:entry" mark-delete position.
func ParseEntry(s string) (marker.Position, bool) {
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		return marker.Position{}, false
	}
	return marker.ParsePosition(l + ":" + e + ":-1")
}

func isNotFound(err error) bool {
	var re rest.Error
	return errors.As(err, &re) && re.Code == 404
}

func isConflict(err error) bool {
	var re rest.Error
	return errors.As(err, &re) && re.Code == 409
}
