package verify

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// TestKeptSameVerdicts: a comparison that holds source content and
// compares copies byte for byte (Config.KeptBytes, the continuous
// verifier's) reaches the verdicts of one that hashes everything, on real
// entries and copies, whatever it holds: plenty, one entry's worth, none
// (let go at once), and with a Release after every target entry (a walk
// ending anywhere). Faults are mixed in at random: divergent copies,
// duplicates (same and other bytes), missing entries, copies out of
// order, unsigned claims, entries not forwarded.
func TestKeptSameVerdicts(t *testing.T) {
	mb := wire.MetadataBuilder{ProducerName: "app", PublishTime: 1_700_000_000_000}
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		const n = 40
		var src []wire.Entry
		for i := range n {
			m := mb
			m.SequenceID = uint64(i)
			if r.IntN(10) == 0 {
				m.ReplicatedFrom = "north" // a copy from elsewhere: not forwarded
			}
			p := make([]byte, 1+r.IntN(300))
			for j := range p {
				p[j] = byte(r.IntN(256))
			}
			src = append(src, wire.Entry{ID: wire.MessageID{Ledger: 5, Entry: uint64(i)}, Metadata: m.Append(nil), Payload: p, NumMessages: 1})
		}
		var tgt []wire.Entry
		var script []string
		add := func(c wire.Entry, what string) {
			c.ID = wire.MessageID{Ledger: 77, Entry: uint64(len(tgt))}
			tgt = append(tgt, c)
			script = append(script, what)
		}
		for i := 0; i < n; i++ {
			e := src[i]
			switch k := r.IntN(20); {
			case k == 0: // missing
				script = append(script, fmt.Sprintf("-%d", i))
			case k == 1: // divergent
				c := forward(t, e, testKeys, part, nil)
				c.Payload = append([]byte{^e.Payload[0]}, e.Payload[1:]...)
				add(c, fmt.Sprintf("x%d", i))
			case k == 2: // duplicated, then maybe a second copy with other bytes
				add(forward(t, e, testKeys, part, nil), fmt.Sprintf("c%d", i))
				add(forward(t, e, testKeys, part, nil), fmt.Sprintf("d%d", i))
				if r.IntN(2) == 0 {
					c := forward(t, e, testKeys, part, nil)
					c.Payload = append([]byte{^e.Payload[0]}, e.Payload[1:]...)
					add(c, fmt.Sprintf("dx%d", i))
				}
			case k == 3 && i+1 < n: // the next one first
				add(forward(t, src[i+1], testKeys, part, nil), fmt.Sprintf("c%d", i+1))
				add(forward(t, e, testKeys, part, nil), fmt.Sprintf("c%d", i))
				i++
			case k == 4: // signed under another key: proves nothing
				add(forward(t, e, marker.NewKeys([]byte("another key of at least 32 bytes!")), part, nil), fmt.Sprintf("u%d", i))
			default:
				add(forward(t, e, testKeys, part, nil), fmt.Sprintf("c%d", i))
			}
		}
		run := func(kept int, hold, release bool) string {
			c := New(Config{Window: 16, Deferred: 4, Authenticated: true, MaxFindings: 100, FromEarliest: true, KeptBytes: kept})
			next := 0
			for _, e := range tgt {
				tg := targetOf(e, testKeys, part, "east", "west", hold)
				for c.Wants(tg) {
					if next == len(src) {
						c.SourceDone()
						break
					}
					c.AddSource(sourceOf(src[next], "west", hold))
					next++
				}
				c.AddTarget(tg)
				if c.keptTotal > max(kept, 0)+400 { // at most one entry over
					t.Fatalf("seed %d: %d bytes of content held, budget %d", seed, c.keptTotal, kept)
				}
				if release {
					if c.Release(); c.keptTotal != 0 {
						t.Fatalf("seed %d: %d bytes of content held after Release", seed, c.keptTotal)
					}
				}
			}
			for ; next < len(src); next++ {
				c.AddSource(sourceOf(src[next], "west", hold))
			}
			res := c.Finish()
			b := brief(res)
			for _, f := range res.Findings { // kinds and positions, not details
				b += fmt.Sprintf(" %s@%d", f.Kind, f.Origin.Entry)
			}
			return b
		}
		want := run(0, false, false)
		for _, m := range []struct {
			name    string
			kept    int
			release bool
		}{{"plenty", 1 << 20, false}, {"one entry's worth", 200, false}, {"none", 0, false}, {"released after every copy", 1 << 20, true}} {
			if got := run(m.kept, true, m.release); got != want {
				t.Errorf("seed %d, held content (%s):\n got %s\nwant %s\nscript %s", seed, m.name, got, want, strings.Join(script, " "))
			}
		}
	}
}
