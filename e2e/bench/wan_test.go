package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// TestWANSections checks that a run of the WAN rows alone replaces only
// the WAN section of RESULTS.md and the benchmark page, and that a run without
// them keeps the WAN section RESULTS.md had.
func TestWANSections(t *testing.T) {
	rep := &report{Date: time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC), Machine: "test", Pulsar: "4.0.7", Sizes: sizes{Rounds: 1, LatDuration: time.Second}}
	rep.WAN = &wanResult{Messages: 10, ZstdMessages: 10, LatRate: 100}
	for _, rtt := range wanRTTs {
		for _, arm := range []string{armBuiltin, armSidecar} {
			rep.WAN.TP = append(rep.WAN.TP, wanRound{Arm: arm, RTT: rtt, Msgs: 10, Dur: time.Second})
		}
	}
	dir := t.TempDir()
	results, page := filepath.Join(dir, "RESULTS.md"), filepath.Join(dir, "docs", "benchmark.md")
	if err := os.Mkdir(filepath.Dir(page), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(results, []byte("main report\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, []byte("# x\n"+pageBegin+"\nmain table\n"+pageEnd+"\n\n"+wanBegin+"\nold\n"+wanEnd+"\n\n## Layout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wanOnly := options{Only: parseOnly("wan"), Out: results}
	for i := range 2 { // twice: the second run replaces the first's section
		if err := writeResults(results, wanOnly, rep); err != nil {
			t.Fatal(err)
		}
		if err := updatePageAll(page, wanOnly, rep); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(results)
		if s := string(b); !strings.HasPrefix(s, "main report\n") || strings.Count(s, wanBegin) != 1 || !strings.Contains(s, "| throughput, 150 ms RTT | msg/s | 10 | 10 | 1.00× | |") {
			t.Fatalf("run %d: RESULTS.md:\n%s", i, s)
		}
		b, _ = os.ReadFile(page)
		if s := string(b); !strings.Contains(s, "main table") || strings.Contains(s, "\nold\n") || strings.Count(s, wanBegin) != 1 ||
			!strings.HasSuffix(s, wanEnd+"\n\n## Layout\n") || !strings.Contains(s, "Target: sidecar throughput at 150 ms RTT ≥ 0.80 of its 0 ms figure: 1.00: met") ||
			!strings.Contains(s, "(../RESULTS.md#between-regions-wan-rows).") {
			t.Fatalf("run %d: page:\n%s", i, s)
		}
	}
	// A run without the WAN rows writes the main report and keeps the
	// WAN section.
	rep.WAN = nil
	if err := writeResults(results, options{Only: parseOnly("tp1")}, rep); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(results)
	if s := string(b); strings.HasPrefix(s, "main report") || strings.Count(s, wanBegin) != 1 || !strings.Contains(s, "### Every round") {
		t.Fatalf("RESULTS.md after a run without WAN rows:\n%s", s)
	}
}

// TestBenchWANSmoke runs the WAN rows once at smokeSizes (a few seconds
// once far is up): the proxy's links, far registered on east through
// them, both arms checked to have crossed the proxy. No timing is
// asserted.
func TestBenchWANSmoke(t *testing.T) {
	e2e.UseClusters(t, "east") // no test of the other lane stops it meanwhile (.ci/e2e.sh)
	if err := e2e.UpShared("east"); err != nil {
		t.Fatalf("test bed: %v", err)
	}
	dir := t.TempDir()
	if err := e2e.BuildBinary(dir); err != nil {
		t.Fatal(err)
	}
	o := options{Binary: e2e.Binary, Only: parseOnly("wan"), Sizes: smokeSizes, Quick: true, Machine: machine(), Progress: os.Stderr}
	rep, err := run(o)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	if rep.WAN == nil {
		t.Fatal("no WAN result")
	}
	md := rep.wanMarkdown()
	t.Log("\n" + md)
	for _, want := range []string{
		"| throughput, 150 ms RTT | msg/s |",
		"| ZSTD topic, link 10 MB/s, 50 ms RTT | bytes on the link (both ways) per byte stored at the origin |",
		"| end-to-end latency at 100 msg/s, 50 ms RTT | p99 ms |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("WAN report lacks %q", want)
		}
	}
	if n := len(rep.WAN.TP); n != 2*len(wanRTTs) {
		t.Errorf("%d WAN throughput rounds, want %d", n, 2*len(wanRTTs))
	}
}
