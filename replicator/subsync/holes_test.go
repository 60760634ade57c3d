package subsync

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// The ack holes of the continuous follow (holes.go): the source's side
// sends its acknowledged ranges in an acked marker, the target's side maps
// them onto the copies it read and acknowledges those one by one.

func ackedWritten(mks []marker.Marker) []marker.Marker {
	var out []marker.Marker
	for _, mk := range mks {
		if mk.Kind == marker.KindAcked {
			out = append(out, mk)
		}
	}
	return out
}

// setAcked gives sub of topic on the fake brokers acknowledged ranges.
func (f *fakeBrokers) setAcked(topic, sub string, ranges []marker.Range) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acked[positions.Key{Topic: topic, Subscription: sub}] = ranges
}

// TestHolesSent: a follow whose positions come from the servlet sends, for
// a tracked subscription with ranges acknowledged past its mark-delete
// position, an acked marker of those ranges and, before them, every entry
// up to the position (from marker.NoneSeen): only
// where the position is one follow trusts for an update (not new, not
// behind the last read, not put here by a remote's update), only while
// this instance is the active one, and only when they fit one marker.
func TestHolesSent(t *testing.T) {
	const b1 = "http://b1:8080"
	holes := []marker.Range{rng(1, 13, 1, 15), rng(1, 16, 1, 20)}
	tests := []struct {
		name   string
		sub    string
		ranges []marker.Range
		before map[string]marker.Position // the previous read
		snap   bool                       // a snapshot at 1:10 covers 1:12
		setup  func(r *syncRig)
		// truncated: the servlet lists fewer ranges than there are.
		truncated bool
		want      []marker.Range // nil: no acked marker
	}{
		{name: "sent", sub: "billing", ranges: holes, snap: true,
			want: []marker.Range{{From: marker.NoneSeen, To: pos(1, 12)}, rng(1, 13, 1, 15), rng(1, 16, 1, 20)}},
		{name: "no snapshot covers the position", sub: "billing", ranges: holes,
			want: []marker.Range{{From: marker.NoneSeen, To: pos(1, 12)}, rng(1, 13, 1, 15), rng(1, 16, 1, 20)}},
		{name: "no ranges", sub: "billing", snap: true},
		{name: "not tracked", sub: "other", ranges: holes, snap: true},
		{name: "a new position", sub: "billing", ranges: holes, snap: true, before: map[string]marker.Position{}},
		{name: "behind the last read", sub: "billing", ranges: holes, snap: true,
			before: map[string]marker.Position{"billing": pos(1, 13)}},
		// Where no snapshot covers the position no update would go, and
		// the update's own wait for a confirming read (suspect) is not
		// asked: the acked marker's rule must hold by itself.
		{name: "a new position, no snapshot", sub: "billing", ranges: holes, before: map[string]marker.Position{}},
		{name: "behind the last read, no snapshot", sub: "billing", ranges: holes,
			before: map[string]marker.Position{"billing": pos(1, 13)}},
		{name: "put here by the remote's update", sub: "billing", ranges: holes, snap: true,
			setup: func(r *syncRig) { r.applied.setUpTo("east", syncTopic, "billing", pos(1, 12)) }},
		{name: "another instance is the active one", sub: "billing", ranges: holes, snap: true,
			setup: func(r *syncRig) { r.s.passive.Store(true) }},
		{name: "truncated by the servlet", sub: "billing", ranges: holes, snap: true,
			truncated: true},
		{name: "more than a marker holds", sub: "billing", ranges: manyHoles(marker.MaxAckedRanges), snap: true},
		{name: "as many as a marker holds", sub: "billing", ranges: manyHoles(marker.MaxAckedRanges - 1),
			want: append([]marker.Range{{From: marker.NoneSeen, To: pos(1, 12)}}, manyHoles(marker.MaxAckedRanges-1)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, f := newServletRig(t)
			if tt.snap {
				cacheSnapshot(t, r, "s1", pos(1, 10), pos(7, 20))
			}
			f.set(b1, syncTopic, tt.sub, pos(1, 12))
			if tt.ranges != nil {
				f.setAcked(syncTopic, tt.sub, tt.ranges)
			}
			if tt.truncated {
				f.mu.Lock()
				f.truncated = map[positions.Key]bool{{Topic: syncTopic, Subscription: tt.sub}: true}
				f.mu.Unlock()
			}
			before := tt.before
			if before == nil {
				before = map[string]marker.Position{tt.sub: pos(1, 12)}
			}
			r.readBefore(before)
			if tt.setup != nil {
				tt.setup(r)
			}
			if err := r.s.follow(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := ackedWritten(r.sink.Take())
			if tt.want == nil {
				if len(got) != 0 {
					t.Fatalf("acked markers %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d acked markers, want 1", len(got))
			}
			mk := got[0]
			if mk.From != "east" || mk.To != "west" || mk.Topic != syncTopic || mk.Subscription != tt.sub || mk.Local != pos(1, 12) {
				t.Errorf("acked marker %+v: want east to west on %s for %s at 1:12", mk, syncTopic, tt.sub)
			}
			if !slices.Equal(mk.Acked, tt.want) {
				t.Errorf("ranges %v, want %v", mk.Acked, tt.want)
			}
			if _, err := marker.Encode(mk, syncKey); err != nil {
				t.Errorf("the marker does not encode: %v", err)
			}
		})
	}
}

// manyHoles is n ranges of one entry each past 1:12, one entry apart.
func manyHoles(n int) []marker.Range {
	out := make([]marker.Range, n)
	for i := range out {
		out[i] = rng(1, int64(13+2*i), 1, int64(14+2*i))
	}
	return out
}

// TestHolesSentOnChange: the same ranges are not sent again; changed
// ranges go at most once an interval, the follow that holds them back
// asking for one when the interval is over.
func TestHolesSentOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const b1 = "http://b1:8080"
		r, f := newServletRig(t)
		ctx := context.Background()
		f.set(b1, syncTopic, "billing", pos(1, 12))
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 15)})
		r.readBefore(map[string]marker.Position{"billing": pos(1, 12)})
		follow := func() []marker.Marker {
			t.Helper()
			time.Sleep(600 * time.Millisecond) // the next follow polls
			if err := r.s.follow(ctx); err != nil {
				t.Fatal(err)
			}
			return ackedWritten(r.sink.Take())
		}
		if got := follow(); len(got) != 1 {
			t.Fatalf("%d acked markers, want 1", len(got))
		}
		if got := follow(); len(got) != 0 {
			t.Fatalf("the same ranges sent again: %+v", got)
		}
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 15), rng(1, 16, 1, 17)})
		hs := r.s.fl.holesSent["billing"]
		hs.at = time.Now() // the last one sent just now
		r.s.fl.holesSent["billing"] = hs
		if got := follow(); len(got) != 0 {
			t.Fatalf("sent %+v within an interval of the last", got)
		}
		if soon := r.s.pace.soon; soon.IsZero() || soon.After(time.Now().Add(r.s.Interval)) {
			t.Errorf("next follow due at %v, want within an interval", soon)
		}
		time.Sleep(r.s.Interval)
		got := follow()
		if len(got) != 1 || len(got[0].Acked) != 3 {
			t.Fatalf("acked markers %+v, want the entries up to 1:12 and the two ranges", got)
		}
	})
}

// holesRig is a sync rig as the target: it read copies of the remote's
// (west's) ledger 5 here in ledger 3 (copyMapOf's layout, fed through
// DataAt), a copy of north's and an entry of its own.
func holesRig(t *testing.T) (*syncRig, *fakeMoveClient, *fakeStates) {
	r, moves, local, _ := protocolRig(t)
	ctx := context.Background()
	for i := range int64(10) {
		r.s.DataAt(ctx, pos(3, 10+i), "west", pos(5, i))
	}
	r.s.DataAt(ctx, pos(3, 20), "", marker.Position{}) // its own
	for i := range int64(5) {
		r.s.DataAt(ctx, pos(3, 21+i), "west", pos(5, 10+i))
	}
	r.s.DataAt(ctx, pos(3, 26), "north", pos(5, 15)) // a third origin's copy
	r.s.DataAt(ctx, pos(3, 27), "", marker.Position{})
	return r, moves, local
}

func ackedMarker(sub string, ranges ...marker.Range) marker.Marker {
	return marker.Marker{Kind: marker.KindAcked, From: "west", To: "east", Topic: syncTopic, Subscription: sub,
		Local: pos(5, 0), Acked: ranges, Time: time.Now().UnixMilli()}
}

// readAcked has the rig read a copy of mk at here, its signed origin at
// origin.
func readAcked(t *testing.T, r *syncRig, mk marker.Marker, here, origin marker.Position, signed bool) {
	t.Helper()
	payload, err := marker.Encode(mk, syncKey)
	if err != nil {
		t.Fatal(err)
	}
	from := marker.Origin{Cluster: "west", At: origin, Signed: signed}
	if r.s.MarkerAt(context.Background(), here, payload, from, marker.MarkerProducerName("west", "east")) {
		t.Fatal("a copy of the remote's acked marker was forwarded")
	}
}

func queuedHoles(r *syncRig) map[string][]marker.Position {
	r.s.queue.mu.Lock()
	defer r.s.queue.mu.Unlock()
	out := map[string][]marker.Position{}
	for k, v := range r.s.queue.holes {
		out[k] = v
	}
	return out
}

// TestHolesTaken: a copy of the remote's acked marker is mapped, as it is
// read, onto the copies read before it with a signed origin of the
// remote's: the entries here to acknowledge are exactly those copies,
// never an entry of this side's, a third origin's copy or a copy that was
// not proven; a marker that is not the remote's, signed, for this
// partition and this cluster, or replayed, queues nothing, and neither
// does a list that cannot be mapped exactly.
func TestHolesTaken(t *testing.T) {
	tests := []struct {
		name    string
		mk      marker.Marker
		signed  bool
		setup   func(r *syncRig)
		want    []marker.Position
		invalid string // markers_invalid_total reason counted
		outcome string // subscription_ack_holes_received_total outcome counted
	}{
		{name: "mapped", mk: ackedMarker("billing", rng(5, 0, 5, 3), rng(5, 4, 5, 11)), signed: true,
			want: []marker.Position{pos(3, 11), pos(3, 12), pos(3, 13), pos(3, 15), pos(3, 16), pos(3, 17), pos(3, 18), pos(3, 19), pos(3, 21), pos(3, 22)}},
		{name: "up to the mark-delete position from the start, then holes", signed: true,
			mk: func() marker.Marker {
				mk := ackedMarker("billing", marker.Range{From: marker.NoneSeen, To: pos(5, 2)}, rng(5, 3, 5, 5))
				mk.Local = pos(5, 2)
				return mk
			}(),
			want: []marker.Position{pos(3, 10), pos(3, 11), pos(3, 12), pos(3, 14), pos(3, 15)}},
		{name: "a third origin's copy and own entries are not the remote's", mk: ackedMarker("billing", rng(5, 14, 5, 20)), signed: true,
			outcome: holesNone},
		{name: "reaches before the copies read", mk: ackedMarker("billing", rng(4, 0, 5, 3)), signed: true, outcome: holesNotCovered},
		{name: "after a takeover", mk: ackedMarker("billing", rng(5, 0, 5, 3)), signed: true,
			setup: func(r *syncRig) { r.s.Takeover() }, outcome: holesNotCovered},
		{name: "unsigned copy", mk: ackedMarker("billing", rng(5, 0, 5, 3)), invalid: "unsigned-copy"},
		{name: "another partition", signed: true, invalid: "wrong-topic",
			mk: func() marker.Marker {
				mk := ackedMarker("billing", rng(5, 0, 5, 3))
				mk.Topic = syncOtherTopic
				return mk
			}()},
		{name: "for another cluster", signed: true,
			mk: func() marker.Marker { mk := ackedMarker("billing", rng(5, 0, 5, 3)); mk.To = "north"; return mk }()},
		{name: "replayed", mk: ackedMarker("billing", rng(5, 0, 5, 3)), signed: true, invalid: "replayed",
			setup: func(r *syncRig) {
				readAcked(t, r, ackedMarker("billing", rng(5, 0, 5, 1)), pos(3, 29), pos(5, 41), true)
				r.s.queue.mu.Lock()
				r.s.queue.holes = nil
				r.s.queue.mu.Unlock()
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := holesRig(t)
			if tt.setup != nil {
				tt.setup(r)
			}
			readAcked(t, r, tt.mk, pos(3, 30), pos(5, 40), tt.signed)
			got := queuedHoles(r)["billing"]
			if !slices.Equal(got, tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
			if tt.invalid != "" {
				if n := metricstest.Counter(r.m.MarkersInvalid, "east", tt.invalid); n != 1 {
					t.Errorf("markers_invalid_total{reason=%q} = %v, want 1", tt.invalid, n)
				}
			}
			if tt.outcome != "" {
				if n := metricstest.Counter(r.m.HolesReceived, "east", tt.outcome); n != 1 {
					t.Errorf("subscription_ack_holes_received_total{outcome=%q} = %v, want 1", tt.outcome, n)
				}
			}
		})
	}
}

// TestHolesApplied: the entries queued are acknowledged one by one and
// nothing else (no mark-delete target), by a move attached as the
// subscription's type where that is Shared or Key_Shared AUTO_SPLIT, and
// the echo fence rises to the last of them; a subscription missing here,
// of another type, or whose move's consumer the broker refuses, is left
// as it is and the fence where it was.
func TestHolesApplied(t *testing.T) {
	ids := []marker.Position{pos(3, 11), pos(3, 13), pos(3, 22)}
	tests := []struct {
		name    string
		state   *subscription.State // nil: missing
		err     error
		want    wire.SubType // 0: no move
		outcome string
		fenced  bool
	}{
		{name: "Shared", state: &subscription.State{Exists: true, Type: subscription.Shared}, want: wire.Shared, outcome: holesApplied, fenced: true},
		{name: "Shared, consumers attached", state: &subscription.State{Exists: true, Type: subscription.Shared, Consumers: 2},
			want: wire.Shared, outcome: holesApplied, fenced: true},
		{name: "Key_Shared AUTO_SPLIT", state: &subscription.State{Exists: true, Type: subscription.KeyShared, Mode: subscription.AutoSplit},
			want: wire.KeyShared, outcome: holesApplied, fenced: true},
		{name: "Key_Shared STICKY", state: &subscription.State{Exists: true, Type: subscription.KeyShared, Mode: subscription.Sticky},
			outcome: holesRefusedType},
		{name: "Failover", state: &subscription.State{Exists: true, Type: subscription.Failover}, outcome: holesRefusedType},
		{name: "Exclusive", state: &subscription.State{Exists: true, Type: subscription.Exclusive}, outcome: holesRefusedType},
		{name: "type unknown", state: &subscription.State{Exists: true}, outcome: holesRefusedType},
		{name: "missing", outcome: holesNoSubscription},
		{name: "refused by the broker", state: &subscription.State{Exists: true, Type: subscription.Shared, Consumers: 1},
			err: wire.ErrSubscriptionBusy, want: wire.Shared, outcome: holesRefusedType},
		{name: "failed", state: &subscription.State{Exists: true, Type: subscription.Shared},
			err: context.DeadlineExceeded, want: wire.Shared, outcome: holesFailed, fenced: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, moves, local := holesRig(t)
			if tt.state != nil {
				local.set("billing", *tt.state)
			}
			if tt.err != nil {
				moves.err = []error{tt.err}
			}
			r.s.applyAcked(context.Background(), "billing", ids)
			got := moves.take()
			if tt.want == 0 {
				if len(got) != 0 {
					t.Fatalf("moves %+v, want none", got)
				}
			} else {
				if len(got) != 1 {
					t.Fatalf("%d moves, want 1", len(got))
				}
				m := got[0]
				wantIDs := []wire.MessageID{wire.EntryID(3, 11), wire.EntryID(3, 13), wire.EntryID(3, 22)}
				if !m.OnlyIndividually || m.Type != tt.want || m.Topic != syncTopic || m.Subscription != "billing" || !slices.Equal(m.Individually, wantIDs) {
					t.Errorf("move %+v: want only %v individually, as %v", m, wantIDs, tt.want)
				}
			}
			if n := metricstest.Counter(r.m.HolesReceived, "east", tt.outcome); n != 1 {
				t.Errorf("subscription_ack_holes_received_total{outcome=%q} = %v, want 1", tt.outcome, n)
			}
			upTo, ok := r.applied.get("east", syncTopic, "billing")
			if fenced := ok && upTo.Compare(pos(3, 22)) >= 0; fenced != tt.fenced {
				t.Errorf("echo fence at %v (%v), want at 3:22: %v", upTo, ok, tt.fenced)
			}
			if tt.fenced && !r.s.movedByUpdate("billing", pos(3, 22)) {
				t.Error("a mark-delete position the acknowledgements may have moved to counts as consumed here: it would be sent back")
			}
		})
	}
}

// TestHolesQueuedAndApplied: the queue's worker applies a subscription's
// update and then its holes; a newer list replaces one waiting.
func TestHolesQueuedAndApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q applyQueue
		var got []string
		q.put("billing", pos(7, 1))
		q.putHoles("billing", []marker.Position{pos(3, 1)})
		q.putHoles("billing", []marker.Position{pos(3, 2)})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		q.start(ctx, func(_ context.Context, sub string, at marker.Position) {
			got = append(got, "update "+sub+" "+at.String())
		},
			func(_ context.Context, sub string, ids []marker.Position) {
				got = append(got, "holes "+sub+" "+ids[0].String())
			})
		synctest.Wait()
		q.putHoles("audit", []marker.Position{pos(3, 3)})
		synctest.Wait()
		want := []string{"update billing 7:1:-1", "holes billing 3:2:-1", "holes audit 3:3:-1"}
		if !slices.Equal(got, want) {
			t.Errorf("applied %v, want %v", got, want)
		}
		cancel()
		q.stop()
	})
}

// TestHolesNotResentForMarkers: an application's subscription has the
// markers written after its ranges acknowledged (the broker's entry
// filter does so as it skips them for its consumers), the acked marker
// itself among them: that is no change, and sends nothing, or every acked
// marker would send the next one. An entry of data acknowledged is one.
func TestHolesNotResentForMarkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const b1 = "http://b1:8080"
		r, f := newServletRig(t)
		ctx := context.Background()
		f.set(b1, syncTopic, "billing", pos(1, 12))
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 15)})
		r.readBefore(map[string]marker.Position{"billing": pos(1, 12)})
		follow := func() []marker.Marker { t.Helper(); return followAcked(t, ctx, r) }
		if got := follow(); len(got) != 1 {
			t.Fatalf("%d acked markers, want 1", len(got))
		}
		// The acked marker read back at 1:16, and a snapshot request at
		// 1:18 after an entry of data at 1:17, both acknowledged by the
		// filter: the first extends the range, the second makes one.
		r.s.markerPos.note(pos(1, 16))
		r.s.markerPos.note(pos(1, 18))
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 16), rng(1, 17, 1, 18)})
		if got := follow(); len(got) != 0 {
			t.Fatalf("sent %+v for markers acknowledged", got)
		}
		// The gap at 1:17 filled by the filter too would be the same; the
		// application acknowledging the data at 1:17 is news.
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 18)})
		if got := follow(); len(got) != 1 {
			t.Fatalf("%d acked markers after the application acknowledged 1:17, want 1", len(got))
		}
		// A mark-delete position moved over markers only is no news.
		r.s.markerPos.note(pos(1, 19))
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 19)})
		if got := follow(); len(got) != 0 {
			t.Fatalf("sent %+v for a marker acknowledged at the end", got)
		}
	})
}

// TestHolesNotResentForMarkersReadBefore: a marker read just before the
// subscription's first ranges appeared, acknowledged by the filter after
// the first acked marker went, is no change either (e2e
// TestFollowHolesServlet under load sent a second acked marker for a
// snapshot request read 0.2 s before the first).
func TestHolesNotResentForMarkersReadBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const b1 = "http://b1:8080"
		r, f := newServletRig(t)
		ctx := context.Background()
		r.s.markerPos.note(pos(1, 16)) // no ranges yet: the set is not wanted
		f.set(b1, syncTopic, "billing", pos(1, 12))
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 15)})
		r.readBefore(map[string]marker.Position{"billing": pos(1, 12)})
		follow := func() []marker.Marker { t.Helper(); return followAcked(t, ctx, r) }
		if got := follow(); len(got) != 1 {
			t.Fatalf("%d acked markers, want 1", len(got))
		}
		f.setAcked(syncTopic, "billing", []marker.Range{rng(1, 13, 1, 16)})
		if got := follow(); len(got) != 0 {
			t.Fatalf("sent %+v for a marker read before the first ranges, acknowledged", got)
		}
	})
}

// TestMarkerSetBounds: wanted, the set keeps maxMarkerPos markers;
// unwanted, the last markersUnwanted.
func TestMarkerSetBounds(t *testing.T) {
	var m markerSet
	for e := range int64(100) {
		m.note(pos(1, e))
	}
	if len(m.pos) != markersUnwanted || m.pos[0] != pos(1, 100-markersUnwanted) {
		t.Fatalf("unwanted: %d kept from %v", len(m.pos), m.pos[0])
	}
	m.want(true)
	for e := int64(100); e < 1000; e++ {
		m.note(pos(1, e))
	}
	if len(m.pos) != maxMarkerPos || m.pos[0] != pos(1, 1000-maxMarkerPos) {
		t.Fatalf("wanted: %d kept from %v", len(m.pos), m.pos[0])
	}
	m.want(false)
	if len(m.pos) != markersUnwanted || m.pos[0] != pos(1, 1000-markersUnwanted) || cap(m.pos) != markersUnwanted {
		t.Fatalf("unwanted again: %d kept (cap %d) from %v", len(m.pos), cap(m.pos), m.pos[0])
	}
}

// followAcked runs a follow past the interval (a new poll) and returns
// the acked markers it wrote.
func followAcked(t *testing.T, ctx context.Context, r *syncRig) []marker.Marker {
	t.Helper()
	time.Sleep(1100 * time.Millisecond)
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	return ackedWritten(r.sink.Take())
}
