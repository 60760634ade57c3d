package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// meter reads, around each measured window, how busy the whole machine
// was and how much CPU the two brokers used. On a 2-core machine every
// process competes for the same cores: the brokers' CPU per message shows
// what each design costs them, and the machine's busy share shows when
// something else (another engineer's tests, a third cluster) was running.
type meter struct {
	pids map[string]int // broker JVMs by cluster name
}

// cpuSample is one reading.
type cpuSample struct {
	busy, total uint64                   // jiffies of /proc/stat's cpu line
	iowait      uint64                   // of them, waiting for I/O with nothing else to run
	proc        map[string]time.Duration // utime+stime by cluster
}

func newMeter() *meter {
	m := &meter{pids: map[string]int{}}
	for _, c := range []string{"east", "west"} {
		if pid, ok := clusterPID(c); ok {
			m.pids[c] = pid
		}
	}
	return m
}

// clusterPID is the live pid of a test-bed cluster's JVM, from cluster.sh's
// state directory.
func clusterPID(cluster string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(stateDir(), cluster, "pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return 0, false
	}
	return pid, true
}

func (m *meter) sample() cpuSample {
	s := cpuSample{proc: map[string]time.Duration{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			s.total += n
			switch i {
			case 3: // idle
			case 4:
				s.iowait += n
			default:
				s.busy += n
			}
		}
	}
	for c, pid := range m.pids {
		if d, err := procCPU(pid); err == nil {
			s.proc[c] = d
		}
	}
	return s
}

// window is what happened between two samples.
type window struct {
	Busy float64 // share of all cores busy, 0..1
	// IOWait is the share of all cores idle while a disk request of
	// theirs was outstanding (/proc/stat's iowait), 0..1: a bookie
	// waiting on its journal or ledger writes shows here, not in Busy.
	IOWait float64
	Broker map[string]time.Duration // CPU used by each broker
}

func (m *meter) since(a cpuSample) window {
	b := m.sample()
	w := window{Broker: map[string]time.Duration{}}
	if b.total > a.total {
		w.Busy = float64(b.busy-a.busy) / float64(b.total-a.total)
		w.IOWait = float64(b.iowait-a.iowait) / float64(b.total-a.total)
	}
	for c, d := range b.proc {
		w.Broker[c] = d - a.proc[c]
	}
	return w
}

// others lists the test-bed clusters besides east and west that are up,
// for the report: they share the cores.
func others() []string {
	var out []string
	if _, ok := clusterPID("north"); ok {
		out = append(out, "north")
	}
	return out
}

// stateDir is cluster.sh's state directory.
func stateDir() string {
	if d := os.Getenv("GEO_TESTBED_DIR"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "geo-sidecar", "testbed")
}

// procCPU is a process's user + system CPU time from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// pubLatency is a broker's publish latency summary as /metrics shows it
// (pulsar_broker_publish_latency: _sum in ms and _count, both cumulative
// since the broker started).
type pubLatency struct{ Sum, Count float64 }

// publishLatency reads pulsar_broker_publish_latency of east's and west's
// brokers. The broker times each message from its arrival to the
// acknowledgement of its storage write, so the bookie's journal and
// ledger writes are inside it; the test bed's standalone bookies publish
// no journal or flush series of their own. The page runs to megabytes on
// the shared bed; it is read to its end all the same, so that the broker
// has finished writing it before a round is released (it is read outside
// the timed window). A broker that did not answer is missing from the map.
func (e *env) publishLatency() map[string]pubLatency {
	out := map[string]pubLatency{}
	for _, c := range []string{"east", "west"} {
		if l, ok := e.publishLatencyOf(e2e.Get(c).AdminURL + "/metrics/"); ok {
			out[c] = l
		}
	}
	return out
}

func (e *env) publishLatencyOf(url string) (pubLatency, bool) {
	resp, err := e.http.Get(url)
	if err != nil {
		return pubLatency{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pubLatency{}, false
	}
	var l pubLatency
	var haveSum, haveCount bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && !(haveSum && haveCount) {
		line := sc.Text()
		var dst *float64
		switch {
		case strings.HasPrefix(line, "pulsar_broker_publish_latency_sum"):
			dst, haveSum = &l.Sum, true
		case strings.HasPrefix(line, "pulsar_broker_publish_latency_count"):
			dst, haveCount = &l.Count, true
		default:
			continue
		}
		*dst, _ = strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return l, haveSum && haveCount
}

// meanLatency is each broker's mean publish latency in ms between two
// readings; a broker that published nothing in between, or was not read
// both times, is left out.
func meanLatency(a, b map[string]pubLatency) map[string]float64 {
	out := map[string]float64{}
	for c, x := range a {
		y, ok := b[c]
		if !ok || y.Count <= x.Count {
			continue
		}
		out[c] = (y.Sum - x.Sum) / (y.Count - x.Count)
	}
	return out
}
