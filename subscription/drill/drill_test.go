package drill

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// TestRunRefusesBeforeConnecting: what the options and the config rule out
// is refused before Run dials any cluster; once they pass, a failed dial
// ends the drill before anything is created.
func TestRunRefusesBeforeConnecting(t *testing.T) {
	kept := `, subscription_patterns: ["geo-sidecar-drill-.*"]`
	dialFails := errors.New("dial: connection refused")
	tests := []struct {
		name, subs string
		o          Options
		dials      bool
		want       string
	}{
		{"type", kept, Options{Topic: "shop/orders/geo-sidecar-drill", From: "east", To: "west", Type: "fifo"}, false,
			`--type "fifo": want exclusive, failover, shared or key_shared`},
		{"topic", kept, Options{Topic: "orders", From: "east", To: "west", Type: "exclusive"}, false,
			`--topic "orders": want tenant/namespace/topic`},
		{"not kept", "", Options{Topic: "persistent://shop/orders/geo-sidecar-drill", From: "east", To: "west", Type: "exclusive"}, false,
			`add subscription_patterns: ["geo-sidecar-drill-.*"] to replication[0]`},
		{"not replicated", kept, Options{Topic: "shop/orders/payments", From: "east", To: "west", Type: "shared"}, false,
			"the config does not replicate shop/orders/payments from east to west"},
		{"own cursor", `, subscription_patterns: [".*"]`, Options{Topic: "shop/orders/orders", Subscription: "geo-sidecar.repl.west",
			From: "east", To: "west", Type: "exclusive"}, false, "geo-sidecar's own cursors"},
		{"dial fails", kept, Options{Topic: "shop/orders/geo-sidecar-drill", From: "east", To: "west", Type: "Key_Shared"}, true,
			dialFails.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dialed := 0
			tt.o.Dial = func(config.Cluster) (pulsar.Client, pulsaradmin.Client, error) {
				dialed++
				return nil, nil, dialFails
			}
			rep, err := Run(t.Context(), drillConfig(t, tt.subs), tt.o, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
			if rep.Complete() {
				t.Error("a drill that failed reports Complete")
			}
			if got := dialed > 0; got != tt.dials {
				t.Errorf("dialed %d times, want dialing: %v", dialed, tt.dials)
			}
		})
	}
}

// TestReportJSON: the field names are what geo-sidecar drill --json
// prints and scripts read; complete is not one of them.
func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(Report{complete: true})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"topic":"","subscription":"","type":"","from":"","to":"","published":0,"consumed_before":0,` +
		`"consumed_after":0,"lost":0,"duplicates":0,"in_step_seconds":0,"in_step":false,"kept":false}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
}
