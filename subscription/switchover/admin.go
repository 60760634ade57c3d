package switchover

import (
	"context"
	"fmt"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// Admin is Cluster over a cluster's admin API.
func Admin(a pulsaradmin.Client) Cluster { return admin{a: a} }

type admin struct{ a pulsaradmin.Client }

func (p admin) Subscription(ctx context.Context, partition, sub string) (Sub, error) {
	tn, err := utils.GetTopicName(partition)
	if err != nil {
		return Sub{}, err
	}
	internal, err := p.a.Topics().GetInternalStatsWithContext(ctx, *tn)
	if err != nil {
		return Sub{}, fmt.Errorf("internal stats: %w", err)
	}
	c, ok := internal.Cursors[sub]
	if !ok {
		return Sub{}, nil
	}
	md, ok := ParseEntry(c.MarkDeletePosition)
	if !ok {
		return Sub{}, fmt.Errorf("internal stats: cursor %s: mark-delete position %q", sub, c.MarkDeletePosition)
	}
	acked, err := ParseAcked(c.IndividuallyDeletedMessages)
	if err != nil {
		return Sub{}, fmt.Errorf("internal stats: cursor %s: %w", sub, err)
	}
	s := Sub{Exists: true, State: State{MarkDelete: md, Acked: acked}}
	st, err := p.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, utils.GetStatsOptions{ExcludePublishers: true})
	if err != nil {
		return Sub{}, fmt.Errorf("stats: %w", err)
	}
	if ss, ok := st.Subscriptions[sub]; ok {
		s.Type, s.Consumers = ss.SubType, len(ss.Consumers)
	}
	return s, nil
}

func (p admin) Producers(ctx context.Context, partition string) ([]string, error) {
	tn, err := utils.GetTopicName(partition)
	if err != nil {
		return nil, err
	}
	st, err := p.a.Topics().GetStatsWithOptionWithContext(ctx, *tn, utils.GetStatsOptions{})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := make([]string, 0, len(st.Publishers))
	for _, pub := range st.Publishers {
		out = append(out, pub.ProducerName)
	}
	return out, nil
}
