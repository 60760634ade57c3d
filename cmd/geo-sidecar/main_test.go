package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
		{[]string{"validate"}, exitUsage, "", "-config string"},
		{[]string{"validate", "--help"}, exitOK, "", "Usage: geo-sidecar validate"},
		{[]string{"validate", "--config", good}, exitOK, "ok (", ""},
		{[]string{"validate", "--config", bad}, exitFailed, "", `unknown key "bogus"`},
		{[]string{"validate", "--config", "/does/not/exist"}, exitFailed, "", "/does/not/exist"},
		{[]string{"run", "--config", good, "--log-level", "loud"}, exitUsage, "", "--log-level"},
		{[]string{"status", "--config", good, "--cluster", "nowhere"}, exitFailed, "", `"nowhere"`},
	}
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
