package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
	"github.com/geo-sidecar/geo-sidecar/subscription/drill"
)

// TestDrillRefusesBeforeConnecting: usage errors exit 2, and what the
// config rules out is refused (exit 1, saying what to change) before the
// drill connects to any cluster (the clusters here do not exist).
func TestDrillRefusesBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	// A marker key, which keeping subscriptions in step needs.
	key := filepath.Join(dir, "marker.key")
	if err := os.WriteFile(key, []byte("drill-test-key-0123456789abcdef0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, subs string) string {
		y := "sidecar: {marker_key_file: \"" + key + "\"}\n" +
			"clusters:\n" +
			"  - {name: east, service_url: pulsar://127.0.0.1:1, admin_url: http://127.0.0.1:1}\n" +
			"  - {name: west, service_url: pulsar://127.0.0.1:2, admin_url: http://127.0.0.1:2}\n" +
			"replication:\n" +
			"  - {source: east, namespace: shop/orders, topics: [geo-sidecar-drill], targets: [west]" + subs + "}\n"
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noSubs, billing := write("none.yaml", ""), write("billing.yaml", ", subscriptions: [billing]")
	tests := []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--config", noSubs, "--topic", "shop/orders/geo-sidecar-drill", "--from", "east", "--to", "west"}, exitFailed,
			`add subscription_patterns: ["geo-sidecar-drill-.*"] to replication[0]`},
		{[]string{"--config", billing, "--topic", "shop/orders/geo-sidecar-drill", "--from", "east", "--to", "west"}, exitFailed,
			"is not kept in step from east to west"},
		{[]string{"--config", billing, "--topic", "shop/orders/orders", "--from", "east", "--to", "west"}, exitFailed,
			"does not replicate shop/orders/orders"},
		{[]string{"--config", billing, "--topic", "shop/orders/geo-sidecar-drill", "--from", "east", "--to", "east"}, exitUsage,
			"--from and --to differ"},
		{[]string{"--config", billing, "--topic", "shop/orders/geo-sidecar-drill", "--from", "east"}, exitUsage,
			"--to are required"},
		{[]string{"--config", billing, "--topic", "shop/orders/geo-sidecar-drill", "--from", "east", "--to", "west", "--help"}, exitOK,
			"-allow-other-subscriptions"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[2:], " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := cmdDrill(tt.args, &out, &errb); code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out.String(), errb.String())
			}
			if !strings.Contains(errb.String(), tt.err) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.err)
			}
		})
	}
}

func TestPrintDrill(t *testing.T) {
	r := drill.Report{Topic: "persistent://shop/orders/geo-sidecar-drill", Subscription: "geo-sidecar-drill-0123abcd", Type: "exclusive",
		From: "east", To: "west", Published: 1000, ConsumedBefore: 500, ConsumedAfter: 512, Duplicates: 12, InStepSeconds: 1.24, InStep: true,
		RPO: drill.RPO{Measured: true, MarkedAfter: 0.12, Since: "2026-12-06T03:00:00Z"}, RTO: drill.RTO{Reached: true, Seconds: 1.24}}
	const rpo0 = "  RPO                  0 messages, 0s: west held a proven copy of everything east held at the switch (ends taken 0.1s after it; read from 2026-12-06T03:00:00Z)\n"
	const rto = "  RTO                  1.2s from the switch until the subscription in west was ready to resume on\n"
	const want = `
failover drill east -> west on persistent://shop/orders/geo-sidecar-drill, subscription geo-sidecar-drill-0123abcd (exclusive)
  published            1000
  consumed before      500 (in east)
  consumed after       512 (in west)
  lost                 0
  duplicates           12
` + rpo0 + `  in step after        1.2s
` + rto
	tests := []struct {
		name string
		edit func(*drill.Report)
		want string
	}{
		{"in step", func(*drill.Report) {}, want},
		{"as close as it got", func(r *drill.Report) { r.InStep, r.Trailing = false, 51 },
			strings.Replace(want, "  in step after        1.2s\n",
				"  in step              no: trailing by 51 backlog entries on west after 1.2s, as close as the newest snapshot allows (a switch delivers them again)\n", 1)},
		{"gave up", func(r *drill.Report) {
			r.InStep, r.GaveUp, r.Trailing, r.WaitedSeconds = false, true, 51, 15.2
			r.RTO = drill.RTO{Seconds: 15.2, Trailing: 51}
		}, strings.Replace(strings.Replace(want, "  in step after        1.2s\n",
			"  in step              no: gave up waiting after 15s, the subscription on west trailing by 51 backlog entries (resumed all the same)\n", 1),
			rto, "  RTO                  not reached: the drill gave up waiting for the subscription in west 15s after the switch\n", 1)},
		{"RPO", func(r *drill.Report) {
			r.RPO = drill.RPO{Measured: true, Messages: 500, Entries: 37, Seconds: 4.96, MarkedAfter: 0.12, Since: "2026-12-06T03:00:00Z"}
		}, strings.Replace(want, rpo0,
			"  RPO                  500 messages (37 entries), 5.0s of traffic: what east held at the switch and west did not (ends taken 0.1s after it; read from 2026-12-06T03:00:00Z)\n", 1)},
		{"RPO at least, with faults", func(r *drill.Report) {
			r.RPO = drill.RPO{Measured: true, Messages: 2, Entries: 2, Seconds: 0.5, AtLeast: true, Faults: 1, MarkedAfter: 3.04, Since: "2026-12-06T03:00:00Z"}
		}, strings.Replace(want, rpo0,
			"  RPO                  at least 2 messages (2 entries), 0.5s of traffic: what east held at the switch and west did not (ends taken 3.0s after it; read from 2026-12-06T03:00:00Z)\n"+
				"  copy faults          1 missing, duplicated, divergent or out of order: run geo-sidecar verify --topic persistent://shop/orders/geo-sidecar-drill --from east --to west\n", 1)},
		{"copies held but unproven", func(r *drill.Report) {
			r.RPO = drill.RPO{Measured: true, Unproven: 50, MarkedAfter: 0.12, Since: "2026-12-06T03:00:00Z"}
		}, strings.Replace(want, rpo0,
			"  RPO                  0 messages, 0s: west held a copy of everything east held at the switch, 50 entries of it unproven (ends taken 0.1s after it; read from 2026-12-06T03:00:00Z)\n"+
				"  unproven copies      50 entries: west holds their bytes, but under origin signatures no configured marker key verifies (another key, or forged); held, so not in the RPO: run geo-sidecar verify --topic persistent://shop/orders/geo-sidecar-drill --from east --to west\n", 1)},
		{"RPO not measured", func(r *drill.Report) { r.RPO = drill.RPO{Error: "east: last entry: closed"} },
			strings.Replace(want, rpo0, "  RPO                  not measured: east: last entry: closed\n", 1)},
		{"kept", func(r *drill.Report) { r.Kept = true }, want +
			"  subscription         kept on east and west (--keep); delete it with pulsar-admin topics unsubscribe " +
			"persistent://shop/orders/geo-sidecar-drill --subscription geo-sidecar-drill-0123abcd\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := r
			tt.edit(&r)
			var b bytes.Buffer
			printDrill(&b, r)
			if b.String() != tt.want {
				t.Errorf("printed\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

// TestProofs: what the drill's RPO takes from a verify report: per
// partition, what the target does not hold (not what lies past
// verified-through: copies after a gap, and copies present but unproven,
// are held) and the publish times that date it (none for a partition
// with nothing proven, or nothing not held); copies present but
// unproven apart from the copy faults.
func TestProofs(t *testing.T) {
	ms := func(v int64) time.Time { return time.UnixMilli(v) }
	rep := verify.Report{Partitions: []verify.PartitionReport{
		{Partition: "p0", Result: verify.Result{Through: &verify.Through{PublishTime: 1000}}},
		{Partition: "p1", Result: verify.Result{Through: &verify.Through{PublishTime: 1000}, Missing: 1, Divergent: 1,
			Unproven: verify.Unproven{Entries: 3, Messages: 30, FirstPublishTime: 1100, LastPublishTime: 2400},
			NotHeld:  verify.Unproven{Entries: 2, Messages: 20, FirstPublishTime: 1100, LastPublishTime: 1700}}},
		{Partition: "p2", Result: verify.Result{
			Unproven: verify.Unproven{Entries: 1, Messages: 5, FirstPublishTime: 900, LastPublishTime: 900},
			NotHeld:  verify.Unproven{Entries: 1, Messages: 5, FirstPublishTime: 900, LastPublishTime: 900}}},
		{Partition: "p3", Result: verify.Result{PresentUnproven: 50,
			Unproven: verify.Unproven{Entries: 100, Messages: 2000, FirstPublishTime: 900, LastPublishTime: 2900}}},
	}}
	want := []drill.Proof{
		{Partition: "p0", Through: ms(1000)},
		{Partition: "p1", Through: ms(1000), Entries: 2, Messages: 20, First: ms(1100), Last: ms(1700), Faults: 2},
		{Partition: "p2", Entries: 1, Messages: 5, First: ms(900), Last: ms(900)},
		{Partition: "p3", Unproven: 50},
	}
	if got := proofs(rep); !reflect.DeepEqual(got, want) {
		t.Errorf("proofs\n%+v\nwant\n%+v", got, want)
	}
}
