package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSwitchoverRefusesBeforeConnecting: usage errors and what the config
// rules out exit 2 before any cluster is dialled (these do not exist).
func TestSwitchoverRefusesBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "geo.yaml")
	y := "clusters:\n" +
		"  - {name: east, service_url: pulsar://127.0.0.1:1, admin_url: http://127.0.0.1:1}\n" +
		"  - {name: west, service_url: pulsar://127.0.0.1:2, admin_url: http://127.0.0.1:2}\n" +
		"replication:\n" +
		"  - {source: east, namespace: shop/orders, topics: [orders], targets: [west]}\n"
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--config", cfg, "--topic", "shop/orders/orders"}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--from", "east", "--to", "west"}, exitUnverified, "--subscription are required"},
		{[]string{"--from", "east", "--to", "east", "--subscription", "billing"}, exitUnverified, "--from and --to differ"},
		{[]string{"--from", "west", "--to", "east", "--subscription", "billing"}, exitUnverified, "does not copy shop/orders/orders from west to east"},
		{[]string{"--from", "east", "--to", "north", "--subscription", "billing"}, exitUnverified, `--to "north": no such cluster`},
		{[]string{"--from", "east", "--to", "west", "--subscription", "geo-sidecar.repl.west"}, exitUnverified, "the sidecar's own"},
		{[]string{"--from", "east", "--to", "west", "--subscription", "billing,pulsar.repl.west"}, exitUnverified, "or Pulsar's cursor"},
		{[]string{"--from", "east", "--to", "west", "--subscription", "billing", "--quiet", "-1s"}, exitUnverified, "must not be negative"},
		{[]string{"--help"}, exitOK, "-dry-run"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(append(append([]string{"switchover"}, base...), tc.args...), &out, &errb); code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.err) {
				t.Errorf("stderr %q, want it to say %q", errb.String(), tc.err)
			}
		})
	}
}
