package main

// The sidecars' subscription-update counters, read before they stop: what
// became of the updates behind the replicated subscriptions' backlogs
// (docs/replicated-subscriptions.md, Which route moves a subscription).

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// updateMetrics are the counters read.
var updateMetrics = []string{
	"geo_sidecar_subscription_updates_sent_total",
	"geo_sidecar_subscription_updates_received_total",
}

// sumCounters reads a Prometheus text exposition and adds up, per series
// (name and labels as written), the samples of the names given.
func sumCounters(r io.Reader, names []string, into map[string]float64) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, n := range names {
			if line != n && !strings.HasPrefix(line, n+"{") && !strings.HasPrefix(line, n+" ") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				continue
			}
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				continue
			}
			into[line[:i]] += v
		}
	}
	return sc.Err()
}

// readUpdateCounters sums the update counters of every running instance
// (each since its last start).
func readUpdateCounters(insts []*instance) (map[string]float64, error) {
	out := map[string]float64{}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, in := range insts {
		if !in.Running() {
			continue
		}
		resp, err := c.Get("http://" + in.Listen + "/metrics")
		if err != nil {
			return out, fmt.Errorf("metrics of %s: %w", in.Name, err)
		}
		err = sumCounters(resp.Body, updateMetrics, out)
		resp.Body.Close()
		if err != nil {
			return out, fmt.Errorf("metrics of %s: %w", in.Name, err)
		}
	}
	return out, nil
}

// writeCounters writes the series in order, one a line.
func writeCounters(w io.Writer, m map[string]float64) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s %g\n", strings.TrimPrefix(k, "geo_sidecar_"), m[k])
	}
}
