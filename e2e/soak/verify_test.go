package main

import (
	"strings"
	"testing"
)

// TestVerifyProblem: a pair fails the run when verify does not exit 0,
// or when its losses (missing and not yet copied, entries) disagree with
// the checker's (messages): equal counts without batching, zero or not
// with it.
func TestVerifyProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    VerifyRun
		want string // substring of the problem; "" for none
	}{
		{"clean", VerifyRun{Exit: 0}, ""},
		{"clean batched", VerifyRun{Exit: 0, Batched: true}, ""},
		{"could not verify", VerifyRun{Exit: 2}, "verify exit 2"},
		{"not run", VerifyRun{Exit: -1}, "verify exit -1"},
		{"both lost the same, unbatched", VerifyRun{Exit: 1, Missing: 2, NotYetCopied: 1, CheckerLost: 3}, "verify exit 1"},
		{"verify lost, checker not", VerifyRun{Exit: 1, Missing: 1}, "verify lost 1 entries, the checker 0 messages"},
		{"checker lost, verify exit 0", VerifyRun{Exit: 0, CheckerLost: 4}, "verify lost 0 entries, the checker 4 messages"},
		{"unbatched counts differ", VerifyRun{Exit: 1, Missing: 2, CheckerLost: 3}, "verify lost 2 entries, the checker 3"},
		{"batched, entries against messages", VerifyRun{Exit: 1, Batched: true, Missing: 1, CheckerLost: 40}, "verify exit 1"},
		{"batched, checker lost only", VerifyRun{Exit: 0, Batched: true, CheckerLost: 40}, "(batched)"},
		{"no verdict: no comparison", VerifyRun{Exit: 2, CheckerLost: 40}, "verify exit 2"},
	} {
		got := tc.v.Problem()
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: problem %q, want none", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: problem %q, want %q in it", tc.name, got, tc.want)
		}
	}
	// Exit 1 with the same losses names only the exit; exit 2 never
	// compares counts it does not have.
	if got := (VerifyRun{Exit: 1, Missing: 3, CheckerLost: 3}).Problem(); got != "verify exit 1" {
		t.Errorf("agreeing loss: %q", got)
	}
	if got := (VerifyRun{Exit: 2, CheckerLost: 40}).Problem(); got != "verify exit 2" {
		t.Errorf("no verdict: %q", got)
	}
}

// TestParseVerify: the partitions of verify's JSON are added up.
func TestParseVerify(t *testing.T) {
	out := `{"topic":"persistent://t/ns/parted","from":"east","to":"west","authenticated":true,"faults":1,
"partitions":[{"partition":"persistent://t/ns/parted-partition-0","expected":10,"present":9,"missing":1,"not_yet_copied":0,"duplicated":2},
{"partition":"persistent://t/ns/parted-partition-1","expected":5,"present":3,"not_yet_copied":2,"out_of_order":1,"present_unproven":1,"divergent":1,"target_only":4}]}`
	var v VerifyRun
	if err := parseVerify([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	want := VerifyRun{Expected: 15, Present: 12, Missing: 1, NotYetCopied: 2, Duplicated: 2, OutOfOrder: 1, Unproven: 1, Divergent: 1, TargetOnly: 4}
	if v != want {
		t.Errorf("got %+v, want %+v", v, want)
	}
	if err := parseVerify([]byte("geo-sidecar verify: could not"), &v); err == nil {
		t.Error("text taken for JSON")
	}
}

// TestWithChecker: the checker's counts for a pair and topic are those
// of the topic's partitions on the target of producers on the source.
func TestWithChecker(t *testing.T) {
	rows := []Row{
		{Stream: Stream{"west", "persistent://t/ns/parted-partition-0", "east", "east-parted"}, Lost: 1, Duplicate: 2},
		{Stream: Stream{"west", "persistent://t/ns/parted-partition-3", "east", "east-parted"}, Lost: 4},
		{Stream: Stream{"west", "persistent://t/ns/parted-partition-0", "west", "west-parted"}, Lost: 100},  // west's own
		{Stream: Stream{"east", "persistent://t/ns/parted-partition-0", "east", "east-parted"}, Lost: 1000}, // at the origin
		{Stream: Stream{"west", "persistent://t/ns/partedx", "east", "east-partedx"}, Lost: 10000},          // another topic
		{Stream: Stream{"west", "persistent://t/ns/plain", "east", "east-plain"}, Lost: 7},
	}
	v := VerifyRun{From: "east", To: "west", Topic: "parted"}
	v.withChecker(rows, "t/ns")
	if v.CheckerLost != 5 || v.CheckerDuplicate != 2 {
		t.Errorf("parted: lost %d duplicate %d, want 5 and 2", v.CheckerLost, v.CheckerDuplicate)
	}
	p := VerifyRun{From: "east", To: "west", Topic: "plain"}
	p.withChecker(rows, "t/ns")
	if p.CheckerLost != 7 {
		t.Errorf("plain: lost %d, want 7", p.CheckerLost)
	}
}
