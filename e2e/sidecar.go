package e2e

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Sidecar is a geo-sidecar process started by a test.
type Sidecar struct {
	t          testing.TB
	cmd        *exec.Cmd
	Listen     string // host:port of its HTTP endpoints
	ConfigPath string
	LogPath    string
	args       []string
	done       chan error
}

// MarkerKeyFile holds the marker key every test sidecar shares; TestMain
// writes it.
var MarkerKeyFile string

// Config is the YAML of a sidecar config for the test bed: the named
// clusters, the given replication entries (YAML list items, already
// indented by two spaces), a 1 s discovery interval and the shared marker
// key. listen is filled in by StartSidecar.
func Config(listen string, clusters []string, replication string) string {
	cs := make([]Cluster, len(clusters))
	for i, n := range clusters {
		cs[i] = Get(n)
	}
	return ConfigFor(listen, cs, replication)
}

// ConfigFor is Config for clusters reached at the given URLs (such as
// through the WAN proxy: FarWAN).
func ConfigFor(listen string, clusters []Cluster, replication string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\n  discovery_interval: 1s\n  marker_key_file: %s\nclusters:\n", listen, MarkerKeyFile)
	for _, c := range clusters {
		fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", c.Name, c.ServiceURL, c.AdminURL)
	}
	b.WriteString("replication:\n")
	b.WriteString(replication)
	return b.String()
}

// FreeAddr returns a loopback address with a free port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreeLoopbackAddr returns a 127.0.0.1 address whose port is free now (the
// demo and the benchmark, which have no testing.TB).
func FreeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartSidecar writes a config built by Config and runs `geo-sidecar run`
// on it with extra args, waiting until /readyz answers. The process is
// stopped when t ends.
func StartSidecar(t testing.TB, clusters []string, replication string, args ...string) *Sidecar {
	t.Helper()
	cs := make([]Cluster, len(clusters))
	for i, n := range clusters {
		cs[i] = Get(n)
	}
	return StartSidecarFor(t, cs, replication, args...)
}

// StartSidecarFor is StartSidecar for clusters reached at the given URLs.
func StartSidecarFor(t testing.TB, clusters []Cluster, replication string, args ...string) *Sidecar {
	t.Helper()
	dir := t.TempDir()
	listen := FreeAddr(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(ConfigFor(listen, clusters, replication)), 0o600); err != nil {
		t.Fatal(err)
	}
	return StartSidecarFile(t, cfg, listen, args...)
}

// StartSidecarFile runs `geo-sidecar run --config cfg` whose config listens
// on listen.
func StartSidecarFile(t testing.TB, cfg, listen string, args ...string) *Sidecar {
	t.Helper()
	s := launchSidecar(t, cfg, listen, args...)
	s.awaitReady()
	return s
}

// launchSidecar starts the process without waiting for it to be ready, so
// that a test can start several at the same moment (awaitReady then).
func launchSidecar(t testing.TB, cfg, listen string, args ...string) *Sidecar {
	t.Helper()
	if Binary == "" {
		t.Fatal("e2e: Binary not built (TestMain calls BuildBinary)")
	}
	logPath := filepath.Join(t.TempDir(), "sidecar.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// GEO_E2E_LOG_LEVEL=debug keeps the sidecar's debug log of a run
	// (kept on failure like the info one) for finding out why it failed.
	level := "info"
	if v := os.Getenv("GEO_E2E_LOG_LEVEL"); v != "" {
		level = v
	}
	cmd := exec.Command(Binary, append([]string{"run", "--config", cfg, "--log-level", level}, args...)...)
	cmd.SysProcAttr = ChildProcAttr()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Sidecar{t: t, cmd: cmd, Listen: listen, ConfigPath: cfg, LogPath: logPath, args: args, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		s.Stop()
		// GEO_E2E_KEEP_LOGS=1 keeps the log of a run that passed too.
		if t.Failed() || os.Getenv("GEO_E2E_KEEP_LOGS") != "" {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("sidecar log (last 4 KiB):\n%s", tail(b, 4096))
				// One file per sidecar: a test with several names them by
				// their listen port.
				keep := keptLogPath(t.Name(), listen)
				if os.MkdirAll(filepath.Dir(keep), 0o755) == nil && os.WriteFile(keep, b, 0o644) == nil {
					t.Logf("whole sidecar log kept in %s", keep)
				}
			}
		}
	})
	return s
}

// awaitReady waits until the sidecar's /readyz answers.
func (s *Sidecar) awaitReady() {
	t := s.t
	t.Helper()
	Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-s.done:
			s.done <- err
			b, _ := os.ReadFile(s.LogPath)
			t.Fatalf("sidecar exited during start-up: %v\n%s", err, tail(b, 4096))
		default:
		}
		resp, err := http.Get("http://" + s.Listen + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}

// Stop sends SIGTERM and waits (up to 15 s) for the exit; it returns how
// long the exit took. Stopping a stopped sidecar is a no-op.
func (s *Sidecar) Stop() time.Duration {
	start := time.Now()
	if s.cmd.ProcessState != nil {
		return 0
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(15 * time.Second):
		s.t.Errorf("sidecar did not exit within 15 s of SIGTERM")
		_ = s.cmd.Process.Kill()
	}
	return time.Since(start)
}

// Restart starts a new process with the same config and arguments (after
// Kill or Stop).
func (s *Sidecar) Restart() *Sidecar {
	s.t.Helper()
	return StartSidecarFile(s.t, s.ConfigPath, s.Listen, s.args...)
}

// Kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (s *Sidecar) Kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// Freeze stops the process (SIGSTOP): it holds its connections but reads
// and writes nothing until it is killed.
func (s *Sidecar) Freeze() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Metric returns the sum of every sample of the named metric on /metrics
// whose label text contains all of match (e.g. `target="west"`).
func (s *Sidecar) Metric(name string, match ...string) float64 {
	sum, _ := s.Samples(name, match...)
	return sum
}

// Samples is Metric, and whether any sample matched (a series that is
// not there yet reads 0 from Metric).
func (s *Sidecar) Samples(name string, match ...string) (sum float64, found bool) {
	return Samples(s.Listen, name, match...)
}

// Samples reads the /metrics of the sidecar listening on listen: the sum
// of every sample of the named metric whose label text contains all of
// match, and whether any did (the benchmark's sidecars read theirs here
// too).
func Samples(listen, name string, match ...string) (sum float64, found bool) {
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
lines:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// keptLogPath is where a sidecar's log is kept: one file per sidecar,
// named by the test and the listen port; a restarted sidecar listens on
// the same port, so each earlier life (whose cleanup runs after the later
// one's) gets a number: name-port.log for the last life, name-port.2.log
// for the one before, and so on.
func keptLogPath(test, listen string) string {
	base := filepath.Join(os.TempDir(), "geo-sidecar-e2e-logs",
		strings.ReplaceAll(test, "/", "_")+"-"+listen[strings.LastIndexByte(listen, ':')+1:])
	keep := base + ".log"
	for i := 2; ; i++ {
		if _, err := os.Stat(keep); errors.Is(err, fs.ErrNotExist) {
			return keep
		}
		keep = fmt.Sprintf("%s.%d.log", base, i)
	}
}
