package entrypath

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
)

// Tests written against the mutants that survived `make mutate` in the
// data path (.ci/mutation.md): each pins a behaviour no other test did.

// runSessions restarts at once after a standby, a redelivery or a change of
// epoch, backs off after a failure, and warns once per distinct error.
func TestRunSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.WarnLevel)
		boom, bang := errors.New("boom"), errors.New("bang")
		results := []error{errStandby, errRedelivered, errEpochChanged, boom, boom, bang}
		var at []time.Duration
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		session := func(context.Context) (bool, error) {
			at = append(at, time.Since(start))
			if len(at) > len(results) {
				cancel()
				return false, nil
			}
			return false, results[len(at)-1]
		}
		if err := runSessions(ctx, zap.New(core), metrics.New(nil), "east", "west", session); err != nil {
			t.Fatal(err)
		}
		if at[1] != 0 || at[2] != 0 || at[3] != 0 {
			t.Errorf("sessions after a standby, a redelivery and a change of epoch started at %v, %v, %v, want at once", at[1], at[2], at[3])
		}
		if at[4] < 100*time.Millisecond {
			t.Errorf("session after a failure started after %v, want a backoff", at[4]-at[3])
		}
		if n := logs.Len(); n != 2 {
			t.Errorf("%d warnings for errors boom, boom, bang; want 2 (one per distinct error)", n)
		}
	})
}
