package drill

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

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
		`"consumed_after":0,"lost":0,"duplicates":0,"in_step":false,"trailing":0,"in_step_seconds":0,` +
		`"gave_up":false,"waited_seconds":0,"kept":false,` +
		`"rpo":{"measured":false,"messages":0,"entries":0,"seconds":0,"at_least":false,"faults":0,"present_unproven":0,"marked_after_seconds":0},` +
		`"rto":{"reached":false,"seconds":0,"trailing":0},"mode":""}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
}

// TestWaitInStep: the drill calls a subscription in step only at lag 0 on
// every partition; a lag that shrank and holds is reported as trailing;
// one that never moved, or a subscription missing on the target, as given
// up (issue 20, item 6: a drill that resumed while the target trailed by
// 51 entries, which it had since the start, reported "in step after 0.0s"
// and 1,000 duplicates).
func TestWaitInStep(t *testing.T) {
	type step struct {
		at   time.Duration // from this moment on
		from map[string]int64
		to   map[string]int64
	}
	one := func(v int64) map[string]int64 { return map[string]int64{"p0": v} }
	tests := []struct {
		name         string
		steps        []step
		want         inStep
		closestAfter time.Duration // rounded down to the sample period
	}{
		{"caught up", []step{{0, one(10), one(61)}, {2 * time.Second, one(10), one(10)}},
			inStep{inStep: true, trailing: 0, present: 1, partitions: 1}, 2 * time.Second},
		{"closer, then holds", []step{{0, one(10), one(61)}, {time.Second, one(10), one(14)}},
			inStep{trailing: 4, present: 1, partitions: 1}, time.Second},
		{"never moved", []step{{0, one(10), one(61)}},
			inStep{gaveUp: true, trailing: 51, present: 1, partitions: 1}, 0},
		{"missing on the target", []step{{0, one(10), map[string]int64{}}},
			inStep{gaveUp: true, trailing: 0, present: 0, partitions: 1}, 0},
		{"one partition of two missing", []step{{0, map[string]int64{"p0": 0, "p1": 3}, map[string]int64{"p0": 0}}},
			inStep{gaveUp: true, trailing: 0, present: 1, partitions: 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				sample := func() (map[string]int64, map[string]int64, bool) {
					cur := tt.steps[0]
					for _, s := range tt.steps {
						if time.Since(start) >= s.at {
							cur = s
						}
					}
					return cur.from, cur.to, true
				}
				got := waitInStep(context.Background(), sample, "app", func(string, ...any) {}, start, waitLimit)
				closest, waited := got.closestAfter, got.waited
				got.closestAfter, got.waited = 0, 0
				if got != tt.want {
					t.Errorf("waitInStep = %+v, want %+v", got, tt.want)
				}
				if closest < tt.closestAfter || closest > tt.closestAfter+200*time.Millisecond {
					t.Errorf("closest after %v, want %v", closest, tt.closestAfter)
				}
				if waited > waitLimit+200*time.Millisecond {
					t.Errorf("waited %v, more than %v", waited, waitLimit)
				}
			})
		})
	}
}
