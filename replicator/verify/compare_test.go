package verify

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// A script is a walk in short: source entries "s3" (entry 3 of ledger 1,
// expected), "k3" (entry 3, not forwarded), and target entries "t3" (a
// signed copy of source entry 3 with its bytes), "x3" (a copy of 3 with
// other bytes), "u3" (a copy of 3, its signature not valid), "y3" (a copy
// of 3 with other bytes, its signature not valid), "l" (the
// target's own data). Target entries are numbered in the order fed.
// walk feeds them as the walker does: each target entry after the
// source entries it wants.
func walk(t *testing.T, cfg Config, source, target string) Result {
	t.Helper()
	pos := func(s string) marker.Position {
		var e int64
		if _, err := fmt.Sscan(s, &e); err != nil {
			t.Fatalf("script %q: %v", s, err)
		}
		return marker.Position{Ledger: 1, Entry: e, Batch: -1}
	}
	digest := func(e int64, other bool) (d Digest) {
		d[0], d[1] = byte(e), byte(e>>8)
		if other {
			d[2] = 1
		}
		return d
	}
	var src []Source
	for _, w := range strings.Fields(source) {
		p := pos(w[1:])
		// Entry e is a batch of e%3+1 messages.
		s := Source{Pos: p, PublishTime: 1000 + p.Entry, Messages: int32(p.Entry%3 + 1), Digest: digest(p.Entry, false)}
		if w[0] == 'k' {
			s.Skip = "marker"
		}
		src = append(src, s)
	}
	c := New(cfg)
	next := 0
	for i, w := range strings.Fields(target) {
		tg := Target{Pos: marker.Position{Ledger: 9, Entry: int64(i), Batch: -1}}
		if w == "l" {
			tg.Claim = Local
		} else {
			p := pos(w[1:])
			tg.Claim, tg.Origin, tg.OriginOK = FromSource, p, true
			tg.Signed = w[0] != 'u' && w[0] != 'y'
			tg.Digest = digest(p.Entry, w[0] == 'x' || w[0] == 'y')
		}
		for c.Wants(tg) {
			if next == len(src) {
				c.SourceDone()
				break
			}
			c.AddSource(src[next])
			next++
		}
		c.AddTarget(tg)
	}
	for ; next < len(src); next++ {
		c.AddSource(src[next])
	}
	return c.Finish()
}

// brief is a Result's counts and findings in short, for the table.
func brief(r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exp=%d pre=%d lag=%d miss=%d dup=%d div=%d ooo=%d gone=%d only=%d",
		r.Expected, r.Present, r.NotYetCopied, r.Missing, r.Duplicated, r.Divergent, r.OutOfOrder, r.SourceGone, r.TargetOnly)
	if r.PresentUnproven > 0 {
		fmt.Fprintf(&b, " unp=%d", r.PresentUnproven)
	}
	if r.Through != nil {
		fmt.Fprintf(&b, " through=%d@%d", r.Through.Origin.Entry, r.Through.PublishTime)
	} else {
		b.WriteString(" through=-")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, " %s:%d", f.Kind, f.Origin.Entry)
		if f.Target != nil {
			fmt.Fprintf(&b, "@%d", f.Target.Entry)
		}
	}
	return b.String()
}

func TestPartition(t *testing.T) {
	auth := Config{Window: 100, Deferred: 10, Authenticated: true, FromEarliest: true, MaxFindings: 10}
	small := auth
	small.Window = 3
	unauth := auth
	unauth.Authenticated = false
	since := auth
	since.FromEarliest = false
	for _, tc := range []struct {
		name           string
		cfg            Config
		source, target string
		want           string
	}{
		{"clean", auth, "s0 s1 s2 s3", "t0 t1 t2 t3",
			"exp=4 pre=4 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=3@1003"},
		{"empty both", auth, "", "",
			"exp=0 pre=0 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=-"},
		{"nothing copied yet", auth, "s0 s1", "",
			"exp=2 pre=0 lag=2 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=-"},
		{"a copy under way: the tail is lag, not loss", auth, "s0 s1 s2 s3", "t0 t1",
			"exp=4 pre=2 lag=2 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=1@1001"},
		{"not forwarded entries are not expected", auth, "s0 k1 s2 k3", "t0 t2",
			"exp=2 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=3@1003"},
		{"local data on the target is left alone", auth, "s0 s1", "l t0 l t1 l",
			"exp=2 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=1@1001"},
		{"missing in the middle", auth, "s0 s1 s2 s3", "t0 t1 t3",
			"exp=4 pre=3 lag=0 miss=1 dup=0 div=0 ooo=0 gone=0 only=0 through=1@1001 missing:2"},
		{"missing first", auth, "s0 s1 s2", "t1 t2",
			"exp=3 pre=2 lag=0 miss=1 dup=0 div=0 ooo=0 gone=0 only=0 through=- missing:0"},
		{"duplicate at once", auth, "s0 s1 s2", "t0 t1 t1 t2",
			"exp=3 pre=3 lag=0 miss=0 dup=1 div=0 ooo=0 gone=0 only=0 through=2@1002 duplicated:1@2"},
		{"duplicate at the end", auth, "s0 s1 s2", "t0 t1 t2 t0",
			"exp=3 pre=3 lag=0 miss=0 dup=1 div=0 ooo=0 gone=0 only=0 through=2@1002 duplicated:0@3"},
		{"two swapped", auth, "s0 s1 s2 s3", "t0 t2 t1 t3",
			"exp=4 pre=4 lag=0 miss=0 dup=0 div=0 ooo=1 gone=0 only=0 through=3@1003 out-of-order:1@2"},
		{"divergent beside the real copy", auth, "s0 s1 s2", "t0 t1 t2 x1",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=1 ooo=0 gone=0 only=0 through=2@1002 divergent:1@3"},
		{"divergent instead of the copy", auth, "s0 s1 s2", "t0 x1 t2",
			"exp=3 pre=2 lag=0 miss=1 dup=0 div=1 ooo=0 gone=0 only=0 through=0@1000 divergent:1@1 missing:1"},
		// Same bytes under an origin no key proves: held, not missing; not
		// present either, and verified-through stops before it.
		{"unsigned same bytes is no proof, but no loss", auth, "s0 s1 s2", "t0 u1 t2",
			"exp=3 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 unp=1 through=0@1000 present-unproven:1@1"},
		{"copies under an older key, then under the current one", auth, "s0 s1 s2 s3", "u0 u1 t2 t3",
			"exp=4 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 unp=2 through=- present-unproven:0@0 present-unproven:1@1"},
		{"an unproven copy, then the proven one", auth, "s0 s1 s2", "t0 u1 t1 t2",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 unp=1 through=2@1002 present-unproven:1@1"},
		{"an unproven copy after the proven one", auth, "s0 s1 s2", "t0 t1 u1 t2",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=1 through=2@1002 target-only:1@2"},
		{"a small window: an unproven copy left behind stops verified-through", small, "s0 s1 s2 s3 s4 s5", "t0 u1 t2 t3 t4 t5",
			"exp=6 pre=5 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 unp=1 through=0@1000 present-unproven:1@1"},
		{"unsigned other bytes is divergent", auth, "s0 s1 s2", "t0 t1 t2 y1",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=1 ooo=0 gone=0 only=0 through=2@1002 divergent:1@3"},
		{"a position the source never had", auth, "s0 s2 s3", "t0 t1 t2 t3",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=1 through=3@1003 target-only:1@1"},
		{"a copy of an entry not forwarded", auth, "s0 k1 s2", "t0 t1 t2",
			"exp=2 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=1 through=2@1002 target-only:1@1"},
		{"retention: the source lost its first entries", auth, "s2 s3", "t0 t1 t2 t3",
			"exp=2 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=2 only=0 through=3@1003 source-gone:0@0 source-gone:1@1"},
		{"--since: copies before the range are left out", since, "s2 s3", "t0 t1 t2 t3",
			"exp=2 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=3@1003"},
		{"a forged origin far ahead reads no source", auth, "s0 s1 s2", "t0 u99 t1 t2",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=1 through=2@1002 target-only:99@1"},
		{"a forged origin far ahead reads no source, even through a small window", small, "s0 s1 s2 s3 s4 s5", "t0 u99 t1 t2 t3 t4 t5",
			"exp=6 pre=6 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=1 through=5@1005 target-only:99@1"},
		{"a signed copy beyond the source's end", auth, "s0 s1", "t0 t1 t5",
			"exp=2 pre=2 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=1 through=1@1001 target-only:5@2"},
		{"without a key, origins count and bytes decide", unauth, "s0 s1 s2", "t0 u1 u2 x1",
			"exp=3 pre=3 lag=0 miss=0 dup=0 div=1 ooo=0 gone=0 only=0 through=2@1002 divergent:1@3"},
		{"a small window: a gap leaves it missing", small, "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t5 t6",
			"exp=7 pre=6 lag=0 miss=1 dup=0 div=0 ooo=0 gone=0 only=0 through=0@1000 missing:1"},
		{"a small window: an old duplicate, judged by its signature", small, "s0 s1 s2 s3 s4 s5", "t0 t1 t2 t3 t4 t5 t0",
			"exp=6 pre=6 lag=0 miss=0 dup=1 div=0 ooo=0 gone=0 only=0 through=5@1005 duplicated:0@6"},
		// A loss followed by more than the window of entries not forwarded
		// (copies from a third cluster, markers) before the next copy: the
		// lost entry leaves the window before any later copy is seen.
		{"a small window: a gap, then more than the window not forwarded", small, "s0 s1 k2 k3 k4 k5 s6", "t0 t6",
			"exp=3 pre=2 lag=0 miss=1 dup=0 div=0 ooo=0 gone=0 only=0 through=0@1000 missing:1"},
		{"a small window: a gap at the start, then more than the window not forwarded", small, "s0 k1 k2 k3 k4 s5 s6", "t5 t6",
			"exp=3 pre=2 lag=0 miss=1 dup=0 div=0 ooo=0 gone=0 only=0 through=- missing:0"},
		{"a small window: two gaps, then more than the window not forwarded", small, "s0 s1 s2 k3 k4 k5 k6 s7", "t0 t7",
			"exp=4 pre=2 lag=0 miss=2 dup=0 div=0 ooo=0 gone=0 only=0 through=0@1000 missing:1 missing:2"},
		{"a small window: a copy under way past many not forwarded is lag", small, "s0 s1 k2 k3 k4 k5 s6", "t0",
			"exp=3 pre=1 lag=2 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=0@1000"},
		{"a small window: a copy later than it reaches", small, "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t5 t6 t1",
			"exp=7 pre=6 lag=0 miss=1 dup=0 div=0 ooo=1 gone=0 only=0 through=0@1000 missing:1 out-of-order:1@6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := brief(walk(t, tc.cfg, tc.source, tc.target)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestUnproven: what lies past verified-through, in entries and in the
// messages of their batches (entry e holds e%3+1), with the publish times
// of the first and the last (1000+e): the drill's RPO. Entries not
// forwarded never count; a copy that arrives later proves its entry.
func TestUnproven(t *testing.T) {
	auth := Config{Window: 100, Deferred: 10, Authenticated: true, FromEarliest: true, MaxFindings: 10}
	small := auth
	small.Window = 3
	for _, tc := range []struct {
		name           string
		cfg            Config
		source, target string
		want           Unproven
	}{
		{"clean", auth, "s0 s1 s2 s3", "t0 t1 t2 t3", Unproven{}},
		{"empty", auth, "", "", Unproven{}},
		{"nothing copied", auth, "s0 s1 s2", "", Unproven{3, 6, 1000, 1002}},
		{"a copy under way", auth, "s0 s1 s2 s3 s4", "t0 t1", Unproven{3, 6, 1002, 1004}},
		{"markers past the last copy", auth, "s0 s1 k2 k3", "t0 t1", Unproven{}},
		{"a marker between unproven entries", auth, "s0 s1 k2 s3 s4", "t0", Unproven{3, 5, 1001, 1004}},
		{"missing in the middle: all after it", auth, "s0 s1 s2 s3 s4", "t0 t1 t3 t4", Unproven{3, 6, 1002, 1004}},
		{"divergent instead of the copy", auth, "s0 s1 s2", "t0 x1 t2", Unproven{2, 5, 1001, 1002}},
		{"out of order, settled", auth, "s0 s1 s2 s3", "t0 t2 t1 t3", Unproven{}},
		{"out of order around a gap: proven ones leave, the rest stays", auth, "s0 s1 s2", "t2 t0", Unproven{2, 5, 1001, 1002}},
		{"a small window: a gap left behind", small, "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t5 t6", Unproven{6, 12, 1001, 1006}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := walk(t, tc.cfg, tc.source, tc.target).Unproven; got != tc.want {
				t.Errorf("unproven %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestNotHeld: what of the source the target holds no copy of with its
// bytes, proven or not (the drill's RPO): not the copies after a gap,
// nor copies present but unproven (a copy under another key).
func TestNotHeld(t *testing.T) {
	auth := Config{Window: 100, Deferred: 10, Authenticated: true, FromEarliest: true, MaxFindings: 10}
	small := auth
	small.Window = 3
	for _, tc := range []struct {
		name           string
		cfg            Config
		source, target string
		want           Unproven
	}{
		{"clean", auth, "s0 s1 s2 s3", "t0 t1 t2 t3", Unproven{}},
		{"nothing copied", auth, "s0 s1 s2", "", Unproven{3, 6, 1000, 1002}},
		{"a copy under way", auth, "s0 s1 s2 s3 s4", "t0 t1", Unproven{3, 6, 1002, 1004}},
		{"missing in the middle: only it", auth, "s0 s1 s2 s3 s4", "t0 t1 t3 t4", Unproven{1, 3, 1002, 1002}},
		{"copies under an older key are held", auth, "s0 s1 s2 s3", "u0 u1 t2 t3", Unproven{}},
		{"a copy with other bytes holds nothing", auth, "s0 s1 s2", "t0 x1 t2", Unproven{1, 2, 1001, 1001}},
		{"other bytes unsigned hold nothing", auth, "s0 s1 s2", "t0 y1 t2", Unproven{1, 2, 1001, 1001}},
		{"a small window: a gap left behind", small, "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t5 t6", Unproven{1, 2, 1001, 1001}},
		{"a small window: two gaps, one left behind", small, "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t6", Unproven{2, 5, 1001, 1005}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := walk(t, tc.cfg, tc.source, tc.target).NotHeld; got != tc.want {
				t.Errorf("not held %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPartitionBounded feeds a long clean walk through a small window:
// the window, not the topic, bounds what is held.
func TestPartitionBounded(t *testing.T) {
	c := New(Config{Window: 64, Deferred: 4, Authenticated: true, FromEarliest: true})
	const n = 100_000
	for i := range int64(n) {
		p := marker.Position{Ledger: 3, Entry: i, Batch: -1}
		d := Digest{byte(i), byte(i >> 8), byte(i >> 16)}
		c.AddSource(Source{Pos: p, Digest: d})
		c.AddTarget(Target{Pos: p, Claim: FromSource, Origin: p, OriginOK: true, Signed: true, Digest: d})
	}
	if len(c.ring) != 64 || cap(c.deferred) > 4 {
		t.Fatalf("window grew: ring %d, deferred cap %d", len(c.ring), cap(c.deferred))
	}
	r := c.Finish()
	if r.Present != n || r.Faults() != 0 || r.Through == nil || r.Through.Origin.Entry != n-1 {
		t.Fatalf("clean walk: %s", brief(r))
	}
}

func TestFindingsCapped(t *testing.T) {
	cfg := Config{Window: 1000, Deferred: 10, Authenticated: true, FromEarliest: true, MaxFindings: 3}
	var src, tgt []string
	for i := range 20 {
		src = append(src, fmt.Sprintf("s%d", i))
		if i%2 == 0 {
			tgt = append(tgt, fmt.Sprintf("t%d", i))
		}
	}
	r := walk(t, cfg, strings.Join(src, " "), strings.Join(tgt, " "))
	var kinds []Kind
	for _, f := range r.Findings {
		kinds = append(kinds, f.Kind)
	}
	if r.Missing != 9 || !slices.Equal(kinds, []Kind{Missing, Missing, Missing}) || r.Findings[0].Origin.Entry != 1 {
		t.Fatalf("missing %d, findings %v: want 9 counted and the first 3 named from entry 1", r.Missing, r.Findings)
	}
}

// TestResume: a walk resumed from the first one's Through (the source
// after its Origin, the target after its Target, a range that starts
// mid-topic) judges the rest as one walk over everything would: what a
// verifier that runs continuously does.
func TestResume(t *testing.T) {
	pos := func(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }
	feed := func(c *Partition, from, to int64, tgt map[int64]int64) {
		for e := from; e < to; e++ {
			c.AddSource(Source{Pos: pos(1, e), PublishTime: e, Digest: Digest{byte(e)}})
		}
		for e := from; e < to; e++ {
			if at, ok := tgt[e]; ok {
				c.AddTarget(Target{Pos: pos(9, at), Claim: FromSource, Origin: pos(1, e), OriginOK: true, Signed: true, Digest: Digest{byte(e)}})
			}
		}
	}
	copies := map[int64]int64{}
	for e := range int64(8) {
		copies[e] = 100 + e
	}
	delete(copies, 6) // lost
	first := New(Config{Window: 100, Deferred: 10, Authenticated: true, FromEarliest: true})
	feed(first, 0, 4, copies)
	mid := first.Snapshot()
	if mid.Through == nil || mid.Through.Origin != pos(1, 3) || !mid.Through.HasTarget || mid.Through.Target != pos(9, 103) {
		t.Fatalf("snapshot after 4: through %+v, want origin 1:3 at target 9:103", mid.Through)
	}
	// Resumed after 1:3 on the source and 9:103 on the target.
	second := New(Config{Window: 100, Deferred: 10, Authenticated: true, FromEarliest: false})
	feed(second, 4, 8, copies)
	r := second.Finish()
	if r.Present != 3 || r.Missing != 1 || r.Findings[0].Origin != pos(1, 6) || r.Through.Origin != pos(1, 5) || r.Through.Target != pos(9, 105) {
		t.Fatalf("resumed: %s, through %+v", brief(r), r.Through)
	}
}

// TestPartitionRounds: a continuous comparison counts an entry missing
// once a later copy passed it at two rounds' ends in a row (a copy a
// little out of place in between is out of order, not missing), moves
// Through past it, and judges a copy landing after that as out of order
// and a second one as a duplicate; the source is read ahead only while
// the window has room.
func TestPartitionRounds(t *testing.T) {
	pos := func(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }
	src := func(e int64) Source { return Source{Pos: pos(1, e), PublishTime: 1000 + e, Digest: Digest{byte(e)}} }
	at := int64(0)
	tgt := func(e int64) Target {
		at++
		return Target{Pos: pos(9, at), Claim: FromSource, Origin: pos(1, e), OriginOK: true, Signed: true, Digest: Digest{byte(e)}}
	}
	c := New(Config{Window: 8, Deferred: 4, Authenticated: true, Continuous: true})
	for e := range int64(5) {
		c.AddSource(src(e))
	}
	for _, e := range []int64{0, 1, 3, 4} { // 2 not (yet) copied
		c.AddTarget(tgt(e))
	}
	step := func(name string, want string, wantThrough int64, wantPending int64) {
		t.Helper()
		r := c.Snapshot()
		got := brief(r)
		if got != want || r.Through == nil || r.Through.Origin.Entry != wantThrough {
			t.Errorf("%s:\n got  %s\n want %s (through %d)", name, got, want, wantThrough)
		}
		if pub, ok := c.Pending(); (wantPending < 0) == ok || (ok && pub != 1000+wantPending) {
			t.Errorf("%s: pending %v %v, want entry %d", name, pub, ok, wantPending)
		}
	}
	c.Round(true)
	step("one round", "exp=5 pre=4 lag=0 miss=0 dup=0 div=0 ooo=0 gone=0 only=0 through=1@1001", 1, 2)
	c.Round(true)
	step("two rounds", "exp=5 pre=4 lag=0 miss=1 dup=0 div=0 ooo=0 gone=0 only=0 through=4@1004 missing:2", 4, -1)
	c.AddTarget(tgt(2))
	step("late", "exp=5 pre=5 lag=0 miss=1 dup=0 div=0 ooo=1 gone=0 only=0 through=4@1004 missing:2 out-of-order:2@5", 4, -1)
	c.AddTarget(tgt(2))
	c.Round(true)
	step("again", "exp=5 pre=5 lag=0 miss=1 dup=1 div=0 ooo=1 gone=0 only=0 through=4@1004 missing:2 out-of-order:2@5 duplicated:2@6", 4, -1)

	// Nothing copied of what follows: room for half the window.
	n := 0
	for e := int64(5); c.Room(); e++ {
		c.AddSource(src(e))
		n++
	}
	if n != 4 {
		t.Errorf("read %d entries ahead of the copies, want 4 (half the window of 8)", n)
	}
	if _, ok := c.Pending(); !ok {
		t.Error("nothing pending with 4 entries not copied")
	}
}

// Config.NotHeld names exactly the entries Result.NotHeld counts, once
// each and in source order, whether they leave the window or stay in it
// to the end: the failback's stranded tail.
func TestNotHeldNamed(t *testing.T) {
	for _, tc := range []struct {
		name, source, target string
		window               int
		want                 []int64
	}{
		{"tail", "s0 s1 s2 s3 s4 s5", "t0 t1 t2", 100, []int64{3, 4, 5}},
		{"tail through the window", "s0 s1 s2 s3 s4 s5", "t0 t1 t2", 2, []int64{3, 4, 5}},
		{"gap and tail", "s0 s1 s2 s3 s4 s5", "t0 t2 t3", 100, []int64{1, 4, 5}},
		{"gap through the window", "s0 s1 s2 s3 s4 s5", "t0 t2 t3", 2, []int64{1, 4, 5}},
		{"markers are not entries to copy", "s0 k1 s2 k3 s4", "t0", 100, []int64{2, 4}},
		{"other bytes are not held", "s0 s1 s2", "t0 x1", 100, []int64{1, 2}},
		{"unproven with its bytes is held", "s0 s1 s2", "t0 u1", 100, []int64{2}},
		{"everything copied", "s0 s1 s2", "t0 t1 t2", 1, nil},
		// A copy more than the window out of place is there all the
		// same, proven by its signed origin: not stranded (a replay
		// would store it twice).
		{"a copy far out of place, later", "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t5 t6 t1", 2, nil},
		{"a copy far out of place, earlier", "s0 s1 s2 s3 s4 s5 s6", "t0 t6 t1 t2 t3 t4 t5", 2, nil},
		{"far out of place, and a real gap", "s0 s1 s2 s3 s4 s5 s6", "t0 t3 t4 t5 t6 t1", 2, []int64{2}},
		{"far out of place unsigned is not held", "s0 s1 s2 s3 s4 s5 s6", "t0 t2 t3 t4 t5 t6 u1", 2, []int64{1}},
		{"far out of place twice holds once", "s0 s1 s2 s3 s4 s5", "t0 t2 t3 t4 t5 t1 t1", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			msgs := int64(0)
			cfg := Config{Window: tc.window, Deferred: 10, Authenticated: true, FromEarliest: true, MaxFindings: 10,
				NotHeld: func(l Left) {
					got = append(got, l.Pos.Entry)
					msgs += int64(l.Messages)
					if l.PublishTime != 1000+l.Pos.Entry {
						t.Errorf("entry %d: publish time %d", l.Pos.Entry, l.PublishTime)
					}
				}}
			r := walk(t, cfg, tc.source, tc.target)
			if !slices.Equal(got, tc.want) {
				t.Errorf("named %v, want %v", got, tc.want)
			}
			if r.NotHeld.Entries != int64(len(got)) || r.NotHeld.Messages != msgs {
				t.Errorf("NotHeld %+v, named %d entries of %d messages", r.NotHeld, len(got), msgs)
			}
		})
	}
}
