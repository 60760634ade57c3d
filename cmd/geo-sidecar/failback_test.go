package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailbackRefusesBeforeConnecting: usage errors and what the config
// rules out exit 2 before any cluster is dialled (these do not exist).
func TestFailbackRefusesBeforeConnecting(t *testing.T) {
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
	nsBase := []string{"--config", cfg, "--namespace", "shop/orders", "--from", "east", "--to", "west", "--leave"}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--from", "east"}, exitUnverified, "--to are required"},
		{[]string{"--from", "east", "--to", "east"}, exitUnverified, "--from and --to differ"},
		{[]string{"--from", "east", "--to", "west", "--replay", "--leave"}, exitUnverified, "choose one"},
		{[]string{"--from", "east", "--to", "west", "--park", "shop/orders/aside", "--leave"}, exitUnverified, "choose one"},
		{[]string{"--from", "east", "--to", "west", "--park", "shop/orders/orders"}, exitUnverified, "the topic itself"},
		{[]string{"--from", "east", "--to", "west", "--park", "aside"}, exitUnverified, "want tenant/namespace/topic"},
		{[]string{"--from", "east", "--to", "west", "--park", "shop/orders/aside", "--park-on", "north"}, exitUnverified, `--park-on "north"`},
		{[]string{"--from", "west", "--to", "east", "--leave"}, exitUnverified, "does not copy shop/orders/orders from west to east"},
		{[]string{"--from", "east", "--to", "west", "--leave", "--subscription", "billing"}, exitUnverified, "the pair west→east"},
		{[]string{"--from", "east", "--to", "north", "--leave"}, exitUnverified, `--to "north": no such cluster`},
		{[]string{"--from", "east", "--to", "west", "--leave", "--quiet", "-1s"}, exitUnverified, "must not be negative"},
		{[]string{"--from", "east", "--to", "west", "--leave", "--namespace", "shop/orders"}, exitUnverified, "--topic (or --namespace)"},
		{[]string{"--from", "east", "--to", "west", "--leave", "--topic-pattern", "o.*"}, exitUnverified, "--topic-pattern narrows --namespace"},
		{[]string{"--from", "east", "--to", "west", "--leave", "--parallel", "0"}, exitUnverified, "--parallel must be at least 1"},
		{[]string{"--from", "east", "--to", "west", "--leave", "--topic", "shop/orders/returns"}, exitUnverified, "does not copy shop/orders/returns from east to west"},
		{[]string{"--from", "east", "--to", "west", "--leave", "--topic", "shop/orders/orders,bad"}, exitUnverified, `"bad": want tenant/namespace/topic`},
		{[]string{"--from", "east", "--to", "west", "--park", "shop/orders/aside", "--topic", "shop/orders/aside"}, exitUnverified, "the topic itself"},
		{[]string{"--help"}, exitOK, "-replay"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(append(append([]string{"failback"}, base...), tc.args...), &out, &errb); code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.err) {
				t.Errorf("stderr %q, want it to say %q", errb.String(), tc.err)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--topic-pattern", "orders("}, `--topic-pattern "orders("`},
		{[]string{"--namespace", "shop"}, `--namespace "shop": want tenant/namespace`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(append(append([]string{"failback"}, nsBase...), tc.args...), &out, &errb); code != exitUnverified {
				t.Errorf("exit %d, want %d\n%s", code, exitUnverified, errb.String())
			}
			if !strings.Contains(errb.String(), tc.err) {
				t.Errorf("stderr %q, want it to say %q", errb.String(), tc.err)
			}
		})
	}
}
