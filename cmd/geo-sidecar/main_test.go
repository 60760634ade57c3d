package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/replicator"
)

func TestCommands(t *testing.T) {
	good := filepath.Join("..", "..", "config", "testdata", "good", "full.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("clusters: []\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{nil, exitUsage, "", "Usage:"},
		{[]string{"help"}, exitOK, "Usage:", ""},
		{[]string{"version"}, exitOK, "geo-sidecar", ""},
		{[]string{"nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"validate", "extra"}, exitUsage, "", "-config string"},
		{[]string{"run"}, exitUsage, "", "looked for:\n  $GEO_SIDECAR_CONFIG (not set)\n  "},
		{[]string{"run", "--listen", "9750", "--config", good}, exitUsage, "", `--listen "9750"`},
		{[]string{"validate", "--help"}, exitOK, "", "Usage: geo-sidecar validate"},
		{[]string{"validate", "--config", good}, exitOK, "ok (", ""},
		{[]string{"validate", "--config", bad}, exitFailed, "", `unknown key "bogus"`},
		{[]string{"validate", "--config", "/does/not/exist"}, exitFailed, "", "/does/not/exist"},
		{[]string{"run", "--config", good, "--log-level", "loud"}, exitUsage, "", "--log-level"},
		{[]string{"run", "--config", good, "--pprof", "0.0.0.0:6060"}, exitUsage, "", `--pprof: "0.0.0.0:6060" is reachable from other hosts`},
		{[]string{"run", "--config", good, "--pprof", ":6060"}, exitUsage, "", `--pprof: ":6060" is reachable from other hosts`},
		{[]string{"run", "--config", good, "--pprof", "10.0.0.7:6060"}, exitUsage, "", "loopback only"},
		{[]string{"run", "--config", good, "--pprof", "6060"}, exitUsage, "", "--pprof"},
		{[]string{"status", "--config", good, "--cluster", "nowhere"}, exitFailed, "", `"nowhere"`},
		// verify: 2 whenever it could not verify, the flag or field named.
		{[]string{"verify", "--config", good, "--from", "east", "--to", "west"}, exitUnverified, "", "--topic, --from and --to are required"},
		{[]string{"verify", "--config", good, "--topic", "public/default/orders", "--from", "east", "--to", "east"}, exitUnverified, "", "differ"},
		{[]string{"verify", "--config", good, "--topic", "orders", "--from", "east", "--to", "west"}, exitUnverified, "", `--topic "orders"`},
		{[]string{"verify", "--config", good, "--topic", "public/default/orders", "--from", "east", "--to", "mars"}, exitUnverified, "", `--to "mars"`},
		{[]string{"verify", "--config", good, "--topic", "public/default/other", "--from", "east", "--to", "west"}, exitUnverified, "", "does not copy public/default/other from east to west"},
		{[]string{"verify", "--config", good, "--topic", "public/default/orders", "--from", "east", "--to", "west", "--since", "yesterday"}, exitUnverified, "", `--since "yesterday"`},
		{[]string{"verify", "--config", good, "--topic", "public/default/orders", "--from", "east", "--to", "west", "--window", "0"}, exitUnverified, "", "--window"},
		{[]string{"verify", "--config", bad, "--topic", "public/default/orders", "--from", "east", "--to", "west"}, exitUnverified, "", `unknown key "bogus"`},
		{[]string{"verify", "--help"}, exitOK, "", "Usage: geo-sidecar verify"},
	}
	t.Setenv(configEnv, "")
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, &out, &errb); code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.out)
			}
			if !strings.Contains(errb.String(), tt.err) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.err)
			}
		})
	}
}

// TestConfigLookup: without --config, $GEO_SIDECAR_CONFIG and then the
// default paths are tried; when none is there, each is named.
func TestConfigLookup(t *testing.T) {
	good, err := filepath.Abs(filepath.Join("..", "..", "config", "testdata", "good", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	saved := configPaths
	t.Cleanup(func() { configPaths = saved })
	configPaths = []string{"geo-sidecar.yaml", filepath.Join(dir, "etc", "config.yaml")}

	var out, errb bytes.Buffer
	t.Setenv(configEnv, "")
	if code := run([]string{"validate"}, &out, &errb); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, errb.String())
	}
	for _, want := range []string{"$GEO_SIDECAR_CONFIG (not set)", filepath.Join(dir, "geo-sidecar.yaml") + " (does not exist)",
		filepath.Join(dir, "etc", "config.yaml") + " (does not exist)", "--config FILE"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}

	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "geo-sidecar.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"validate"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "geo-sidecar.yaml: ok") {
		t.Errorf("./geo-sidecar.yaml: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}

	t.Setenv(configEnv, filepath.Join(dir, "missing.yaml"))
	errb.Reset()
	if code := run([]string{"validate"}, &out, &errb); code != exitFailed || !strings.Contains(errb.String(), "missing.yaml") {
		t.Errorf("$%s names a missing file: exit %d, stderr %q (want that file named, not another picked)", configEnv, code, errb.String())
	}
}

// TestStatusPartitions: a non-partitioned topic (Pulsar's 0 partitions)
// shows "-" and one cursor; a partitioned one its count.
func TestStatusPartitions(t *testing.T) {
	var b bytes.Buffer
	PrintStatus(&b, []replicator.PairStatus{
		{Source: "east", Target: "west", Topic: "t/n/plain", Partitions: 0, Connected: 1},
		{Source: "east", Target: "west", Topic: "t/n/parted", Partitions: 4, Connected: 3},
	})
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[1]); len(f) < 5 || f[3] != "-" || f[4] != "1/1" {
		t.Errorf("non-partitioned row %q: want PARTITIONS - and CONNECTED 1/1", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 5 || f[3] != "4" || f[4] != "3/4" {
		t.Errorf("partitioned row %q: want PARTITIONS 4 and CONNECTED 3/4", lines[2])
	}
}

// TestDockerfileBuildsLikeMake keeps the Dockerfile's build command the
// same as `make build` (no Docker engine here to run it): same
// environment, flags and package; only the version string and the output
// path differ.
func TestDockerfileBuildsLikeMake(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	mk := regexp.MustCompile(`(?m)^BUILD\s*:=\s*(.+)$`).FindStringSubmatch(read("Makefile"))
	df := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=\S+ go build .+) -o \S+ (\./cmd/geo-sidecar)$`).FindStringSubmatch(read("Dockerfile"))
	if mk == nil || df == nil {
		t.Fatalf("build command not found (Makefile: %v, Dockerfile: %v)", mk != nil, df != nil)
	}
	version := regexp.MustCompile(`main\.version=\S+?"`)
	norm := func(s string) string { return version.ReplaceAllString(strings.TrimSpace(s), `main.version=V"`) }
	if a, b := norm(mk[1]), norm(df[1]); a != b {
		t.Errorf("Makefile builds with\n  %s\nDockerfile with\n  %s", a, b)
	}
	if !strings.Contains(read("Makefile"), "$(BUILD) -o $(BIN) ./cmd/geo-sidecar") {
		t.Error("make build no longer builds ./cmd/geo-sidecar with $(BUILD)")
	}
}

func TestCheckPprofAddr(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"", true},
		{"127.0.0.1:6060", true},
		{"[::1]:6060", true},
		{"localhost:6060", true},
		{"127.0.0.2:0", true},
		{":6060", false},
		{"0.0.0.0:6060", false},
		{"[::]:6060", false},
		{"192.168.1.4:6060", false},
		{"pod.example:6060", false},
		{"127.0.0.1", false},
	} {
		if err := checkPprofAddr(tt.addr); (err == nil) != tt.ok {
			t.Errorf("checkPprofAddr(%q) = %v, want ok %v", tt.addr, err, tt.ok)
		}
	}
}
