package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestStartupHistoryPeakRSS measures the sidecar's peak resident memory
// (VmHWM) while it re-reads the history of many topics at start (issue 34,
// item 8): east holds topics x messages unbatched 512-byte messages and a
// tracked subscription on each, and east→west starts at latest, so the
// start does nothing else of size. It runs only when asked:
// GEO_E2E_HISTORY_RSS=<topics>x<messages> (200x2000 takes about 400,000
// messages on east); GEO_E2E_HISTORY_BINARY=<path>[,<path>...] measures
// those binaries first, in that order, on the same topics (a build from
// before the change, to compare; the broker's cache favours later runs).
// It also stops a second start once a tenth of the history is read, and
// logs how long SIGTERM took to exit. The figures are logged, not
// asserted: they depend on the machine.
func TestStartupHistoryPeakRSS(t *testing.T) {
	spec := os.Getenv("GEO_E2E_HISTORY_RSS")
	if spec == "" {
		t.Skip("set GEO_E2E_HISTORY_RSS=<topics>x<messages> to measure")
	}
	var topics, msgs int
	if _, err := fmt.Sscanf(spec, "%dx%d", &topics, &msgs); err != nil || topics <= 0 || msgs <= 0 {
		t.Fatalf("GEO_E2E_HISTORY_RSS=%q: want <topics>x<messages>", spec)
	}
	awaitClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	east, admin := Client(t, "east"), Admin(t, "east")
	payload := []byte(strings.Repeat("h", 512))
	began := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				topic := Topic(ns, fmt.Sprintf("h-%04d", i))
				tn, err := utils.GetTopicName(topic)
				if err != nil {
					t.Error(err)
					return
				}
				if err := admin.Subscriptions().Create(*tn, "rss-sub", utils.Earliest); err != nil {
					t.Errorf("creating rss-sub on %s: %v", topic, err)
					return
				}
				produceFixed(t, east, topic, payload, msgs)
			}
		}()
	}
	for i := range topics {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d topics x %d messages of %d bytes written on east in %v", topics, msgs, len(payload), time.Since(began).Round(time.Second))

	rep := entry("east", ns, all, "west") + "    subscriptions: [rss-sub]\n    start: latest\n"
	measure := func(name string) {
		s := StartSidecar(t, []string{"east", "west"}, rep)
		start := time.Now()
		want := float64(topics * msgs)
		// 10 minutes, and 4 more per million entries: the build before
		// the gate had read 5.7 of 10 million after 13 minutes.
		window := 10*time.Minute + time.Duration(topics*msgs/250000)*time.Minute
		Eventually(t, window, func() error {
			if v := s.Metric("geo_sidecar_history_entries_read_total", `cluster="east"`); v < want {
				return fmt.Errorf("%v of %v history entries read on east", v, want)
			}
			return nil
		})
		took := time.Since(start)
		hwm, rss := procStatus(t, s.cmd.Process.Pid, "VmHWM"), procStatus(t, s.cmd.Process.Pid, "VmRSS")
		s.Stop()
		t.Logf("%s: history of %d topics re-read in %v; peak RSS (VmHWM) %s, RSS after %s", name, topics, took.Round(time.Second), hwm, rss)

		// Stopped while it re-reads: how long SIGTERM takes to exit.
		s = s.Restart()
		var read float64
		Eventually(t, 5*time.Minute, func() error {
			if read = s.Metric("geo_sidecar_history_entries_read_total", `cluster="east"`); read < want/10 {
				return fmt.Errorf("%v of %v history entries read on east", read, want)
			}
			return nil
		})
		t.Logf("%s: stopped with %v of %v history entries read: exit after %v", name, read, want, s.Stop().Round(10*time.Millisecond))
	}
	if bins := os.Getenv("GEO_E2E_HISTORY_BINARY"); bins != "" {
		current := Binary
		for _, b := range strings.Split(bins, ",") {
			Binary = b
			measure(b)
		}
		Binary = current
	}
	measure("this build")
}

// produceFixed writes n unbatched copies of payload to topic.
func produceFixed(t *testing.T, c pulsar.Client, topic string, payload []byte, n int) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 2000, SendTimeout: -1})
	if err != nil {
		t.Errorf("producer on %s: %v", topic, err)
		return
	}
	defer p.Close()
	var once sync.Once
	for range n {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				once.Do(func() { t.Errorf("sending to %s: %v", topic, err) })
			}
		})
	}
	if err := p.Flush(); err != nil {
		t.Errorf("flushing %s: %v", topic, err)
	}
}

// procStatus is a field of /proc/<pid>/status ("VmHWM": "123456 kB").
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}
