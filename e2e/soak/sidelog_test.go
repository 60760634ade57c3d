package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestScanCounted: the counted sends are found among the log's JSON
// lines (the soak's own start lines and other messages skipped), and a
// duplicate finding names those of its stream.
func TestScanCounted(t *testing.T) {
	log := `==== soak: start west-a at 2026-12-07T18:20:39Z
{"level":"info","ts":"2026-12-07T18:21:47.448Z","logger":"replicator","msg":"consumer reconnected","source":"west","target":"east","partition":"persistent://t/ns/single"}
{"level":"warn","ts":"2026-12-07T18:21:57.342Z","logger":"replicator","msg":"` + msgCounted + `","source":"west","target":"east","namespace":"t/ns","partition":"persistent://t/ns/single","id":"46:5185","floor":197568500842}
not json at all
{"level":"warn","ts":"2026-12-07T18:22:57.342Z","logger":"replicator","msg":"` + msgCounted + `","source":"west","target":"east","namespace":"t/ns","partition":"persistent://t/ns/plain","id":"47:1","floor":1}
`
	cs, err := scanCounted("west-a", strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ID != "46:5185" || cs[0].Instance != "west-a" || cs[0].Source != "west" || cs[0].Target != "east" ||
		cs[0].Partition != "persistent://t/ns/single" || !cs[0].At.Equal(time.Date(2026, 12, 7, 18, 21, 57, 342e6, time.UTC)) {
		t.Fatalf("got %+v", cs)
	}
	dup := Finding{Stream: Stream{"east", "persistent://t/ns/single", "west", "west-single"}, Kind: Duplicate, Count: 20}
	if got := countedFor(dup, cs); len(got) != 1 || got[0].ID != "46:5185" {
		t.Errorf("for the duplicate: %+v", got)
	}
	other := Finding{Stream: Stream{"west", "persistent://t/ns/single", "east", "east-single"}, Kind: Duplicate}
	if got := countedFor(other, cs); len(got) != 0 {
		t.Errorf("for the other direction: %+v", got)
	}

	t0 := time.Date(2026, 12, 7, 18, 20, 39, 0, time.UTC)
	res := &Result{Start: t0, Findings: []Finding{dup, {Stream: dup.Stream, Kind: Lost, Count: 1}}, Counted: cs}
	var b bytes.Buffer
	WriteReport(&b, Options{}, res)
	want := "known gap: the sidecar sent 1 entries of this partition under a counted sequence id (its read-back did not find their copies: up to 100,100 entries back from the target's end, or no copy older than its start; docs/guarantees.md, Duplicates), first 46:5185 at +1m18.3s by west-a"
	if strings.Count(b.String(), want) != 1 {
		t.Errorf("report names the counted sends %d times, want once (the duplicate, not the loss):\n%s", strings.Count(b.String(), want), b.String())
	}
}
