package e2e

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/subscription/drill"
)

// TestFailoverDrillExact: geo-sidecar drill --exact, on the test bed's
// north and west replicating both ways (the drill publishes in both
// regions, so north's subscription consumed copies of west's messages
// too): at the switch the drill's subscription is moved to west with
// switchover's plan (mark-delete position and acknowledgements past it,
// once the copy is proven) instead of followed to the newest snapshot,
// and the drill's consumer on west then receives nothing again and
// misses nothing, for a Shared subscription (acknowledged in shuffled
// windows) and an Exclusive one. (The drill publishes batched, 20 a
// tick a region, and consumes half of what it published: it stops at a
// batch's end, so that "nothing again" holds per message, not only per
// entry.) Before the move, what the follow had left on west would have
// delivered about 50 entries again.
func TestFailoverDrillExact(t *testing.T) {
	if err := Up(home); err != nil {
		t.Fatal(err)
	}
	UseClusters(t, home, "west")
	awaitClusters(t, home, "west")
	for _, typ := range []string{"shared", "exclusive"} {
		t.Run(typ, func(t *testing.T) {
			ns := NewNamespace(t, home, "west")
			s := StartSidecar(t, []string{home, "west"}, syncEntriesWith(ns, drillPatterns, home, "west"))
			rep := runDrill(t, s.ConfigPath, ns+"/orders", "", home, "west", "--type", typ, "--messages", "2000", "--exact")
			sr := rep.Switchover
			t.Logf("drill --exact %s: published %d, before %d, after %d, lost %d, delivered again %d; in step %v after %.1fs (RTO %+v); switchover %+v",
				typ, rep.Published, rep.ConsumedBefore, rep.ConsumedAfter, rep.Lost, rep.Duplicates, rep.InStep, rep.InStepSeconds, rep.RTO, sr)
			if rep.Mode != drill.ModeExact || sr == nil {
				t.Fatalf("mode %q, switchover report %v: the exact move did not run", rep.Mode, sr)
			}
			for _, r := range sr.Results {
				t.Logf("  %s %s: %s; %s: source %s, west before %s after %s, mark-delete to %q, %d individually",
					r.Partition, r.Subscription, r.Outcome, r.Detail, r.Source, r.TargetBefore, r.TargetAfter, r.MovedMarkDelete, r.Individually)
			}
			if rep.Lost != 0 || rep.Duplicates != 0 || !rep.InStep || rep.GaveUp || sr.Again != 0 || sr.Missed != 0 || sr.Refused != 0 {
				t.Errorf("drill --exact %s: lost %d, delivered again %d, in step %v, gave up %v; switchover again %d, missed %d, refused %d: want 0, 0, true, false, 0, 0, 0",
					typ, rep.Lost, rep.Duplicates, rep.InStep, rep.GaveUp, sr.Again, sr.Missed, sr.Refused)
			}
			if rep.ConsumedBefore+rep.ConsumedAfter != rep.Published {
				t.Errorf("consumed %d before and %d after of %d published", rep.ConsumedBefore, rep.ConsumedAfter, rep.Published)
			}
		})
	}
}
