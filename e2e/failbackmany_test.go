package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/subscription/failback"
)

// TestFailbackMany: geo-sidecar failback over a namespace's topics in one
// run (--namespace, --parallel). The outage of testFailback on
// GEO_E2E_FAILBACK_TOPICS topics at once (default 6; the runbook's
// figure was measured with 100), not partitioned, one sidecar per
// region: east (the test bed's north) consumes its own traffic, its
// sidecar freezes, east takes more traffic (stranded) and is killed;
// west's application consumes west's traffic holding every 7th back;
// east comes back. Then one failback --namespace --replay --subscription
// run (run again while the pair west→east is not yet proven drained, as
// an operator would) must, per topic, report the tail an outside reader
// finds, replay it, and bring east's subscription to west's state: a
// consumer on east per topic receives exactly what west's application
// left unacknowledged plus the tail. The time from east being back to
// the failback done is logged (no assertion on it).
func TestFailbackMany(t *testing.T) {
	n := 6
	if v := os.Getenv("GEO_E2E_FAILBACK_TOPICS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			t.Fatalf("GEO_E2E_FAILBACK_TOPICS=%q: want a number of at least 2", v)
		}
	}
	if err := Up(home); err != nil {
		t.Fatal(err)
	}
	DisruptClusters(t, home)
	awaitClusters(t, home, "west")
	ns := NewNamespace(t, home, "west")
	topics := make([]string, n)
	for i := range topics {
		topics[i] = Topic(ns, fmt.Sprintf("orders-%03d", i))
	}
	const (
		sub      = "billing"
		before   = 10 // east's, consumed on east and copied
		stranded = 6  // east's after its sidecar froze
		westOwn  = 14 // west's during the outage
	)
	east, west := Client(t, home), Client(t, "west")
	// each runs f for every topic, 16 at once.
	each := func(f func(i int, topic string)) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, tp := range topics {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				f(i, tp)
			}()
		}
		wg.Wait()
	}
	each(func(_ int, tp string) {
		for _, c := range []pulsar.Client{east, west} {
			switchoverSubscribe(t, c, tp, sub, pulsar.Shared).Close()
		}
	})
	repl := fmt.Sprintf("  - source: %s\n    namespace: %s\n    %s\n    targets: [west]\n    subscriptions: [%s]\n", home, ns, all, sub) +
		entry("west", ns, all, home)
	sEast := StartSidecar(t, []string{home, "west"}, repl, "--cluster", home)
	sWest := StartSidecar(t, []string{home, "west"}, repl, "--cluster", "west")

	produce := func(c pulsar.Client, tp, prefix string, from, count int) {
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
		if err != nil {
			t.Errorf("producer on %s: %v", tp, err)
			return
		}
		defer p.Close()
		for i := from; i < from+count; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))})
			cancel()
			if err != nil {
				t.Errorf("send to %s: %v", tp, err)
				return
			}
		}
	}
	app := goFailbackApp{}
	each(func(_ int, tp string) {
		produce(east, tp, "e", 0, before)
		if got, _, _ := app.consume(t, home, tp, sub, 0); len(got) != before {
			t.Errorf("%s: the application on east received %d of %d", tp, len(got), before)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	// Everything so far copied to west, then the outage.
	Eventually(t, 2*time.Minute, func() error {
		for _, tp := range topics {
			if code, _, errOut := runVerify(t, sEast.ConfigPath, tp, "--from", home, "--to", "west", "--complete"); code != 0 {
				return fmt.Errorf("%s: verify --complete exit %d: %s", tp, code, errOut)
			}
		}
		return nil
	})
	sEast.Freeze()
	each(func(_ int, tp string) { produce(east, tp, "e", before, stranded) })
	if err := Kill(home); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = Up(home)
		}
	})
	sEast.Kill()

	// West takes over.
	held := make([][]string, n)
	each(func(i int, tp string) {
		produce(west, tp, "w", 0, westOwn)
		_, held[i], _ = app.consume(t, "west", tp, sub, failbackHoldEach)
	})
	if t.Failed() {
		t.FailNow()
	}

	// East is back: from here to the failback done is the time measured.
	if err := Up(home); err != nil {
		t.Fatal(err)
	}
	restarted = true
	backAt := time.Now()
	args := []string{"--namespace", ns, "--replay", "--subscription", sub, "--parallel", "8"}
	var (
		rep      failback.ManyReport
		code     int
		errOut   string
		attempts int
	)
	// Until the pair west→east has copied west's traffic home, each
	// topic's subscriptions stop at its proof (exit 1 once a tail was
	// copied): the operator runs it again, and a tail replayed is found
	// copied. So the tail is what the runs found and copied between them.
	copied, strandedBy := map[string]int64{}, map[string]int64{}
	for {
		attempts++
		code, rep, errOut = runFailbackMany(t, sWest.ConfigPath, args...)
		for _, r := range rep.Topics {
			copied[r.Topic] += r.Report.Copied
			strandedBy[r.Topic] = max(strandedBy[r.Topic], r.Report.RPO.Entries)
		}
		if code == 0 || time.Since(backAt) > 3*time.Minute {
			break
		}
		t.Logf("failback run %d after %.1f s: exit %d, %d of %d topics done, copied %d (%s)", attempts, time.Since(backAt).Seconds(),
			code, rep.Total.Done, rep.Total.Topics, rep.Total.Copied, firstError(rep))
		time.Sleep(time.Second)
	}
	doneAt := time.Since(backAt)
	var allStranded, allCopied int64
	for _, tp := range topics {
		allStranded += strandedBy[tp]
		allCopied += copied[tp]
	}
	t.Logf("%d topics: east back to failback done %.1f s (%d runs; the last %.1f s, --parallel 8): exit %d, %d done, stranded %d entries, copied %d, again %d, missed %d, refused %d",
		n, doneAt.Seconds(), attempts, rep.Seconds, code, rep.Total.Done, allStranded, allCopied,
		rep.Total.Again, rep.Total.Missed, rep.Total.Refused)
	if code != 0 || !rep.OK() || rep.Total.Topics != n {
		t.Fatalf("failback --namespace: exit %d, %+v\n%s", code, rep.Total, errOut)
	}

	// Per topic: the tail the outside reader finds, replayed; and east's
	// subscription at west's state.
	each(func(i int, tp string) {
		var r *failback.TopicResult
		for j := range rep.Topics {
			if rep.Topics[j].Topic == tp {
				r = &rep.Topics[j]
			}
		}
		if r == nil {
			t.Errorf("%s: not in the report", tp)
			return
		}
		onWest := map[string]bool{}
		for _, m := range readOutside(t, west, []string{tp}) {
			if m.props["geo-sidecar.replayed-late"] != "true" {
				onWest[m.payload] = true
			}
		}
		var tail []string
		for _, m := range readOutside(t, east, []string{tp}) {
			if strings.HasPrefix(m.payload, "e-") && !onWest[m.payload] {
				tail = append(tail, m.payload)
			}
		}
		if r.Outcome != failback.TopicDone || strandedBy[tp] != int64(len(tail)) || copied[tp] != int64(len(tail)) {
			t.Errorf("%s: %s, stranded %d, copied %d; the outside reader finds %d stranded", tp, r.Outcome, strandedBy[tp], copied[tp], len(tail))
		}
		want := append(slices.Clone(held[i]), tail...)
		slices.Sort(want)
		got, _, _ := app.consume(t, home, tp, sub, 0)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: east's consumer received %v, want %v", tp, got, want)
		}
	})
}

// firstError is the first topic's error of a run over several.
func firstError(r failback.ManyReport) string {
	for _, t := range r.Topics {
		if t.Error != "" {
			return t.Topic + ": " + t.Error
		}
	}
	return "no error"
}

// runFailbackMany runs geo-sidecar failback --json over several topics
// and returns its exit status, report and stderr.
func runFailbackMany(t *testing.T, cfg string, args ...string) (int, failback.ManyReport, string) {
	t.Helper()
	return runJSON[failback.ManyReport](t, append([]string{"failback", "--config", cfg, "--from", home, "--to", "west",
		"--quiet", "1s", "--json"}, args...)...)
}
