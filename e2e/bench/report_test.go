package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCompressible checks the ZSTD workload's messages: 1 KiB each, the
// same for the same counter, different for another.
func TestCompressible(t *testing.T) {
	for _, seq := range []int{0, 1, 99_999, 12_345_678} {
		if b := compressible(seq); len(b) != msgSize {
			t.Errorf("compressible(%d) is %d bytes, want %d", seq, len(b), msgSize)
		}
	}
	if string(compressible(7)) != string(compressible(7)) {
		t.Error("compressible(7) differs between calls")
	}
	if string(compressible(7)) == string(compressible(8)) {
		t.Error("compressible(7) == compressible(8)")
	}
}

// TestReportZstdAndTargets renders a report without clusters and checks
// the ZSTD rows, the new targets and the replacement of the benchmark
// page's generated section, whose link to RESULTS.md is relative to the
// page.
func TestReportZstdAndTargets(t *testing.T) {
	rep := &report{
		Date: time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC), Machine: "test", Pulsar: "4.0.7", Sizes: quickSizes, Quick: true,
		TP: []*tpResult{{
			Partitions: 1,
			Rounds: []tpRound{
				{Arm: armBuiltin, Msgs: 1000, Dur: time.Second},
				{Arm: armSidecar, Msgs: 1000, Dur: 2 * time.Second, CPU: 10 * time.Millisecond},
			},
			Sidecar: sidecarRun{Messages: 1000, CPU: 10 * time.Millisecond}, // 10 µs a message
		}},
		Zstd: &zstdResult{Messages: 5000, Rounds: []zstdRound{
			{Arm: armBuiltin, Msgs: 5000, WestMsgs: 5000, Payload: 5_120_000, East: 1_000_000, West: 1_010_000},
			{Arm: armSidecar, Msgs: 5000, WestMsgs: 5000, Payload: 5_120_000, East: 1_000_000, West: 1_020_000},
		}},
	}
	md := rep.Markdown()
	for _, want := range []string{
		"| ZSTD topic, 1 partition | bytes into the target per byte stored at the origin | 1.010 | 1.020 | — | 1.01× | — | ≤ 1.05 |",
		"| ZSTD topic, 1 partition | payload bytes per byte stored at the origin (what ZSTD saved) | 5.12 | 5.12 |",
		"- sidecar CPU per 1 KiB message ≤ 2 µs (batched source), throughput, 1 partition: 10.0 µs (±10.00 µs: CPU is counted in 10 ms ticks): **short**",
		"- ZSTD topic, bytes into the target per byte stored at the origin ≤ 1.05: 1.020 (built-in 1.010): met",
		"- throughput, 1 partition, ≥ 1.0× built-in: 0.50×: **short**",
		"| 1 | sidecar | 5,000 | 5.12 | 1.00 | 1.02 | 1.020 | 5.12 |",
		"5,000 messages of 1 KiB on east per arm per round",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	path, results := filepath.Join(dir, "docs", "benchmark.md"), filepath.Join(dir, "e2e", "bench", "RESULTS.md")
	old := "# x\n\n" + pageBegin + "\nold table\n" + pageEnd + "\n\nafter\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updatePage(path, results, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "old table") || !strings.HasSuffix(got, pageEnd+"\n\nafter\n") ||
		!strings.Contains(got, "bytes into the target per byte stored at the origin ≤ 1.05: 1.020") ||
		!strings.Contains(got, "(../e2e/bench/RESULTS.md).") {
		t.Errorf("page after updatePage:\n%s", got)
	}
}

// TestGrowthGoroutineVerdict: the goroutines per partition are what each
// partition adds between the growth runs, not the process's own spread
// over them.
func TestGrowthGoroutineVerdict(t *testing.T) {
	run := func(topics, goroutines int) *subsResult {
		return &subsResult{Topics: topics, HWM: 100 << 20, Replicated: time.Second,
			Phases: []subsPhase{{Goroutines: goroutines}}}
	}
	for _, tt := range []struct {
		name   string
		runs   []*subsResult
		met    bool
		figure string
	}{
		{"two per partition and direction, 27 fixed", []*subsResult{run(1000, 4027), run(2500, 10027)}, true, "2.00 each partition adds (1,000 to 2,500 topics), beside 27 of the process (10,027 in all)"},
		{"a third per partition", []*subsResult{run(1000, 6027), run(2500, 15027)}, false, "3.00 each partition adds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			var ok []bool
			growthTargets(tt.runs, func(met bool, format string, args ...any) {
				if s := fmt.Sprintf(format, args...); strings.Contains(s, "goroutines") {
					got, ok = append(got, s), append(ok, met)
				}
			})
			if len(got) != 1 || ok[0] != tt.met || !strings.Contains(got[0], tt.figure) {
				t.Fatalf("verdicts %q (met %v), want one with %q, met %v", got, ok, tt.figure, tt.met)
			}
		})
	}
}
