package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain brings up the clusters the suite needs (reusing running ones).
// If they cannot start, the run fails: e2e tests never skip silently.
func TestMain(m *testing.M) {
	names := strings.Fields(os.Getenv("CLUSTERS"))
	if len(names) == 0 {
		names = []string{"east", "west"}
	}
	if err := UpShared(names...); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: test-bed clusters did not start: %v\n", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "geo-sidecar-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	MarkerKeyFile = dir + "/marker.key"
	if err := os.WriteFile(MarkerKeyFile, []byte("e2e-marker-key-0123456789abcdef\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := BuildBinary(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
