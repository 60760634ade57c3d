package subsync

import (
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// FuzzCopyMapLookup feeds the copy map any sequence of entries read (the
// remote's copies with any origin, in any order, read again, this side's
// own entries, takeovers) and looks up any list of ranges. Whatever it
// is fed, every entry a lookup returns was fed as a copy of an entry
// inside one of the ranges (after its From, up to its To): an entry here
// is acknowledged only as the copy of an entry the remote's subscription
// acknowledged, never one of this side's own, never a copy of an entry
// outside the ranges. The list is in this partition's order, without
// repeats, and no longer than the bound, whatever the remote's
// mark-delete position it is given.
func FuzzCopyMapLookup(f *testing.F) {
	f.Add([]byte{1, 1, 1, 1, 0x80, 1, 1}, []byte{0, 2, 3, 4})
	f.Add([]byte{1, 1, 0x40, 1, 0, 1, 2, 0xc0, 1}, []byte{0, 9})
	f.Add([]byte{3, 1, 0, 0, 5, 0x20, 1}, []byte{1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, feed, ranges []byte) {
		var m copyMap
		fed := map[marker.Position]marker.Position{} // every copy fed: here → origin
		dst, src := pos(3, 0), pos(5, 0)
		for i := 0; i+1 < len(feed); i += 2 {
			op, n := feed[i], int64(feed[i+1]&0x0f)
			switch {
			case op == 0xff:
				m.reset() // a takeover
				continue
			case op == 0xfe:
				if _, ok := fed[dst]; !ok {
					fed[dst] = src
				}
				m.add(dst, src) // the last entry read again (a new session)
				continue
			case op&0x80 != 0:
				dst.Entry += n // entries of this side's own, or read again (n 0)
				continue
			}
			if op&0x40 != 0 {
				dst = pos(dst.Ledger+1, 0) // a new ledger here
			} else {
				dst.Entry += int64(op&0x03) + 1
			}
			switch {
			case op&0x20 != 0:
				src = pos(src.Ledger+1, n-1) // a new ledger there
			case op&0x10 != 0:
				src.Entry -= n // an older origin (published again, stored twice)
			default:
				src.Entry += n // n 0: the same origin again
			}
			if _, ok := fed[dst]; !ok {
				fed[dst] = src
			}
			m.add(dst, src)
		}
		// Ranges in order and apart, as a marker carries them.
		var acked []marker.Range
		at := pos(5, -1)
		for i := 0; i+1 < len(ranges); i += 2 {
			from := marker.Position{Ledger: at.Ledger + int64(ranges[i]>>6), Entry: at.Entry + int64(ranges[i]&0x3f), Batch: -1}
			if from.Ledger != at.Ledger {
				from.Entry = int64(ranges[i]&0x3f) - 1
			}
			to := marker.Position{Ledger: from.Ledger, Entry: from.Entry + int64(ranges[i+1]&0x3f) + 1, Batch: -1}
			acked = append(acked, marker.Range{From: from, To: to})
			at = to
		}
		if len(acked) == 0 {
			return
		}
		md := pos(4, 0) // before every range: each must be proven
		if len(ranges)%2 == 1 {
			md = acked[int(ranges[len(ranges)-1])%len(acked)].To // those up to it need not be
		}
		const limit = 100
		ids, why := m.lookup(acked, md, limit)
		if why != "" {
			if len(ids) != 0 {
				t.Fatalf("dropped (%s) with %d entries", why, len(ids))
			}
			return
		}
		if len(ids) == 0 || len(ids) > limit {
			t.Fatalf("%d entries, want 1 to %d", len(ids), limit)
		}
		for i, id := range ids {
			if i > 0 && id.Compare(ids[i-1]) <= 0 {
				t.Fatalf("entries out of order or repeated: %v", ids)
			}
			origin, ok := fed[id]
			if !ok {
				t.Fatalf("%v acknowledged: never fed as a copy", id)
			}
			in := false
			for _, r := range acked {
				if origin.Compare(r.From) > 0 && origin.Compare(r.To) <= 0 {
					in = true
				}
			}
			if !in {
				t.Fatalf("%v acknowledged: a copy of %v, outside every range %v", id, origin, acked)
			}
		}
	})
}
