package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// smokeSizes make every workload run once, end to end, in about a minute:
// enough to show that `make bench` works against the real clusters, far
// too small to measure anything.
var smokeSizes = sizes{
	Rounds: 1, Settle: 200 * time.Millisecond, WarmMessages: 100, LatWarm: 200 * time.Millisecond,
	TPMessages: 2000,
	LatRate:    100, LatDuration: time.Second,
	DrainMessages: 2000, DrainShapes: []int{1, 4, 100},
	ZstdMessages: 1000,
	ScaleTopics:  10, ScaleMessages: 200, IdleWindow: time.Second, ScaleSettle: time.Second,
	Subs: subsSizes{Topics: 4, Settle: time.Second, Idle: 2 * time.Second, Rate: 20,
		Warm: time.Second, Traffic: 2 * time.Second, Probes: 2, ProbeParallel: 2, Growth: []int{6}, GrowthIdle: time.Second,
		Builtin: true}, // 4 topics more: seconds
	SubsVs: subsvsSizes{Partitions: 2, Rate: 20, Warm: time.Second, Load: 3 * time.Second, Tail: 6 * time.Second, Probes: 1, Types: []string{"failover"}},
	Verify: verifySizes{Rounds: 1, Messages: 2000, AgeRate: 100, AgeFor: 4 * time.Second, AgeWarm: 2 * time.Second, CatchUp: time.Second},
}

// TestBenchSmoke runs every workload of the benchmark at smokeSizes and
// checks that the report has each of them. It asserts no timing: a
// benchmark is not a test (see make bench).
func TestBenchSmoke(t *testing.T) {
	e2e.UseClusters(t, "east", "west") // no test of the other lane stops them meanwhile (.ci/e2e.sh)
	if err := e2e.UpShared("east", "west"); err != nil {
		t.Fatalf("test bed: %v", err)
	}
	dir := t.TempDir()
	if err := e2e.BuildBinary(dir); err != nil {
		t.Fatal(err)
	}
	// The WAN rows need far and the proxy: not part of this smoke.
	only := parseOnly("")
	delete(only, "wan")
	o := options{
		Binary:   e2e.Binary,
		Only:     only,
		Sizes:    smokeSizes,
		Quick:    true,
		Machine:  machine(),
		Progress: os.Stderr,
	}
	rep, err := run(o)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	md := rep.Markdown()
	t.Log("\n" + md)
	for _, want := range []string{
		"| throughput, 1 partition | msg/s |",
		"| throughput, 4 partitions | msg/s |",
		"| end-to-end latency at 100 msg/s | p99 ms |",
		"| backlog drain, 1 partition, 2,000 messages | copy msg/s, first to last message on west (the replicator's speed) |",
		"| backlog drain, 4 partitions, 2,000 messages | start-up s, release or process start to the first message on west |",
		"| backlog drain, 100 partitions, 2,000 messages | seconds, release or process start to the last message (start-up included; ratio of the medians, as speed) |",
		"Slow drain rounds",
		"The throughput rows are sustained load, what a user sees",
		"| ZSTD topic, 1 partition | bytes into the target per byte stored at the origin |",
		"10 topics",
		"Scale with replicated subscriptions: one sidecar replicating 4 non-partitioned topics",
		"| follow latency p50 / p99, spread traffic (2 probes per arm) |",
		"| excess during the load, median |",
		"| admin requests per replicated message (east + west) | 0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if len(rep.Errors) > 0 {
		t.Errorf("workload errors: %v", rep.Errors)
	}
	if rep.Subs == nil {
		t.Error("report lacks the scale row with replicated subscriptions")
	}
	if len(rep.SubsVs) == 0 {
		t.Error("report lacks the side-by-side row of replicated subscriptions")
	}
	if rep.Verify == nil {
		t.Error("report lacks the continuous verifier's row")
	}
	if rep.Scale == nil || len(rep.Drain) != len(smokeSizes.DrainShapes) || rep.Lat == nil || rep.Zstd == nil || len(rep.TP) != 2 {
		t.Errorf("report incomplete: scale %v, drain shapes %d of %d, latency %v, zstd %v, throughput %d",
			rep.Scale != nil, len(rep.Drain), len(smokeSizes.DrainShapes), rep.Lat != nil, rep.Zstd != nil, len(rep.TP))
	}
	for _, d := range rep.Drain {
		if len(d.Rounds) != 2 {
			t.Errorf("drain, %d partitions: %d arm rounds, want 2 (built-in, sidecar)", d.Partitions, len(d.Rounds))
		}
	}
}
