package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// end is one of the two clusters a command that reads or moves a copy
// (switchover, failback) works on: its clients and its wire client.
type end struct {
	*cluster.Clients
	Wire *wire.Client
}

// dialEnds connects to the copy's two clusters (fc and tc, from copyEnds)
// and lists full's partitions on fc (from names it in errors); close
// closes both. The commands report its errors as usage errors (exit 2):
// nothing has been read or moved yet.
func dialEnds(ctx context.Context, fc, tc config.Cluster, from, full string) (f, t end, partitions []string, close func(), err error) {
	if f, t, close, err = dialPair(fc, tc); err != nil {
		return end{}, end{}, nil, nil, err
	}
	if partitions, err = partitionsOf(ctx, f.Wire, from, full); err != nil {
		close()
		return end{}, end{}, nil, nil, err
	}
	return f, t, partitions, close, nil
}

// dialPair connects to two clusters; close closes both.
func dialPair(fc, tc config.Cluster) (f, t end, close func(), err error) {
	var ends []*cluster.Clients
	close = func() {
		for _, c := range ends {
			c.Close()
		}
	}
	dial := func(c config.Cluster) (end, error) {
		cl, err := cluster.Dial(c, zap.NewNop(), cluster.SecurityEvents{})
		if err != nil {
			return end{}, err
		}
		ends = append(ends, cl)
		w, err := cl.WireClient()
		if err != nil {
			return end{}, err
		}
		return end{Clients: cl, Wire: w}, nil
	}
	if f, err = dial(fc); err == nil {
		t, err = dial(tc)
	}
	if err != nil {
		close()
		return end{}, end{}, nil, err
	}
	return f, t, close, nil
}

// partitionsOf lists full's partitions (full itself when it is not
// partitioned) as the cluster from, reached by w, has them.
func partitionsOf(ctx context.Context, w *wire.Client, from, full string) ([]string, error) {
	n, err := w.PartitionedMetadata(ctx, full)
	if err != nil {
		return nil, fmt.Errorf("%s: partitions of %s: %w", from, full, err)
	}
	if n == 0 {
		return []string{full}, nil
	}
	partitions := make([]string, n)
	for i := range partitions {
		partitions[i] = fmt.Sprintf("%s-partition-%d", full, i)
	}
	return partitions, nil
}
