package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
)

// Exit codes of verify: exitOK, exitFailed (a fault found), and
// exitUnverified when it could not verify.
const exitUnverified = 2

// cmdVerify is geo-sidecar verify: flags, printing and exit codes around
// verify.Run.
func cmdVerify(args []string, stdout, stderr io.Writer) int {
	c := newFlags("verify", "Proves the copy of a topic: reads it on --from and on --to with readers of its own (no\n"+
		"replication cursor is touched), and reports per partition whether --to holds every entry of\n"+
		"--from that the sidecar forwards, once, unchanged and in order, and through which origin position\n"+
		"and publish time that is proven. Exit status 0: nothing missing, duplicated, divergent or out of\n"+
		"order, and every copy's origin proven; 1: something is, or a copy holds an entry's bytes under an\n"+
		"origin signature no configured marker key verifies (present-unproven: the report names the first\n"+
		"positions and the ids of the keys tried); 2: it could not verify.", stderr)
	var (
		topic, from, to, since string
		asJSON, complete       bool
		msgRate, byteRate      float64
		slack                  time.Duration
		window                 int
	)
	c.fs.StringVar(&topic, "topic", "", "replicated topic, tenant/namespace/topic or persistent://... (required)")
	c.fs.StringVar(&from, "from", "", "source cluster (required)")
	c.fs.StringVar(&to, "to", "", "target cluster (required)")
	c.fs.StringVar(&since, "since", "", "verify only what was published since: a duration back from now (1h) or an RFC 3339 time")
	c.fs.DurationVar(&slack, "since-slack", time.Minute, "with --since, read the target this much earlier (producers' clocks differ)")
	c.fs.Float64Var(&msgRate, "max-messages-per-second", 0, "read at most this many messages a second, both sides together (0: unlimited)")
	c.fs.Float64Var(&byteRate, "max-bytes-per-second", 0, "read at most this many bytes a second, both sides together (0: unlimited)")
	c.fs.IntVar(&window, "window", verify.DefaultWindow, "source entries compared at once (about 80 bytes each): bounds memory, and how far out of place a copy is still recognised")
	c.fs.BoolVar(&complete, "complete", false, "also exit 1 when an entry is not yet copied (the copy is behind): for a planned failover, once the source's producers stopped")
	c.fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		if code == exitFailed { // a config that does not load
			return exitUnverified
		}
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "geo-sidecar verify: "+format+"\n", a...)
		return exitUnverified
	}
	if topic == "" || from == "" || to == "" || from == to {
		return usageErr("--topic, --from and --to are required, and --from and --to differ")
	}
	if window < 1 || msgRate < 0 || byteRate < 0 || slack < 0 {
		return usageErr("--window must be at least 1; rates and --since-slack not negative")
	}
	full, short, parts, sinceT, err := verifyTopicAndSince(topic, since)
	if err != nil {
		return usageErr("%v", err)
	}
	fc, tc, keys, err := copyEnds(cfg, from, to, short, parts)
	if err != nil {
		return usageErr("%v", err)
	}

	sctx, sstop := signalContext(zap.NewNop())
	defer sstop()
	o := verify.Options{Topic: full, Keys: keys, Since: sinceT, Slack: slack, MsgRate: msgRate, ByteRate: byteRate,
		ReaderPrefix: cfg.Sidecar.CursorPrefix, Window: window}
	var closeFrom, closeTo func()
	if o.From, closeFrom, err = dialSide(fc); err != nil {
		return usageErr("%v", err)
	}
	defer closeFrom()
	if o.To, closeTo, err = dialSide(tc); err != nil {
		return usageErr("%v", err)
	}
	defer closeTo()
	if isTerminal(stderr) {
		o.Progress = progressPrinter(stderr)
	}
	rep, err := verify.Run(sctx, o)
	if o.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar verify: could not verify: %v\n", err)
		return exitUnverified
	}
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(verify.JSON(rep))
	} else {
		printVerify(stdout, rep)
	}
	if rep.Faults() > 0 {
		return exitFailed
	}
	if behind := notYetCopied(rep); complete && behind > 0 {
		fmt.Fprintf(stderr, "geo-sidecar verify: --complete: %d entries not yet copied\n", behind)
		return exitFailed
	}
	return exitOK
}

// copyEnds looks up the two clusters of a copy that --from and --to name
// (parts: --topic's tenant, namespace and topic), checks that the config
// copies the topic from one to the other, and reads the marker keys that
// prove its copies: what verify and switchover both start from.
func copyEnds(cfg *config.Config, from, to, short string, parts []string) (fc, tc config.Cluster, keys marker.Keys, err error) {
	fc, ok := cfg.Cluster(from)
	if !ok {
		return fc, tc, keys, fmt.Errorf("--from %q: no such cluster in the config", from)
	}
	if tc, ok = cfg.Cluster(to); !ok {
		return fc, tc, keys, fmt.Errorf("--to %q: no such cluster in the config", to)
	}
	if !cfg.Copies(parts[0]+"/"+parts[1], parts[2], from, to) {
		return fc, tc, keys, fmt.Errorf("the config does not copy %s from %s to %s", short, from, to)
	}
	keys, err = markerKeys(cfg)
	return fc, tc, keys, err
}

// verifyTopicAndSince parses --topic (tenant/namespace/topic, with or
// without persistent://) and --since (a duration back from now or an
// RFC 3339 time; empty: no bound).
func verifyTopicAndSince(topic, since string) (full, short string, parts []string, sinceT time.Time, err error) {
	full = topic
	if !strings.Contains(full, "://") {
		full = "persistent://" + full
	}
	short = strings.TrimPrefix(full, "persistent://")
	parts = strings.Split(short, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", nil, time.Time{}, fmt.Errorf("--topic %q: want tenant/namespace/topic", topic)
	}
	if since != "" {
		if d, derr := time.ParseDuration(since); derr == nil && d > 0 {
			sinceT = time.Now().Add(-d)
		} else if t, terr := time.Parse(time.RFC3339, since); terr == nil {
			sinceT = t
		} else {
			return "", "", nil, time.Time{}, fmt.Errorf("--since %q: want a positive duration (1h) or an RFC 3339 time", since)
		}
	}
	return full, short, parts, sinceT, nil
}

// markerKeys are the config's marker keys (current and accepted), which
// prove a copy's origin; zero without a marker key.
func markerKeys(cfg *config.Config) (marker.Keys, error) {
	key, err := cfg.MarkerKey()
	if err != nil {
		return marker.Keys{}, err
	}
	accepted, err := cfg.MarkerKeyAccepted()
	if err != nil {
		return marker.Keys{}, err
	}
	if key == nil {
		return marker.Keys{}, nil
	}
	return marker.NewKeys(key, accepted), nil
}

// dialSide connects to one cluster for verify: its wire client reads, its
// admin API finds the partitions. The returned func closes both.
func dialSide(cc config.Cluster) (verify.Side, func(), error) {
	conn, err := cluster.Dial(cc, zap.NewNop(), cluster.SecurityEvents{})
	if err != nil {
		return verify.Side{}, nil, err
	}
	wc, err := conn.WireClient()
	if err != nil {
		conn.Close()
		return verify.Side{}, nil, err
	}
	return verify.Side{Name: cc.Name, Client: wc, Admin: conn.Admin}, conn.Close, nil
}

func notYetCopied(r verify.Report) int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.NotYetCopied
	}
	return n
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressPrinter redraws one progress line at most every 200 ms.
func progressPrinter(w io.Writer) func(verify.Progress) {
	var last time.Time
	start := time.Now()
	return func(p verify.Progress) {
		if time.Since(last) < 200*time.Millisecond {
			return
		}
		last = time.Now()
		rate := float64(p.Messages) / max(time.Since(start).Seconds(), 1e-3)
		fmt.Fprintf(w, "\r\033[Kpartition %d/%d: %d source and %d target entries; %d messages, %.1f MiB read (%.0f msg/s)",
			p.Index+1, p.Partitions, p.SourceEntries, p.TargetEntries, p.Messages, float64(p.Bytes)/(1<<20), rate)
	}
}

func printVerify(w io.Writer, r verify.Report) {
	auth := "origins proven by signature"
	if !r.Authenticated {
		auth = "no marker key: origins taken at their word, digests compared"
	}
	fmt.Fprintf(w, "verify %s -> %s on %s (%s)\n", r.From, r.To, r.Topic, auth)
	if len(r.Keys) > 0 {
		fmt.Fprintf(w, "  marker keys tried    %s\n", keyList(r.Keys))
	}
	if !r.Since.IsZero() {
		fmt.Fprintf(w, "  since %s\n", r.Since.UTC().Format(time.RFC3339))
	}
	for _, p := range r.Partitions {
		fmt.Fprintf(w, "\n%s\n", p.Partition)
		fmt.Fprintf(w, "  expected %d, present %d, not yet copied %d; missing %d, duplicated %d, divergent %d, out of order %d",
			p.Expected, p.Present, p.NotYetCopied, p.Missing, p.Duplicated, p.Divergent, p.OutOfOrder)
		if p.PresentUnproven > 0 {
			fmt.Fprintf(w, "; present but unproven %d", p.PresentUnproven)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  source-gone %d, target-only %d; source entries %d (not forwarded %d), target entries %d (local %d, other origins %d, markers %d, unreadable %d)\n",
			p.SourceGone, p.TargetOnly, p.SourceEntries, p.Skipped, p.TargetEntries, p.Local, p.OtherOrigin, p.Markers, p.Unreadable)
		if p.BeforeRange > 0 {
			fmt.Fprintf(w, "  copies of entries before --since: %d\n", p.BeforeRange)
		}
		if t := p.Through; t != nil {
			at := ""
			if t.HasTarget {
				at = ", its copy at or before target " + t.Target.String()
			}
			fmt.Fprintf(w, "  verified through %s (published %s%s)\n", t.Origin.String(), time.UnixMilli(t.PublishTime).UTC().Format(time.RFC3339Nano), at)
		} else {
			fmt.Fprintf(w, "  verified through: nothing yet\n")
		}
		for _, f := range p.Findings {
			at := ""
			if f.Target != nil {
				at = " at target " + f.Target.String()
			}
			detail := ""
			if f.Detail != "" {
				detail = ": " + f.Detail
			}
			fmt.Fprintf(w, "  %-12s origin %s%s%s\n", f.Kind, f.Origin.String(), at, detail)
		}
	}
	fmt.Fprintf(w, "\nread %d messages, %.1f MiB in %s\n", r.Messages, float64(r.Bytes)/(1<<20), r.Elapsed.Round(time.Millisecond))
	if n := r.Faults(); n > 0 {
		fmt.Fprintf(w, "FAULTS: %d\n", n)
		if u := r.PresentUnproven(); u > 0 {
			fmt.Fprintf(w, "  of which %d present but unproven: %s holds the entries' bytes, but their origin signatures verify under none of the marker keys tried (%s): copies signed under another key (one this config does not accept, such as the key before a change), or forged by someone who can write to %s\n",
				u, r.To, keyList(r.Keys), r.To)
		}
	} else if n := notYetCopied(r); n > 0 {
		fmt.Fprintf(w, "ok through verified-through: nothing missing, duplicated, divergent or out of order; %d entries NOT YET COPIED after it\n", n)
	} else {
		fmt.Fprintln(w, "ok: nothing missing, duplicated, divergent or out of order")
	}
}

// keyList is the key ids tried, the current one named as such.
func keyList(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	out := "current " + ids[0]
	if len(ids) > 1 {
		out += ", accepted " + strings.Join(ids[1:], ", ")
	}
	return out
}
