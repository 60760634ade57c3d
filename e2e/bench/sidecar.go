package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// sidecar is one geo-sidecar process run by the benchmark.
type sidecar struct {
	e       *env
	name    string
	cmd     *exec.Cmd
	listen  string
	pprof   string // empty unless profiling
	logPath string
	cfgPath string
	started time.Time
	done    chan error
	// killed is set when stop killed the process, which had not exited
	// within stopWait of SIGTERM.
	killed bool
}

// sidecarConfig is the YAML of a sidecar copying topics of namespace ns
// from east to west. topics is a YAML flow list of names or, with
// patterns, of regular expressions. discovery "" keeps the default (30 s).
func sidecarConfig(listen, ns, discovery string, patterns bool, topics ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\n", listen)
	if discovery != "" {
		fmt.Fprintf(&b, "  discovery_interval: %s\n", discovery)
	}
	b.WriteString("clusters:\n")
	for _, n := range []string{"east", "west"} {
		c := e2e.Get(n)
		fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", c.Name, c.ServiceURL, c.AdminURL)
		if v := os.Getenv("BENCH_MAX_PENDING"); v != "" && n == "west" {
			fmt.Fprintf(&b, "    max_pending_messages: %s\n", v)
		}
	}
	key := "topics"
	if patterns {
		key = "topic_patterns"
	}
	quoted := make([]string, len(topics))
	for i, t := range topics {
		quoted[i] = strconv.Quote(t)
	}
	fmt.Fprintf(&b, "replication:\n  - source: east\n    namespace: %s\n    %s: [%s]\n    targets: [west]\n    start: earliest\n",
		ns, key, strings.Join(quoted, ", "))
	return b.String()
}

// startSidecar writes cfg (whose listen address is listen) and starts the
// binary on it. It does not wait for readiness.
func (e *env) startSidecar(binary, name, listen, cfg string) (*sidecar, error) {
	dir := e.dir
	if e.o.Logs != "" {
		if err := os.MkdirAll(e.o.Logs, 0o755); err != nil {
			return nil, err
		}
		dir = e.o.Logs
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	s := &sidecar{e: e, name: name, listen: listen, logPath: filepath.Join(dir, name+".log"), cfgPath: path, done: make(chan error, 1)}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--config", path, "--log-level", cmp.Or(e.o.LogLevel, "info")}
	if e.o.Profile != "" {
		if s.pprof, err = e2e.FreeLoopbackAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof", s.pprof)
	}
	s.cmd = exec.Command(binary, args...)
	s.cmd.SysProcAttr = e2e.ChildProcAttr()
	if e.o.SidecarMemLimit != "" {
		s.cmd.Env = append(os.Environ(), "GOMEMLIMIT="+e.o.SidecarMemLimit)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.started = time.Now()
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() { s.done <- s.cmd.Wait(); logf.Close() }()
	e.cleanups = append(e.cleanups, func() { s.stop() })
	return s, nil
}

// waitReady waits until /readyz answers 200.
func (s *sidecar) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := s.exited(); err != nil {
			return err
		}
		if resp, err := http.Get("http://" + s.listen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("sidecar %s not ready after %s (log %s)", s.name, timeout, s.logPath)
}

// exited returns an error if the process is gone.
func (s *sidecar) exited() error {
	select {
	case err := <-s.done:
		s.done <- err
		b, _ := os.ReadFile(s.logPath)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		return fmt.Errorf("sidecar %s exited: %v\n%s", s.name, err, b)
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to stopWait (then kills the process,
// and sets killed); it returns how long the exit took.
func (s *sidecar) stop() time.Duration {
	if s.cmd.ProcessState != nil {
		return 0
	}
	t0 := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(stopWait):
		_ = s.cmd.Process.Kill()
		s.killed = true
		<-s.done
	}
	return time.Since(t0)
}

// stopWait is how long stop waits for the exit after SIGTERM.
const stopWait = 20 * time.Second

// stopText is a stop's time as the reports show it: the time from SIGTERM
// to the exit, or that the process had to be killed.
func stopText(took time.Duration, killed bool) string {
	if killed {
		return fmt.Sprintf("not within %.0f s (killed)", stopWait.Seconds())
	}
	return fmt.Sprintf("%.1f s", took.Seconds())
}

// usage is what /proc says about the process.
type usage struct {
	CPU     time.Duration // user + system
	RSS     int64         // bytes, now
	HWM     int64         // bytes, peak since start
	Threads int
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux this runs on.
const clockTicks = 100

func (s *sidecar) usage() (usage, error) {
	var u usage
	pid := s.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return u, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(ut+st) * time.Second / clockTicks
	st2, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer st2.Close()
	sc := bufio.NewScanner(st2)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			u.RSS = n << 10
		case "VmHWM":
			u.HWM = n << 10
		case "Threads":
			u.Threads = int(n)
		}
	}
	return u, nil
}

// metric returns the sum of every sample of the named metric on /metrics.
func (s *sidecar) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + s.listen + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum, nil
}

// waitMetric polls metric until it reaches want and returns when it did.
func (s *sidecar) waitMetric(name string, want float64, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last float64
	for time.Now().Before(deadline) {
		if err := s.exited(); err != nil {
			return time.Time{}, err
		}
		if s.e.restarted() {
			return time.Time{}, errRestarted
		}
		if v, err := s.metric(name); err == nil {
			last = v
			if v >= want {
				return time.Now(), nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("sidecar %s: %s is %.0f, not %.0f, after %s", s.name, name, last, want, timeout)
}

// profile fetches /debug/pprof/<kind> (with query, e.g. "seconds=20") into
// the profile directory as <sidecar>-<label>.<kind>.pb.gz. Without
// profiling it does nothing.
func (s *sidecar) profile(kind, query, label string) {
	if s.pprof == "" {
		return
	}
	u := "http://" + s.pprof + "/debug/pprof/" + kind
	if query != "" {
		u += "?" + query
	}
	c := &http.Client{Timeout: 10 * time.Minute}
	resp, err := c.Get(u)
	// A drain's profile starts with the process: its pprof listener may
	// not be up yet.
	for wait := time.Now().Add(10 * time.Second); err != nil && errors.Is(err, syscall.ECONNREFUSED) && time.Now().Before(wait); {
		time.Sleep(50 * time.Millisecond)
		resp, err = c.Get(u)
	}
	if err != nil {
		s.e.logf("profile %s of %s: %v", kind, s.name, err)
		return
	}
	defer resp.Body.Close()
	path := filepath.Join(s.e.o.Profile, fmt.Sprintf("%s-%s.%s.pb.gz", s.name, label, kind))
	f, err := os.Create(path)
	if err != nil {
		s.e.logf("profile: %v", err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// cpuProfile starts a CPU profile of d in the background; the returned
// func waits for it to be saved.
func (s *sidecar) cpuProfile(d time.Duration, label string) func() {
	if s.pprof == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.profile("profile", fmt.Sprintf("seconds=%d", int(d.Seconds())), label)
	}()
	return func() { <-done }
}
