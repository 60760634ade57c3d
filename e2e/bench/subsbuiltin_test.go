package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReplConnected counts the connected replicators of the row's topics
// only: not another namespace's, not the namespace's system topic, not
// the disconnected gauge.
func TestReplConnected(t *testing.T) {
	page := `# TYPE pulsar_replication_connected_count gauge
pulsar_replication_connected_count{cluster="east",namespace="geobench-subs/b4",topic="persistent://geobench-subs/b4/__change_events",remote_cluster="west"} 1
pulsar_replication_connected_count{cluster="east",namespace="geobench-subs/b4",topic="persistent://geobench-subs/b4/t-0000",remote_cluster="west"} 1
pulsar_replication_connected_count{cluster="east",namespace="geobench-subs/b4",topic="persistent://geobench-subs/b4/t-0001",remote_cluster="west"} 0
pulsar_replication_connected_count{cluster="east",namespace="geobench-subs/b4",topic="persistent://geobench-subs/b4/t-0002",remote_cluster="west"} 1
pulsar_replication_connected_count{cluster="east",namespace="geobench-subs/b40",topic="persistent://geobench-subs/b40/t-0002",remote_cluster="west"} 1
pulsar_replication_disconnected_count{cluster="east",namespace="geobench-subs/b4",topic="persistent://geobench-subs/b4/t-0001",remote_cluster="west"} 1
pulsar_replication_rate_out{cluster="east",namespace="geobench-subs/b4",topic="persistent://geobench-subs/b4/t-0000",remote_cluster="west"} 0.0
`
	n, err := replConnected(strings.NewReader(page), "persistent://geobench-subs/b4/t-")
	if err != nil || n != 2 {
		t.Errorf("replConnected = %d, %v; want 2, nil", n, err)
	}
	if _, err := replConnected(strings.NewReader(`pulsar_replication_connected_count{topic="persistent://a/b/t-1"} x`), "persistent://a/b/t-"); err == nil {
		t.Error("replConnected took a value that is no number")
	}
}

func secondsOf(xs ...float64) []time.Duration {
	out := make([]time.Duration, len(xs))
	for i, x := range xs {
		out[i] = time.Duration(x * float64(time.Second))
	}
	return out
}

// TestP99Ratio: the sidecar's p99 over the built-in's, a lower bound when
// the sidecar's falls among its failed probes, nothing when the
// built-in's does.
func TestP99Ratio(t *testing.T) {
	for _, c := range []struct {
		name   string
		sc, bi probeSet
		want   string
		ok     bool
	}{
		{"both measured", probeSet{Lat: secondsOf(0.4, 1.2)}, probeSet{Lat: secondsOf(0.2, 0.8)}, "1.50×", true},
		{"sidecar faster", probeSet{Lat: secondsOf(0.4)}, probeSet{Lat: secondsOf(0.8)}, "0.50×", true},
		{"sidecar's p99 failed", probeSet{Lat: secondsOf(0.4), Failed: 1}, probeSet{Lat: secondsOf(0.2, 2)}, "> 30.0×", false},
		{"built-in's p99 failed", probeSet{Lat: secondsOf(0.4, 0.5)}, probeSet{Lat: secondsOf(0.2), Failed: 1}, "—", false},
		{"no built-in probes", probeSet{Lat: secondsOf(0.4)}, probeSet{}, "—", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := p99Ratio(c.sc, c.bi); got != c.want {
				t.Errorf("p99Ratio = %q, want %q", got, c.want)
			}
			if _, ok := p99Over(c.sc, c.bi); ok != c.ok {
				t.Errorf("p99Over ok = %v, want %v", ok, c.ok)
			}
		})
	}
}

// TestSubsBuiltinReport renders the subs row with its built-in arm: the
// existing rows stay, the comparison table has start-up and each probed
// phase with both arms' p50 / p99, the ratio and the goal, and the
// targets judge the ratio.
func TestSubsBuiltinReport(t *testing.T) {
	s := &subsResult{
		Topics: 1000, Ready: time.Second, Connected: 60 * time.Second, Replicated: 60 * time.Second,
		Phases: []subsPhase{
			{Name: "idle", Window: time.Minute, BrokerWindow: time.Minute},
			{Name: "spread traffic, 1,000 msg/s", Window: time.Minute, BrokerWindow: time.Minute, Sent: 60_000, SentBuiltin: 59_990},
			{Name: "idle after traffic", Window: time.Minute, BrokerWindow: time.Minute},
		},
		Probes: []probeSet{
			{Phase: "idle", Lat: secondsOf(0.4, 0.6)},
			{Phase: "spread traffic", Lat: secondsOf(2, 5)},
		},
		Builtin: &subsBuiltinResult{
			Namespace: "geobench-subs/b1000", Connected: 4 * time.Second,
			Probes: []probeSet{
				{Phase: "idle", Lat: secondsOf(0.2, 0.4)},
				{Phase: "spread traffic", Lat: secondsOf(1, 2)},
			},
		},
	}
	md := s.markdown()
	for _, want := range []string{
		"| phase | window | admin requests/s, east | admin requests/s, west |",
		"| idle | 1m0s | 0.0 | 0.0 | 0.0 / 0.0 | 0.00 | 0 | 0 | 0.4 s / 0.6 s |",
		"| spread traffic, 1,000 msg/s (60,000 sent; 59,990 more on the built-in arm's topics) |",
		"| idle after traffic | 1m0s |",
		"the built-in arm: 1,000 topics more in `geobench-subs/b1000`",
		"| start-up: every partition connected, both directions (sidecar: from process start; built-in: from replication switched on) | 60.0 s | 4.0 s | 15.00× | |",
		"| follow latency p50 / p99, idle (2 probes per arm) | 0.4 s / 0.6 s | 0.2 s / 0.4 s | 1.50× (p99) | p99 ≤ 3 s at 1,000 topics and ≤ 2× built-in |",
		"| follow latency p50 / p99, spread traffic (2 probes per arm) | 2.0 s / 5.0 s | 1.0 s / 2.0 s | 2.50× (p99) | p99 ≤ 3 s at 1,000 topics and ≤ 2× built-in |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q\n%s", want, md)
		}
	}
	var got []string
	s.targets(func(ok bool, format string, args ...any) {
		mark := "met"
		if !ok {
			mark = "short"
		}
		got = append(got, fmt.Sprintf(format, args...)+": "+mark)
	})
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"follow p99 under spread traffic, 1,000 partitions: 5.0 s (goal ≤ 3 s): short",
		"follow p99 idle, 1,000 partitions, ≤ 2× built-in: 1.50× (sidecar 0.6 s, built-in 0.4 s): met",
		"follow p99 spread traffic, 1,000 partitions, ≤ 2× built-in: 2.50× (sidecar 5.0 s, built-in 2.0 s): short",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("targets lack %q\n%s", want, all)
		}
	}
	if m := s.method(quickSizes.Subs); !strings.Contains(m, "The built-in arm (-subs-builtin, issue 36)") || !strings.HasSuffix(m, "\n") {
		t.Errorf("method lacks the built-in arm:\n%s", m)
	}

	// Without the arm: no comparison table, no ratio targets.
	s.Builtin, s.Phases[1].SentBuiltin = nil, 0
	if md := s.markdown(); strings.Contains(md, "built-in arm") {
		t.Errorf("markdown without the arm mentions it:\n%s", md)
	}
	if m := s.method(quickSizes.Subs); strings.Contains(m, "built-in arm") {
		t.Errorf("method without the arm mentions it:\n%s", m)
	}
}
