package subsync

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
)

// TestEntryCountAfter: entries are counted once each, in position order
// (a cursor delivering again counts nothing); how many were read after a
// completion is known only from a sample taken at or before the reading
// was sent, and not before the completion.
func TestEntryCountAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var c entryCount
		for e := int64(1); e <= 3; e++ {
			c.read(subsynctest.Pos(1, e))
		}
		c.completed(subsynctest.Pos(1, 3))
		c.sample() // t0: 3
		c.read(subsynctest.Pos(1, 4))
		c.read(subsynctest.Pos(1, 2)) // delivered again
		c.read(subsynctest.Pos(1, 4))
		c.read(subsynctest.Pos(2, 0)) // a new ledger
		time.Sleep(time.Second)
		c.sample() // t0+1s: 5
		c.completed(subsynctest.Pos(2, 0))
		c.read(subsynctest.Pos(2, 1))
		for _, tt := range []struct {
			name string
			a    marker.Position
			sent time.Time
			want int64
			ok   bool
		}{
			{"sent with the second sample", subsynctest.Pos(1, 3), t0.Add(time.Second), 2, true},
			{"sent between the samples: the first", subsynctest.Pos(1, 3), t0.Add(time.Second / 2), 0, true},
			{"sent later: the newest sample", subsynctest.Pos(1, 3), t0.Add(time.Hour), 2, true},
			{"sent before any sample", subsynctest.Pos(1, 3), t0.Add(-time.Millisecond), 0, false},
			{"no completion there", subsynctest.Pos(1, 4), t0.Add(time.Second), 0, false},
			{"completion inside a batch is the entry's", marker.Position{Ledger: 1, Entry: 3, Batch: 4}, t0.Add(time.Second), 2, true},
			{"sampled before the completion", subsynctest.Pos(2, 0), t0.Add(time.Hour), 0, true},
		} {
			if got, ok := c.after(tt.a, tt.sent); got != tt.want || ok != tt.ok {
				t.Errorf("%s: after(%v, %v) = %d, %v; want %d, %v", tt.name, tt.a, tt.sent.Sub(t0), got, ok, tt.want, tt.ok)
			}
		}
		time.Sleep(time.Second)
		c.sample()
		if got, ok := c.after(subsynctest.Pos(2, 0), t0.Add(2*time.Second)); got != 1 || !ok {
			t.Errorf("after the completion at 2:0: %d, %v; want 1, true", got, ok)
		}
		var early entryCount
		early.read(subsynctest.Pos(1, 1))
		early.sample()
		time.Sleep(time.Millisecond)
		sampled := time.Now()
		early.read(subsynctest.Pos(1, 2))
		time.Sleep(time.Millisecond)
		early.completed(subsynctest.Pos(1, 2))
		if _, ok := early.after(subsynctest.Pos(1, 2), sampled); ok {
			t.Error("a sample taken before the completing entry was read proved something")
		}
		// The completion is a sample of its own: a reading sent after it,
		// with no entry read and no sample since, proves with L = 0.
		if got, ok := early.after(subsynctest.Pos(1, 2), time.Now()); got != 0 || !ok {
			t.Errorf("a reading sent right after the completion: %d, %v; want 0, true", got, ok)
		}
	})
}

// TestFollowPositionsReached: after a snapshot completed at a (an entry
// this sync read), a follow whose stats reading shows every tracked
// subscription with a precise backlog of at most the entries read after
// a (before the reading was sent) and no range acknowledged one by one
// sends the update for that snapshot without reading positions;
// otherwise it reads them.
func TestFollowPositionsReached(t *testing.T) {
	tests := []struct {
		name         string
		st           map[string]SubStat // the second reading
		md           marker.Position    // where billing is, if read
		noCompletion bool
		read         bool
		update       bool
	}{
		{name: "backlog at most the entries after a: proven",
			st: map[string]SubStat{"billing": {Backlog: 5, MarkDeleteAdvanced: 2}}, md: subsynctest.Pos(1, 9), update: true},
		{name: "backlog below: proven",
			st: map[string]SubStat{"billing": {Backlog: 1, MarkDeleteAdvanced: 2}}, md: subsynctest.Pos(1, 9), update: true},
		{name: "one more than the entries after a: md may be before a",
			st: map[string]SubStat{"billing": {Backlog: 6, MarkDeleteAdvanced: 2}}, md: subsynctest.Pos(1, 9), read: true},
		{name: "ranges acknowledged one by one: read",
			st: map[string]SubStat{"billing": {Backlog: 3, MarkDeleteAdvanced: 2, Ranges: 1}}, md: subsynctest.Pos(1, 9), read: true},
		{name: "a tracked subscription new: read",
			st: map[string]SubStat{"billing": {Backlog: 3, MarkDeleteAdvanced: 2}, "audit": {Backlog: 0}}, md: subsynctest.Pos(1, 12), read: true, update: true},
		{name: "one tracked subscription not proven: read",
			st: map[string]SubStat{"billing": {Backlog: 30, MarkDeleteAdvanced: 2}}, md: subsynctest.Pos(1, 9), read: true},
		{name: "completion not seen here (a snapshot re-read at start): read",
			st: map[string]SubStat{"billing": {Backlog: 3, MarkDeleteAdvanced: 2}}, md: subsynctest.Pos(1, 12), noCompletion: true, read: true, update: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, st := movedRig(t)
				ctx := context.Background()
				for e := int64(1); e <= 10; e++ {
					r.s.DataAt(ctx, subsynctest.Pos(1, e), "", marker.Position{})
				}
				st.set(syncTopic, "billing", SubStat{Backlog: 10, MarkDeleteAdvanced: 1})
				r.local.SetMD("billing", subsynctest.Pos(1, 0))
				if err := r.s.follow(ctx); err != nil {
					t.Fatal(err)
				}
				if !tt.noCompletion {
					r.s.entries.completed(subsynctest.Pos(1, 10))
				}
				// Read back at 1:11: one entry after a.
				cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
				for e := int64(12); e <= 15; e++ {
					r.s.DataAt(ctx, subsynctest.Pos(1, e), "", marker.Position{})
				}
				time.Sleep(time.Second)
				for name, s := range tt.st {
					st.set(syncTopic, name, s)
				}
				r.local.SetMD("billing", tt.md)
				r.local.SetMD("audit", subsynctest.Pos(1, 0))
				before := r.local.MDCalls
				if err := r.s.follow(ctx); err != nil {
					t.Fatal(err)
				}
				if read := r.local.MDCalls > before; read != tt.read {
					t.Errorf("positions read %v, want %v", read, tt.read)
				}
				ups := updatesWritten(r.sink.Take())
				if up, ok := ups["billing"]; ok != tt.update || (ok && up.Remote != subsynctest.Pos(7, 20)) {
					t.Errorf("billing's update %v (sent %v), want sent %v to 7:20", up.Remote, ok, tt.update)
				}
				proven := metricstest.Counter(r.m.PositionsProven, "east")
				if (proven == 1) != !tt.read {
					t.Errorf("positions_proven_total = %v, want %v", proven, map[bool]int{true: 0, false: 1}[tt.read])
				}
				// Proven, the next follow has nothing newer to read for.
				if !tt.read {
					time.Sleep(time.Second)
					st.set(syncTopic, "billing", SubStat{Backlog: 2, MarkDeleteAdvanced: 3})
					before := r.local.MDCalls
					if err := r.s.follow(ctx); err != nil {
						t.Fatal(err)
					}
					if r.local.MDCalls > before {
						t.Error("positions read after the newest snapshot was proven reached")
					}
				}
			})
		})
	}
}

// TestFollowReadsStatsAfterCompletion: a shared reading sent before the
// newest snapshot completed cannot prove it reached; the follow asks for
// a newer one (shared by the topic) and proves it with that, rather than
// reading the partition's positions.
func TestFollowReadsStatsAfterCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, st := movedRig(t)
		ctx := context.Background()
		for e := int64(1); e <= 10; e++ {
			r.s.DataAt(ctx, subsynctest.Pos(1, e), "", marker.Position{})
		}
		st.set(syncTopic, "billing", SubStat{Backlog: 10, MarkDeleteAdvanced: 1})
		r.local.SetMD("billing", subsynctest.Pos(1, 0))
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		st.set(syncTopic, "billing", SubStat{Backlog: 8, MarkDeleteAdvanced: 2})
		if _, err := r.s.Stats.Read(ctx, 0, 0); err != nil { // another partition's follow
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		r.s.DataAt(ctx, subsynctest.Pos(1, 11), "", marker.Position{})
		r.s.entries.completed(subsynctest.Pos(1, 11))
		cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 11), subsynctest.Pos(7, 20)) // read back at 1:12
		st.set(syncTopic, "billing", SubStat{Backlog: 1, MarkDeleteAdvanced: 3})
		time.Sleep(100 * time.Millisecond)
		readings, reads := st.count(), r.local.MDCalls
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if n := st.count() - readings; n != 1 {
			t.Errorf("%d stats readings, want 1 (the cached one predates the completion)", n)
		}
		if r.local.MDCalls != reads {
			t.Error("positions read: the newer reading proves the snapshot reached")
		}
		if up, ok := updatesWritten(r.sink.Take())["billing"]; !ok || up.Remote != subsynctest.Pos(7, 20) {
			t.Errorf("billing's update %v (sent %v), want 7:20", up.Remote, ok)
		}
		// The proof ended the wait: the next snapshot's gets an interval
		// of its own.
		time.Sleep(500 * time.Millisecond)
		r.s.DataAt(ctx, subsynctest.Pos(1, 14), "", marker.Position{})
		r.s.entries.completed(subsynctest.Pos(1, 14))
		cacheSnapshot(t, r, "s2", subsynctest.Pos(1, 14), subsynctest.Pos(7, 30))
		st.set(syncTopic, "billing", SubStat{Backlog: 3, MarkDeleteAdvanced: 4}) // L = 0
		time.Sleep(100 * time.Millisecond)
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if r.local.MDCalls != reads {
			t.Error("positions read 0.1 s after the next snapshot completed: the wait before the proof was not ended")
		}
	})
}

// TestFollowWaitsForConsumersAfterCompletion: right after a snapshot
// completed the consumers have not passed it yet (backlog above the
// entries read since): a position read would only show that, so none is
// made; the next follow proves it once they have.
func TestFollowWaitsForConsumersAfterCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, st := movedRig(t)
		ctx := context.Background()
		for e := int64(1); e <= 10; e++ {
			r.s.DataAt(ctx, subsynctest.Pos(1, e), "", marker.Position{})
		}
		st.set(syncTopic, "billing", SubStat{Backlog: 10, MarkDeleteAdvanced: 1})
		r.local.SetMD("billing", subsynctest.Pos(1, 0))
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		r.s.entries.completed(subsynctest.Pos(1, 10))
		cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20)) // read back at 1:11
		st.set(syncTopic, "billing", SubStat{Backlog: 5, MarkDeleteAdvanced: 2})  // L = 1
		time.Sleep(100 * time.Millisecond)
		reads := r.local.MDCalls
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if r.local.MDCalls != reads {
			t.Error("positions read 0.1 s after the snapshot completed, with the consumers short of it")
		}
		if n := len(updatesWritten(r.sink.Take())); n != 0 {
			t.Errorf("%d updates, want none yet", n)
		}
		if now := time.Now(); r.s.followDue(now.Add(r.s.Interval/5-time.Millisecond)) || !r.s.followDue(now.Add(r.s.Interval/5)) {
			t.Errorf("the next follow is not due %s on", r.s.Interval/5)
		}
		for e := int64(12); e <= 13; e++ {
			r.s.DataAt(ctx, subsynctest.Pos(1, e), "", marker.Position{})
		}
		st.set(syncTopic, "billing", SubStat{Backlog: 2, MarkDeleteAdvanced: 3}) // L = 3
		time.Sleep(500 * time.Millisecond)
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if r.local.MDCalls != reads {
			t.Error("positions read although the reading proves the snapshot reached")
		}
		if up, ok := updatesWritten(r.sink.Take())["billing"]; !ok || up.Remote != subsynctest.Pos(7, 20) {
			t.Errorf("billing's update %v (sent %v), want 7:20", up.Remote, ok)
		}
		// The proof ended the wait: the next snapshot's gets an interval
		// of its own.
		time.Sleep(500 * time.Millisecond)
		r.s.DataAt(ctx, subsynctest.Pos(1, 14), "", marker.Position{})
		r.s.entries.completed(subsynctest.Pos(1, 14))
		cacheSnapshot(t, r, "s2", subsynctest.Pos(1, 14), subsynctest.Pos(7, 30))
		st.set(syncTopic, "billing", SubStat{Backlog: 3, MarkDeleteAdvanced: 4}) // L = 0
		time.Sleep(100 * time.Millisecond)
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if r.local.MDCalls != reads {
			t.Error("positions read 0.1 s after the next snapshot completed: the wait before the proof was not ended")
		}
	})
}

// TestFollowSlowConsumerNotStarved: consumers that stay a steady dozen
// entries behind (a backlog above the entries read after each
// completion) while a snapshot completes every interval: every reading
// leaves the newest snapshot unproven and just completed, yet the
// follow puts its position read off for at most an interval at a time,
// so updates for the snapshots the consumers passed keep going out.
func TestFollowSlowConsumerNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, st := movedRig(t)
		ctx := context.Background()
		e := int64(0)
		data := func(n int) {
			for range n {
				e++
				r.s.DataAt(ctx, subsynctest.Pos(1, e), "", marker.Position{})
			}
		}
		data(20)
		st.set(syncTopic, "billing", SubStat{Backlog: 12, MarkDeleteAdvanced: 1})
		r.local.SetMD("billing", subsynctest.Pos(1, e-12))
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		reads, ups := r.local.MDCalls, 0
		for sec := 1; sec <= 8; sec++ {
			data(4)
			a := subsynctest.Pos(1, e)
			r.s.entries.completed(a)
			cacheSnapshot(t, r, fmt.Sprintf("s%d", sec), a, subsynctest.Pos(7, e)) // its marker at e+1
			e++
			data(1)
			for i := range 5 {
				st.set(syncTopic, "billing", SubStat{Backlog: 12, MarkDeleteAdvanced: int64(10*sec + i)})
				r.local.SetMD("billing", subsynctest.Pos(1, e-12))
				if err := r.s.follow(ctx); err != nil {
					t.Fatal(err)
				}
				ups += len(updatesWritten(r.sink.Take()))
				time.Sleep(200 * time.Millisecond)
			}
		}
		if ups < 3 {
			t.Errorf("%d updates in 8 s (positions read %d times): the follow starved", ups, r.local.MDCalls-reads)
		}
		if n := r.local.MDCalls - reads; n > 8 {
			t.Errorf("positions read %d times in 8 s: more than once an interval", n)
		}
	})
}
