package main

// After the drain, `geo-sidecar verify --complete` proves every pair's
// copy of every load topic, and its answer is set beside the Java
// checker's: two checks that share no code must agree on what was lost.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// verifyLimit bounds one verify run (a 30-minute soak's topic proves in
// seconds; the bound is for a stalled read).
const verifyLimit = 5 * time.Minute

// VerifyRun is one `geo-sidecar verify --complete --json` of one load
// topic from one cluster to the other, its counts (entries, summed over
// the topic's partitions) beside the checker's (messages).
type VerifyRun struct {
	From, To, Topic string
	Batched         bool // entries hold several messages: counts compare as zero or not
	Exit            int  // verify's exit status; -1 when it could not be run
	Err             string
	Took            time.Duration

	Expected, Present, NotYetCopied, Missing, Duplicated, Divergent, OutOfOrder, Unproven, TargetOnly int64

	// The checker's messages of producers on From in Topic's partitions
	// on To: acknowledged and absent, and extra copies.
	CheckerLost, CheckerDuplicate int
}

// verifyJSON is the part of verify's --json report the soak reads
// (docs/verify.md); its own struct, not verify's, so that the soak reads
// the report as an operator's script would.
type verifyJSON struct {
	Partitions []struct {
		Expected        int64 `json:"expected"`
		Present         int64 `json:"present"`
		NotYetCopied    int64 `json:"not_yet_copied"`
		Missing         int64 `json:"missing"`
		Duplicated      int64 `json:"duplicated"`
		Divergent       int64 `json:"divergent"`
		OutOfOrder      int64 `json:"out_of_order"`
		PresentUnproven int64 `json:"present_unproven"`
		TargetOnly      int64 `json:"target_only"`
	} `json:"partitions"`
}

// parseVerify adds up a --json report's partitions into v.
func parseVerify(out []byte, v *VerifyRun) error {
	var j verifyJSON
	if err := json.Unmarshal(out, &j); err != nil {
		return fmt.Errorf("verify's JSON: %w", err)
	}
	for _, p := range j.Partitions {
		v.Expected += p.Expected
		v.Present += p.Present
		v.NotYetCopied += p.NotYetCopied
		v.Missing += p.Missing
		v.Duplicated += p.Duplicated
		v.Divergent += p.Divergent
		v.OutOfOrder += p.OutOfOrder
		v.Unproven += p.PresentUnproven
		v.TargetOnly += p.TargetOnly
	}
	return nil
}

// runVerify runs the binary's verify on one topic (ns/short) from one
// cluster to the other with an instance's config (which names the run's
// marker key, so copies are proven, not taken at their word).
func runVerify(ctx context.Context, binary, config, ns string, tk topicKind, from, to string) VerifyRun {
	v := VerifyRun{From: from, To: to, Topic: tk.Short, Batched: tk.Batched, Exit: -1}
	ctx, cancel := context.WithTimeout(ctx, verifyLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "verify", "--config", config, "--topic", ns+"/"+tk.Short,
		"--from", from, "--to", to, "--complete", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	v.Took = time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
		v.Exit = 0
	case errors.As(err, &ee):
		v.Exit = ee.ExitCode()
	default:
		v.Err = err.Error()
		return v
	}
	v.Err = strings.TrimSpace(string(lastBytes(stderr.Bytes(), 512)))
	if stdout.Len() > 0 {
		if err := parseVerify(stdout.Bytes(), &v); err != nil && v.Err == "" {
			v.Err = err.Error()
		}
	}
	return v
}

// withChecker sets the checker's counts for v's pair and topic from the
// checker's rows: the streams on v.To of producers on v.From in the
// topic's partitions.
func (v *VerifyRun) withChecker(rows []Row, ns string) {
	base := "persistent://" + ns + "/" + v.Topic
	v.CheckerLost, v.CheckerDuplicate = 0, 0
	for _, r := range rows {
		if r.Cluster != v.To || r.Origin != v.From {
			continue
		}
		if r.Partition != base && !strings.HasPrefix(r.Partition, base+"-partition-") {
			continue
		}
		v.CheckerLost += r.Lost
		v.CheckerDuplicate += r.Duplicate
	}
}

// Problem says why v fails the run, "" when it does not: verify did not
// exit 0 (a fault found, an entry not copied after the drain, or no
// verdict), or it disagrees with the checker on what was lost. verify
// counts entries not copied (missing, or not yet copied: after the drain
// both are losses) and the checker messages; without batching an entry
// is a message and the counts must be equal, with batching only whether
// anything was lost can be compared.
func (v VerifyRun) Problem() string {
	var why []string
	if v.Exit != 0 {
		why = append(why, fmt.Sprintf("verify exit %d", v.Exit))
	}
	if v.Exit == 0 || v.Exit == 1 {
		lost := v.Missing + v.NotYetCopied
		switch {
		case !v.Batched && lost != int64(v.CheckerLost):
			why = append(why, fmt.Sprintf("verify lost %d entries, the checker %d messages", lost, v.CheckerLost))
		case v.Batched && (lost > 0) != (v.CheckerLost > 0):
			why = append(why, fmt.Sprintf("verify lost %d entries (batched), the checker %d messages", lost, v.CheckerLost))
		}
	}
	return strings.Join(why, "; ")
}
