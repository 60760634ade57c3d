package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/subscription/switchover"
)

// fakeSwitcher answers errs in turn, then rep.
type fakeSwitcher struct {
	errs  []error
	rep   switchover.Report
	tries int
}

func (f *fakeSwitcher) Switch(_ context.Context, _ string, progress io.Writer) (switchover.Report, error) {
	f.tries++
	fmt.Fprintf(progress, "try %d\n", f.tries)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return switchover.Report{}, err
	}
	return f.rep, nil
}

func (f *fakeSwitcher) Close() {}

// TestExactSwitch: the exact drill calls the subscription in step only
// when the switchover ran and left nothing to receive again, miss or
// refuse; it tries again while the copy is not proven yet (or the
// drill's consumer or producers still show), within the wait, and gives
// up on any other error at once.
func TestExactSwitch(t *testing.T) {
	clean := switchover.Report{Proven: true, Results: []switchover.Result{{Outcome: switchover.Moved}}}
	holes := clean
	holes.Again = 7
	for _, tc := range []struct {
		name      string
		sw        fakeSwitcher
		limit     time.Duration
		inStep    bool
		gaveUp    bool
		trailing  int64
		tries     int
		reportSet bool
	}{
		{"moved at once", fakeSwitcher{rep: clean}, time.Minute, true, false, 0, 1, true},
		{"the copy proven on the third try", fakeSwitcher{errs: []error{switchover.ErrNotProven, switchover.ErrConsumers}, rep: clean},
			time.Minute, true, false, 0, 3, true},
		{"moved, but some would be received again", fakeSwitcher{rep: holes}, time.Minute, false, false, 7, 1, true},
		{"never proven within the wait", fakeSwitcher{errs: []error{switchover.ErrNotProven, switchover.ErrNotProven,
			switchover.ErrNotProven, switchover.ErrNotProven}, rep: clean}, 1200 * time.Millisecond, false, true, 0, 3, true},
		{"another error: no retry", fakeSwitcher{errs: []error{errors.New("internal stats: 500")}, rep: clean}, time.Minute, false, true, 0, 1, true},
	} {
		// In a bubble (synctest): with real time, a loaded machine let
		// only two tries fit in the 1.2 s wait.
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rep Report
				sw := tc.sw
				lines := 0
				say := func(string, ...any) { lines++ }
				exactSwitch(context.Background(), &rep, time.Now(), nil, &sw, Options{InStepWait: tc.limit}, "app", say)
				if rep.InStep != tc.inStep || rep.GaveUp != tc.gaveUp || rep.Trailing != tc.trailing || sw.tries != tc.tries {
					t.Errorf("in step %v, gave up %v, trailing %d after %d tries; want %v, %v, %d after %d",
						rep.InStep, rep.GaveUp, rep.Trailing, sw.tries, tc.inStep, tc.gaveUp, tc.trailing, tc.tries)
				}
				if (rep.Switchover != nil) != tc.reportSet {
					t.Errorf("switchover report %v", rep.Switchover)
				}
				if rep.RTO.Reached != !tc.gaveUp {
					t.Errorf("RTO %+v, want reached %v", rep.RTO, !tc.gaveUp)
				}
				if lines < tc.tries {
					t.Errorf("%d progress lines for %d tries", lines, tc.tries)
				}
			})
		})
	}
}
