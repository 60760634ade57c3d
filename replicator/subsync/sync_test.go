package subsync

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// Unit tests of the subscription-sync wiring (sync.go) with the fakes of
// syncfakes_test.go: the sync of the pair (east, west) on one partition of
// east. Each test names the protocol rule it holds; together they fail for
// every mutation of sync.go listed in the report of issue 14 (topic check,
// sender and receiver checks, echo suppression, furthest pending update,
// Fresh, third origins).

// invalidReasons are the label values of markers_invalid_total.
var invalidReasons = []string{"wrong-topic", "signature", "malformed", "version", "other"}

func checkInvalid(t *testing.T, m *metrics.Metrics, want map[string]float64) {
	t.Helper()
	for _, r := range invalidReasons {
		if got := metricstest.Counter(m.MarkersInvalid, "east", r); got != want[r] {
			t.Errorf("markers_invalid_total{reason=%q} = %v, want %v", r, got, want[r])
		}
	}
}

func response(from, to, topic string) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshotResponse, SnapshotID: "req-1", From: from, To: to, Topic: topic,
		Local: subsynctest.Pos(7, 3), Time: 1}
}

func snapshotMarker(from, to, topic string) marker.Marker {
	return marker.Marker{Kind: marker.KindSnapshot, SnapshotID: "snap-x", From: from, To: to, Topic: topic,
		Local: subsynctest.Pos(1, 2), Remote: subsynctest.Pos(7, 3), Time: 1}
}

func update(from, to, topic string) marker.Marker {
	return marker.Marker{Kind: marker.KindUpdate, From: from, To: to, Topic: topic,
		Subscription: "billing", Local: subsynctest.Pos(7, 3), Remote: subsynctest.Pos(5, 7), Time: time.Now().UnixMilli()}
}

// TestSyncMarkerRouting: only this sidecar's own request, response and
// update markers towards this remote are forwarded; snapshot markers stay
// local and feed the cache; only the remote's copied updates addressed to
// this cluster are queued for applying; only the remote's copied requests
// are answered; a marker naming another partition is counted and dropped.
func TestSyncMarkerRouting(t *testing.T) {
	tests := []struct {
		name       string
		mk         marker.Marker
		copiedFrom string // "": written into this partition here
		forward    bool
		apply      map[string]marker.Position // updates queued for applying
		written    []marker.Kind              // markers the sync wrote in answer
		cached     bool                       // a snapshot entered the cache
		invalid    string                     // reason counted, "" none
		// replay: a marker of ours this process did not write (someone
		// published it again); every other one of ours was written here.
		replay bool
		// producer is the name the marker was written under ("": an
		// application's producer).
		producer string
	}{
		// Ours, towards this remote.
		{name: "own request to this remote", mk: subsynctest.Request("east", "west", syncTopic), forward: true},
		{name: "own response to this remote", mk: response("east", "west", syncTopic), forward: true},
		{name: "own update to this remote", mk: update("east", "west", syncTopic), forward: true},
		{name: "own snapshot stays local and is cached", mk: snapshotMarker("east", "west", syncTopic), cached: true},
		// Replays: a valid marker of ours that this process did not write.
		{name: "own request published again", mk: subsynctest.Request("east", "west", syncTopic), replay: true, invalid: "not-written-here"},
		{name: "own update published again", mk: update("east", "west", syncTopic), replay: true, invalid: "not-written-here"},
		{name: "own update of another instance (HA) is dropped, not counted", mk: update("east", "west", syncTopic), replay: true,
			producer: "geo-sidecar.markers.east-->west"},

		// Receiver check (To == remote).
		{name: "own request to another remote", mk: subsynctest.Request("east", "north", syncTopic)},
		{name: "own update to another remote", mk: update("east", "north", syncTopic)},
		{name: "own snapshot of another pair", mk: snapshotMarker("east", "north", syncTopic)},
		// Sender check (From == local).
		{name: "uncopied request from another sender", mk: subsynctest.Request("north", "west", syncTopic)},
		{name: "uncopied update from another sender", mk: update("north", "west", syncTopic)},
		// Not copied: a copy claiming to be ours is not forwarded.
		{name: "copied request claiming to be ours", mk: subsynctest.Request("east", "west", syncTopic), copiedFrom: "west"},
		{name: "copied update claiming to be ours", mk: update("east", "west", syncTopic), copiedFrom: "north"},
		// Topic check.
		{name: "own request for another partition", mk: subsynctest.Request("east", "west", syncOtherTopic), invalid: "wrong-topic"},
		{name: "own update for another partition", mk: update("east", "west", syncOtherTopic), invalid: "wrong-topic"},

		// The remote's, towards this cluster.
		{name: "remote's update is queued", mk: update("west", "east", syncTopic), copiedFrom: "west",
			apply: map[string]marker.Position{"billing": subsynctest.Pos(5, 7)}},
		{name: "remote's request is answered", mk: subsynctest.Request("west", "east", syncTopic), copiedFrom: "west",
			written: []marker.Kind{marker.KindSnapshotResponse}},
		{name: "remote's snapshot marker is not ours", mk: snapshotMarker("west", "east", syncTopic), copiedFrom: "west"},
		{name: "remote's response to no request of ours", mk: response("west", "east", syncTopic), copiedFrom: "west"},
		// Copied check.
		{name: "uncopied update from the remote", mk: update("west", "east", syncTopic)},
		{name: "uncopied request from the remote", mk: subsynctest.Request("west", "east", syncTopic)},
		// Sender check (From == remote).
		{name: "third cluster's update for us", mk: update("north", "east", syncTopic), copiedFrom: "north"},
		{name: "third cluster's request for us", mk: subsynctest.Request("north", "east", syncTopic), copiedFrom: "north"},
		// Receiver check (To == local).
		{name: "remote's update for another cluster", mk: update("west", "north", syncTopic), copiedFrom: "west"},
		// Topic check.
		{name: "remote's update for another partition", mk: update("west", "east", syncOtherTopic), copiedFrom: "west",
			invalid: "wrong-topic"},
		{name: "remote's request for another partition", mk: subsynctest.Request("west", "east", syncOtherTopic), copiedFrom: "west",
			invalid: "wrong-topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			if tt.copiedFrom == "" && !tt.replay {
				r.s.gate.outbox.put(tt.mk)
			}
			msg := subsynctest.MarkerMsg(t, 3, 4, tt.mk, syncKey, tt.copiedFrom)
			msg.Producer = tt.producer
			if got := subsynctest.ReadMarker(context.Background(), r.s, msg); got != tt.forward {
				t.Errorf("markerAt() forward = %v, want %v", got, tt.forward)
			}
			if got := r.pending(); !maps.Equal(got, tt.apply) {
				t.Errorf("queued updates = %v, want %v", got, tt.apply)
			}
			written := r.sink.Take()
			if got := subsynctest.KindsOf(written); !slices.Equal(got, tt.written) {
				t.Errorf("markers written = %v, want %v", got, tt.written)
			}
			for _, mk := range written {
				if mk.Kind == marker.KindSnapshotResponse {
					want := marker.Marker{Kind: marker.KindSnapshotResponse, SnapshotID: "req-1", From: "east", To: "west",
						Topic: syncTopic, Local: subsynctest.Pos(3, 4), Time: mk.Time}
					if !equalMarker(mk, want) {
						t.Errorf("response = %+v, want %+v", mk, want)
					}
					if got := metricstest.Counter(r.m.MarkersWritten, "east", "west", "snapshot-response"); got != 1 {
						t.Errorf("markers_written_total{kind=snapshot-response} = %v, want 1", got)
					}
				}
			}
			snap, cached := r.s.Machine.Covering(subsynctest.Pos(1, 2))
			if cached != tt.cached {
				t.Errorf("snapshot cached = %v (%+v), want %v", cached, snap, tt.cached)
			}
			want := map[string]float64{}
			if tt.invalid != "" {
				want[tt.invalid] = 1
			}
			checkInvalid(t, r.m, want)
		})
	}
}

func equalMarker(a, b marker.Marker) bool {
	return a.Kind == b.Kind && a.SnapshotID == b.SnapshotID && a.From == b.From && a.To == b.To &&
		a.Topic == b.Topic && a.Local == b.Local && a.Remote == b.Remote &&
		a.Subscription == b.Subscription && a.Time == b.Time && maps.Equal(a.Watermarks, b.Watermarks)
}

// TestSyncWriteFailure: a marker that could not be written is not counted
// as written, and the sync carries on.
func TestSyncWriteFailure(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	r.sink.FailNext(1)
	req := subsynctest.MarkerMsg(t, 3, 4, subsynctest.Request("west", "east", syncTopic), syncKey, "west")
	subsynctest.ReadMarker(context.Background(), r.s, req)
	if got := metricstest.Counter(r.m.MarkersWritten, "east", "west", "snapshot-response"); got != 0 {
		t.Errorf("markers_written_total{kind=snapshot-response} = %v after a failed write, want 0", got)
	}
	// Delivered again (a new session): judged already, not answered again.
	subsynctest.ReadMarker(context.Background(), r.s, req)
	if got := metricstest.Counter(r.m.MarkersWritten, "east", "west", "snapshot-response"); got != 0 {
		t.Errorf("markers_written_total{kind=snapshot-response} = %v after a redelivery, want 0", got)
	}
	// The remote's next request is answered.
	subsynctest.ReadMarker(context.Background(), r.s, subsynctest.MarkerMsg(t, 3, 5, subsynctest.Request("west", "east", syncTopic), syncKey, "west"))
	if got := metricstest.Counter(r.m.MarkersWritten, "east", "west", "snapshot-response"); got != 1 {
		t.Errorf("markers_written_total{kind=snapshot-response} = %v, want 1", got)
	}
}

// TestSyncInvalidMarkers: a marker that does not decode or verify is
// counted by reason, never forwarded, never acted on, and does not stop the
// sync.
func TestSyncInvalidMarkers(t *testing.T) {
	valid := func(t *testing.T, mk marker.Marker) []byte {
		p, err := marker.Encode(mk, syncKey)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		payload func(t *testing.T, mk marker.Marker) []byte
		reason  string
	}{
		{"signed with another key", func(t *testing.T, mk marker.Marker) []byte {
			p, err := marker.Encode(mk, syncOtherKey)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}, "signature"},
		{"altered after signing", func(t *testing.T, mk marker.Marker) []byte {
			p := valid(t, mk)
			p[len(p)/2] ^= 1
			return p
		}, "signature"},
		{"truncated", func(t *testing.T, mk marker.Marker) []byte { return valid(t, mk)[:20] }, "malformed"},
		{"empty payload", func(*testing.T, marker.Marker) []byte { return nil }, "malformed"},
		{"unknown version", func(t *testing.T, mk marker.Marker) []byte {
			p := valid(t, mk)
			p[0] = 9
			return p
		}, "version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				mk         marker.Marker
				copiedFrom string
			}{
				{subsynctest.Request("east", "west", syncTopic), ""},
				{update("east", "west", syncTopic), ""},
				{update("west", "east", syncTopic), "west"},
				{subsynctest.Request("west", "east", syncTopic), "west"},
			} {
				r := newSyncRig(t, rigConfig{})
				msg := subsynctest.MarkerMsg(t, 3, 4, c.mk, syncKey, c.copiedFrom)
				msg.Body = tt.payload(t, c.mk)
				for range 2 {
					if subsynctest.ReadMarker(context.Background(), r.s, msg) {
						t.Errorf("%v from %q: forwarded", c.mk.Kind, c.copiedFrom)
					}
				}
				if got := r.pending(); len(got) > 0 {
					t.Errorf("%v from %q: queued %v", c.mk.Kind, c.copiedFrom, got)
				}
				if got := r.sink.Take(); len(got) > 0 {
					t.Errorf("%v from %q: wrote %v", c.mk.Kind, c.copiedFrom, subsynctest.KindsOf(got))
				}
				checkInvalid(t, r.m, map[string]float64{tt.reason: 2})
				// The sync carries on: a valid marker after it is handled.
				r.s.gate.outbox.put(subsynctest.Request("east", "west", syncTopic))
				ok := subsynctest.MarkerMsg(t, 3, 5, subsynctest.Request("east", "west", syncTopic), syncKey, "")
				if !subsynctest.ReadMarker(context.Background(), r.s, ok) {
					t.Errorf("a valid request after an invalid marker is not forwarded")
				}
			}
		})
	}
}

// TestSyncPendingUpdateFurthest: of the updates received for a
// subscription before they are applied, the furthest wins, whatever their
// order; subscriptions are independent.
func TestSyncPendingUpdateFurthest(t *testing.T) {
	type upd struct {
		sub string
		at  marker.Position
	}
	tests := []struct {
		name string
		seq  []upd
		want map[string]marker.Position
	}{
		{"one", []upd{{"billing", subsynctest.Pos(5, 7)}}, map[string]marker.Position{"billing": subsynctest.Pos(5, 7)}},
		{"later one behind", []upd{{"billing", subsynctest.Pos(5, 7)}, {"billing", subsynctest.Pos(5, 3)}},
			map[string]marker.Position{"billing": subsynctest.Pos(5, 7)}},
		{"later one ahead", []upd{{"billing", subsynctest.Pos(5, 3)}, {"billing", subsynctest.Pos(5, 7)}},
			map[string]marker.Position{"billing": subsynctest.Pos(5, 7)}},
		{"older ledger last", []upd{{"billing", subsynctest.Pos(6, 0)}, {"billing", subsynctest.Pos(5, 9)}, {"billing", subsynctest.Pos(5, 8)}},
			map[string]marker.Position{"billing": subsynctest.Pos(6, 0)}},
		{"batch index", []upd{{"billing", marker.Position{Ledger: 5, Entry: 7, Batch: 2}},
			{"billing", marker.Position{Ledger: 5, Entry: 7, Batch: 1}}},
			map[string]marker.Position{"billing": {Ledger: 5, Entry: 7, Batch: 2}}},
		{"per subscription", []upd{{"billing", subsynctest.Pos(5, 7)}, {"audit", subsynctest.Pos(5, 2)}, {"billing", subsynctest.Pos(5, 1)}, {"audit", subsynctest.Pos(5, 1)}},
			map[string]marker.Position{"billing": subsynctest.Pos(5, 7), "audit": subsynctest.Pos(5, 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSyncRig(t, rigConfig{})
				for i, u := range tt.seq {
					mk := update("west", "east", syncTopic)
					mk.Subscription, mk.Remote, mk.Time = u.sub, u.at, mk.Time+int64(i) // written in this order
					subsynctest.ReadMarker(context.Background(), r.s, subsynctest.MarkerMsg(t, 3, int64(10+i), mk, syncKey, "west"))
				}
				if got := r.pending(); !maps.Equal(got, tt.want) {
					t.Errorf("queued = %v, want %v", got, tt.want)
				}
				// The apply loop applies those, once each.
				for sub := range tt.want {
					r.subs.Set(sub, subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 0)})
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r.s.startApplying(ctx)
				synctest.Wait()
				var want []string
				for sub, at := range tt.want {
					want = append(want, "reset "+sub+" "+subsynctest.Pos(at.Ledger, at.Entry).String())
				}
				got := r.subs.TakeCalls()
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("admin calls = %v, want %v", got, want)
				}
				if got := r.pending(); len(got) > 0 {
					t.Errorf("still queued after applying: %v", got)
				}
			})
		})
	}
}

// TestSyncApplyUpdate: a received update moves the subscription here
// forward only (at the entry), creates it if missing, leaves it alone while
// consumers are attached, counts the outcome, and records where it put the
// subscription (for echo suppression) only when it moved it.
func TestSyncApplyUpdate(t *testing.T) {
	at := marker.Position{Ledger: 1, Entry: 20, Batch: 3}
	tests := []struct {
		name     string
		state    *subscription.State // nil: missing
		stateErr error
		outcome  subscription.Outcome
		calls    []string
		applied  bool
	}{
		{name: "missing: created at the entry", outcome: subscription.Created,
			calls: []string{"create billing 1:20:-1"}, applied: true},
		{name: "behind: moved forward to the entry", state: &subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 10)},
			outcome: subscription.Applied, calls: []string{"reset billing 1:20:-1"}, applied: true},
		{name: "at the entry: not moved back", state: &subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 20)},
			outcome: subscription.RefusedBackwards},
		{name: "ahead: not moved back", state: &subscription.State{Exists: true, MarkDelete: subsynctest.Pos(2, 0)},
			outcome: subscription.RefusedBackwards},
		{name: "consumers attached", state: &subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 10), Consumers: 2},
			outcome: subscription.RefusedConsumers},
		{name: "admin error", stateErr: errAdmin, outcome: subscription.Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSyncRig(t, rigConfig{})
				if tt.state != nil {
					r.subs.Set("billing", *tt.state)
				}
				r.subs.StateErr = tt.stateErr
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r.s.startApplying(ctx)
				mk := update("west", "east", syncTopic)
				mk.Remote = at
				subsynctest.ReadMarker(ctx, r.s, subsynctest.MarkerMsg(t, 3, 4, mk, syncKey, "west"))
				synctest.Wait()
				if got := r.subs.TakeCalls(); !slices.Equal(got, tt.calls) {
					t.Errorf("admin calls = %v, want %v", got, tt.calls)
				}
				for _, o := range []subscription.Outcome{subscription.Applied, subscription.Created,
					subscription.RefusedConsumers, subscription.RefusedBackwards, subscription.Failed} {
					want := 0.0
					if o == tt.outcome {
						want = 1
					}
					got := 0.0
					for _, route := range subscription.Routes {
						got += metricstest.Counter(r.m.UpdatesApplied, "east", string(route), string(o))
					}
					if got != want {
						t.Errorf("subscription_updates_received_total{outcome=%q} = %v, want %v", o, got, want)
					}
				}
				// Positioned at 1:20, billing's mark-delete position is 1:19.
				got, ok := r.applied.get("east", syncTopic, "billing")
				if ok != tt.applied || (ok && got != subsynctest.Pos(1, 19)) {
					t.Errorf("applied position = %v, %v; want set=%v up to 1:19:-1", got, ok, tt.applied)
				}
			})
		})
	}
}

// cacheSnapshot puts a snapshot (a here, b on the remote) into the rig's
// cache the way the sync learns one: by reading its own snapshot marker.
func cacheSnapshot(t *testing.T, r *syncRig, id string, a, b marker.Position) {
	t.Helper()
	mk := marker.Marker{Kind: marker.KindSnapshot, SnapshotID: id, From: "east", To: "west", Topic: syncTopic,
		Local: a, Remote: b, Time: time.Now().UnixMilli()}
	if subsynctest.ReadMarker(context.Background(), r.s, subsynctest.MarkerMsg(t, a.Ledger, a.Entry+1, mk, syncKey, "")) {
		t.Fatal("a snapshot marker was forwarded")
	}
}

func updatesWritten(mks []marker.Marker) map[string]marker.Marker {
	out := map[string]marker.Marker{}
	for _, mk := range mks {
		if mk.Kind == marker.KindUpdate {
			out[mk.Subscription] = mk
		}
	}
	return out
}

// TestSyncFollowSendsUpdates: a tracked subscription whose mark-delete
// position passed a snapshot gets one update to the remote, carrying the
// snapshot's positions; untracked ones get none.
func TestSyncFollowSendsUpdates(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	ctx := context.Background()
	cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
	r.local.MD = map[string]marker.Position{
		"billing":  subsynctest.Pos(1, 12), // passed it
		"audit":    subsynctest.Pos(1, 5),  // not yet
		"adhoc":    subsynctest.Pos(1, 12), // untracked
		"geo.west": subsynctest.Pos(1, 12),
	}
	r.readBefore(r.local.MD)
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	got := updatesWritten(r.sink.Take())
	want := marker.Marker{Kind: marker.KindUpdate, From: "east", To: "west", Topic: syncTopic,
		Subscription: "billing", Local: subsynctest.Pos(1, 10), Remote: subsynctest.Pos(7, 20)}
	if len(got) != 1 {
		t.Fatalf("updates = %v, want one for billing", got)
	}
	mk := got["billing"]
	want.Time = mk.Time
	if mk.Time == 0 || !equalMarker(mk, want) {
		t.Errorf("update = %+v, want %+v", mk, want)
	}
	if got := metricstest.Counter(r.m.UpdatesSent, "east", "west"); got != 1 {
		t.Errorf("subscription_updates_sent_total = %v, want 1", got)
	}
	if got := metricstest.Counter(r.m.MarkersWritten, "east", "west", "update"); got != 1 {
		t.Errorf("markers_written_total{kind=update} = %v, want 1", got)
	}

	// Once only.
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.sink.Take(); len(got) > 0 {
		t.Errorf("second follow wrote %v", subsynctest.KindsOf(got))
	}
	// audit passes it too; a newer snapshot for billing.
	r.local.SetMD("audit", subsynctest.Pos(1, 11))
	cacheSnapshot(t, r, "s2", subsynctest.Pos(1, 30), subsynctest.Pos(7, 40))
	r.local.SetMD("billing", subsynctest.Pos(1, 31))
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	got = updatesWritten(r.sink.Take())
	if len(got) != 2 || got["audit"].Remote != subsynctest.Pos(7, 20) || got["billing"].Remote != subsynctest.Pos(7, 40) {
		t.Errorf("updates = %v, want audit to 7:20, billing to 7:40", got)
	}
}

// TestSyncFollowEchoSuppression: a mark-delete position that a remote's
// update set here (still before the position applied) is not sent on as an
// update; once consumers here pass it, updates resume. Only this cluster's
// record for this partition counts.
func TestSyncFollowEchoSuppression(t *testing.T) {
	tests := []struct {
		name      string
		cluster   string
		topic     string
		appliedAt marker.Position
		md        marker.Position
		wantSent  bool
	}{
		{"set by an update, not consumed since", "east", syncTopic, subsynctest.Pos(1, 15), subsynctest.Pos(1, 14), false},
		{"set by an update further back in the ledger", "east", syncTopic, subsynctest.Pos(2, 0), subsynctest.Pos(1, 14), false},
		{"consumed up to the applied entry", "east", syncTopic, subsynctest.Pos(1, 15), subsynctest.Pos(1, 15), true},
		{"consumed past it", "east", syncTopic, subsynctest.Pos(1, 15), subsynctest.Pos(1, 16), true},
		{"another cluster's record", "west", syncTopic, subsynctest.Pos(1, 15), subsynctest.Pos(1, 14), true},
		{"another partition's record", "east", syncOtherTopic, subsynctest.Pos(1, 15), subsynctest.Pos(1, 14), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
			r.applied.set(tt.cluster, tt.topic, "billing", tt.appliedAt)
			r.local.SetMD("billing", tt.md)
			r.readBefore(r.local.MD)
			if err := r.s.follow(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, sent := updatesWritten(r.sink.Take())["billing"]
			if sent != tt.wantSent {
				t.Errorf("update sent = %v, want %v", sent, tt.wantSent)
			}
		})
	}
}

// TestSyncReceivedPositionNotEchoed: end to end, an update received from
// the remote moves the subscription here, and the position it set is not
// sent back in an update, although a snapshot covers it.
func TestSyncReceivedPositionNotEchoed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r.s.startApplying(ctx)
		cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
		r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 3)})
		mk := update("west", "east", syncTopic)
		mk.Remote = subsynctest.Pos(1, 15) // where billing on west was, mapped here
		subsynctest.ReadMarker(ctx, r.s, subsynctest.MarkerMsg(t, 3, 4, mk, syncKey, "west"))
		synctest.Wait()
		if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 1:15:-1"}) {
			t.Fatalf("admin calls = %v, want the reset to 1:15", got)
		}
		st, _ := r.subs.State(ctx, syncTopic, "billing")
		r.local.SetMD("billing", st.MarkDelete) // 1:14, set by the update
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := r.sink.Take(); len(got) > 0 {
			t.Errorf("the received position was echoed: %+v", got)
		}
		// Consumers here move on: updates resume.
		r.local.SetMD("billing", subsynctest.Pos(1, 16))
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); got["billing"].Remote != subsynctest.Pos(7, 20) {
			t.Errorf("updates after consuming past it = %v, want billing to 7:20", got)
		}
	})
}

// TestSyncFollowPrunes: the cache is pruned to the slowest tracked
// subscription whose position was consumed here; untracked subscriptions
// and positions set by updates do not hold old snapshots.
func TestSyncFollowPrunes(t *testing.T) {
	tests := []struct {
		name   string
		md     map[string]marker.Position
		echoed map[string]marker.Position // applied positions
		kept   bool                       // the old snapshot (1:5) is still cached
	}{
		{"slowest tracked is past both", map[string]marker.Position{"billing": subsynctest.Pos(1, 12), "audit": subsynctest.Pos(1, 11)}, nil, false},
		{"slowest tracked needs the old one", map[string]marker.Position{"billing": subsynctest.Pos(1, 12), "audit": subsynctest.Pos(1, 6)}, nil, true},
		{"untracked behind", map[string]marker.Position{"billing": subsynctest.Pos(1, 12), "adhoc": subsynctest.Pos(1, 6)}, nil, false},
		{"tracked behind at a position set by an update", map[string]marker.Position{"billing": subsynctest.Pos(1, 12), "audit": subsynctest.Pos(1, 6)},
			map[string]marker.Position{"audit": subsynctest.Pos(1, 7)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			cacheSnapshot(t, r, "old", subsynctest.Pos(1, 5), subsynctest.Pos(7, 5))
			cacheSnapshot(t, r, "new", subsynctest.Pos(1, 10), subsynctest.Pos(7, 10))
			r.local.MD = tt.md
			for sub, at := range tt.echoed {
				r.applied.set("east", syncTopic, sub, at)
			}
			r.readBefore(tt.md)
			if err := r.s.follow(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, kept := r.s.Machine.Covering(subsynctest.Pos(1, 6))
			if kept != tt.kept {
				t.Errorf("old snapshot kept = %v, want %v", kept, tt.kept)
			}
			if s, ok := r.s.Machine.Covering(subsynctest.Pos(1, 12)); !ok || s.ID != "new" {
				t.Errorf("Covering(1:12) = %+v, %v; want the new snapshot", s, ok)
			}
		})
	}
}

// TestSyncFollowRetriesFailedWrite: an update whose write failed is sent
// again at the next follow.
func TestSyncFollowRetriesFailedWrite(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	ctx := context.Background()
	cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
	r.local.SetMD("billing", subsynctest.Pos(1, 12))
	r.readBefore(r.local.MD)
	r.sink.FailNext(1)
	if err := r.s.follow(ctx); err == nil {
		t.Error("follow with a failing write returned nil")
	}
	if got := metricstest.Counter(r.m.UpdatesSent, "east", "west"); got != 0 {
		t.Errorf("subscription_updates_sent_total = %v after a failed write, want 0", got)
	}
	if err := r.s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if got := updatesWritten(r.sink.Take()); got["billing"].Remote != subsynctest.Pos(7, 20) {
		t.Errorf("updates = %v, want billing to 7:20 again", got)
	}
}

// TestSyncFollowAdminErrors: admin failures end the round with an error
// and leave the lag gauges alone.
func TestSyncFollowAdminErrors(t *testing.T) {
	tests := []struct {
		name string
		set  func(r *syncRig)
	}{
		{"local mark-delete positions", func(r *syncRig) { r.local.MDErr = errAdmin }},
		{"local backlogs", func(r *syncRig) { r.local.BacklogErr = errAdmin }},
		{"remote backlogs", func(r *syncRig) { r.remote.BacklogErr = errAdmin }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{})
			r.local.MD = map[string]marker.Position{"billing": subsynctest.Pos(1, 1)}
			r.local.Backlog = map[string]int64{"billing": 1}
			r.remote.Backlog = map[string]int64{"billing": 5}
			tt.set(r)
			if err := r.s.follow(context.Background()); err == nil {
				t.Error("follow returned nil")
			}
			if got := lagSeries(t, r.m); len(got) > 0 {
				t.Errorf("lag series = %v, want none", got)
			}
		})
	}
}

// TestSyncLag: per tracked subscription present on both sides, the lag in
// entries is the remote backlog minus the local one (floored at 0), and
// the lag in seconds the age of the snapshot behind the last update sent,
// while the remote trails. A subscription deleted since has no series.
func TestSyncLag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		ctx := context.Background()
		cacheSnapshot(t, r, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20)) // completed now
		r.local.MD = map[string]marker.Position{"billing": subsynctest.Pos(1, 12), "audit": subsynctest.Pos(1, 12)}
		r.local.Backlog = map[string]int64{"billing": 3, "audit": 9, "adhoc": 1, "only-here": 2, "gone": 4}
		r.remote.Backlog = map[string]int64{"billing": 10, "audit": 4, "adhoc": 50, "only-there": 7}
		r.s.Tracked = func(sub string) bool { return sub != "adhoc" }

		if err := r.s.lag(ctx); err != nil {
			t.Fatal(err)
		}
		want := map[string][2]float64{"billing": {7, 0}, "audit": {0, 0}}
		if got := lagSeries(t, r.m); !maps.Equal(got, want) {
			t.Errorf("before any update: lag = %v, want %v", got, want)
		}

		time.Sleep(2 * time.Second)
		if err := r.s.follow(ctx); err != nil { // sends updates, then sets lag
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		r.remote.Backlog["billing"] = 12
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		want = map[string][2]float64{"billing": {9, 7}, "audit": {0, 0}}
		if got := lagSeries(t, r.m); !maps.Equal(got, want) {
			t.Errorf("after updates: lag = %v, want %v", got, want)
		}

		// audit is deleted (a drill's subscription, say): its series goes.
		delete(r.local.Backlog, "audit")
		delete(r.remote.Backlog, "audit")
		if err := r.s.lag(ctx); err != nil {
			t.Fatal(err)
		}
		want = map[string][2]float64{"billing": {9, 7}}
		if got := lagSeries(t, r.m); !maps.Equal(got, want) {
			t.Errorf("after audit was deleted: lag = %v, want %v", got, want)
		}
	})
}

// TestSyncDataFeedsMachine: every data message is reported to the snapshot
// machine: a third origin's copy teaches its watermark, and a copy whose
// origin id does not parse counts as local data.
func TestSyncDataFeedsMachine(t *testing.T) {
	tests := []struct {
		name        string
		msg         *subsynctest.Msg
		wantUnknown []string
	}{
		{"local data", subsynctest.MsgAt(3, 1, -1, "x"), []string{"north"}},
		{"third origin's copy", subsynctest.CopyMsg(3, 1, "north", subsynctest.Pos(40, 2)), nil},
		{"remote's copy", subsynctest.CopyMsg(3, 1, "west", subsynctest.Pos(40, 2)), []string{"north"}},
		{"copy with a bad origin id", func() *subsynctest.Msg {
			m := subsynctest.CopyMsg(3, 1, "north", subsynctest.Pos(40, 2))
			m.Props[marker.PropOriginID] = "40:2"
			return m
		}(), []string{"north"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, rigConfig{third: []string{"north"}})
			subsynctest.ReadData(context.Background(), r.s, tt.msg)
			if got := r.s.Machine.Unknown(); !slices.Equal(got, tt.wantUnknown) {
				t.Errorf("unknown watermarks = %v, want %v", got, tt.wantUnknown)
			}
			// Any data message makes a request due.
			if got := subsynctest.KindsOf(r.s.Machine.Tick(true)); !slices.Equal(got, []marker.Kind{marker.KindSnapshotRequest}) {
				t.Errorf("Tick after data = %v, want a request", got)
			}
		})
	}
}

// TestSyncRebuild: at start, the partition's history is re-read when a
// tracked subscription is there or a watermark is unknown: this pair's own
// snapshot markers refill the cache, and this sidecar's own earlier
// responses teach the watermarks, so that requests are answered at once.
// Nothing else counts.
func TestSyncRebuild(t *testing.T) {
	third := []string{"north"}
	ownSnap := func(id string, a, b marker.Position) marker.Marker {
		return marker.Marker{Kind: marker.KindSnapshot, SnapshotID: id, From: "east", To: "west", Topic: syncTopic,
			Local: a, Remote: b, Time: 1}
	}
	ownResp := func(wm marker.Position) marker.Marker {
		mk := response("east", "west", syncTopic)
		mk.Watermarks = map[string]marker.Position{"north": wm}
		return mk
	}
	with := func(mk marker.Marker, f func(*marker.Marker)) marker.Marker { f(&mk); return mk }
	type hmsg struct {
		mk         *marker.Marker // nil: data
		key        []byte
		copiedFrom string
		data       *subsynctest.Msg
	}
	mk := func(m marker.Marker) hmsg { return hmsg{mk: &m} }
	tests := []struct {
		name    string
		rc      rigConfig
		history []hmsg
		nextErr bool
		openErr bool

		opened bool
		cached string // ID of the snapshot covering 1:100, "" none
		// A request read after the rebuild goes unanswered, or is answered
		// with wm for north (with a third origin).
		unanswered bool
		wm         marker.Position
	}{
		{name: "nothing tracked, no third origin: not read",
			rc:      rigConfig{cursors: []string{"adhoc", "geo.west"}},
			history: []hmsg{mk(ownSnap("own", subsynctest.Pos(1, 4), subsynctest.Pos(7, 4)))}},
		{name: "cursors unknown, no third origin: not read",
			history: []hmsg{mk(ownSnap("own", subsynctest.Pos(1, 4), subsynctest.Pos(7, 4)))}},
		{name: "nothing tracked, fresh: not read",
			rc:      rigConfig{third: third, fresh: true, cursors: []string{"adhoc"}},
			history: []hmsg{mk(ownResp(subsynctest.Pos(40, 2)))},
			wm:      marker.NoneSeen},
		{name: "tracked subscription: own snapshot markers re-read",
			rc: rigConfig{cursors: []string{"adhoc", "billing"}},
			history: []hmsg{
				{data: subsynctest.MsgAt(1, 1, -1, "x")},
				mk(ownSnap("own", subsynctest.Pos(1, 4), subsynctest.Pos(7, 4))),
				mk(subsynctest.Request("east", "west", syncTopic)),
				mk(with(ownSnap("other-pair", subsynctest.Pos(1, 50), subsynctest.Pos(7, 50)), func(m *marker.Marker) { m.To = "north" })),
				mk(with(ownSnap("other-topic", subsynctest.Pos(1, 50), subsynctest.Pos(7, 50)), func(m *marker.Marker) { m.Topic = syncOtherTopic })),
				{mk: new(ownSnap("bad-key", subsynctest.Pos(1, 50), subsynctest.Pos(7, 50))), key: syncOtherKey},
				{mk: new(with(ownSnap("remote's", subsynctest.Pos(1, 50), subsynctest.Pos(7, 50)), func(m *marker.Marker) { m.From, m.To = "west", "east" })), copiedFrom: "west"},
			},
			opened: true, cached: "own"},
		{name: "tracked subscription, read error: what was read stays",
			rc:      rigConfig{cursors: []string{"billing"}},
			history: []hmsg{mk(ownSnap("own", subsynctest.Pos(1, 4), subsynctest.Pos(7, 4)))}, nextErr: true,
			opened: true, cached: "own"},
		{name: "tracked subscription, reader does not open",
			rc:      rigConfig{cursors: []string{"billing"}},
			history: []hmsg{mk(ownSnap("own", subsynctest.Pos(1, 4), subsynctest.Pos(7, 4)))}, openErr: true,
			opened: true},
		{name: "unknown watermark, no third-origin data: stays unknown",
			rc:      rigConfig{third: third},
			history: []hmsg{{data: subsynctest.MsgAt(1, 1, -1, "x")}, {data: subsynctest.CopyMsg(1, 2, "west", subsynctest.Pos(40, 9))}},
			opened:  true, unanswered: true},
		{name: "unknown watermark learned from own response",
			rc:      rigConfig{third: third, cursors: []string{"adhoc"}},
			history: []hmsg{mk(ownResp(subsynctest.Pos(40, 2)))},
			opened:  true, wm: subsynctest.Pos(40, 2)},
		{name: "own response naming none seen",
			rc:      rigConfig{third: third},
			history: []hmsg{mk(ownResp(marker.NoneSeen))},
			opened:  true, wm: marker.NoneSeen},
		{name: "the remote's response does not count",
			rc:      rigConfig{third: third},
			history: []hmsg{{mk: new(with(ownResp(subsynctest.Pos(40, 9)), func(m *marker.Marker) { m.From, m.To = "west", "east" })), copiedFrom: "west"}},
			opened:  true, unanswered: true},
		{name: "own response to another remote does not count",
			rc:      rigConfig{third: third},
			history: []hmsg{mk(with(ownResp(subsynctest.Pos(40, 9)), func(m *marker.Marker) { m.To = "south" }))},
			opened:  true, unanswered: true},
		{name: "another sidecar's response to this remote does not count",
			rc:      rigConfig{third: third},
			history: []hmsg{mk(with(ownResp(subsynctest.Pos(40, 9)), func(m *marker.Marker) { m.From = "south" }))},
			opened:  true, unanswered: true},
		{name: "own response for another partition does not count",
			rc:      rigConfig{third: third},
			history: []hmsg{mk(with(ownResp(subsynctest.Pos(40, 9)), func(m *marker.Marker) { m.Topic = syncOtherTopic }))},
			opened:  true, unanswered: true},
		{name: "response signed with another key does not count",
			rc:      rigConfig{third: third},
			history: []hmsg{{mk: new(ownResp(subsynctest.Pos(40, 9))), key: syncOtherKey}},
			opened:  true, unanswered: true},
		{name: "tracked and unknown: both",
			rc:      rigConfig{third: third, cursors: []string{"billing"}},
			history: []hmsg{mk(ownSnap("own", subsynctest.Pos(1, 4), subsynctest.Pos(7, 4))), mk(ownResp(subsynctest.Pos(40, 3)))},
			opened:  true, cached: "own", wm: subsynctest.Pos(40, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSyncRig(t, tt.rc)
			for i, h := range tt.history {
				switch {
				case h.data != nil:
					r.hist.Msgs = append(r.hist.Msgs, h.data)
				default:
					key := h.key
					if key == nil {
						key = syncKey
					}
					r.hist.Msgs = append(r.hist.Msgs, subsynctest.MarkerMsg(t, 1, int64(60+i), *h.mk, key, h.copiedFrom))
				}
			}
			if tt.nextErr {
				r.hist.NextErr = errAdmin
			}
			if tt.openErr {
				r.hist.OpenErr = errAdmin
			}
			r.s.rebuild(context.Background(), nil)
			if opened := r.hist.Opened > 0; opened != tt.opened {
				t.Errorf("history read = %v, want %v", opened, tt.opened)
			}
			if r.hist.Opened > 0 && !tt.openErr && r.hist.Closed != 1 {
				t.Errorf("reader closed %d times, want once", r.hist.Closed)
			}
			if got := r.sink.Take(); len(got) > 0 {
				t.Errorf("rebuild wrote %v", subsynctest.KindsOf(got))
			}
			s, ok := r.s.Machine.Covering(subsynctest.Pos(1, 100))
			if (tt.cached == "") == ok || (ok && s.ID != tt.cached) {
				t.Errorf("cached snapshot = %+v, %v; want %q", s, ok, tt.cached)
			}
			// A request from the remote read now.
			subsynctest.ReadMarker(context.Background(), r.s, subsynctest.MarkerMsg(t, 2, 1, subsynctest.Request("west", "east", syncTopic), syncKey, "west"))
			written := r.sink.Take()
			switch {
			case tt.unanswered && len(written) > 0:
				t.Errorf("request answered with %+v, want no answer (watermark unknown)", written)
			case !tt.unanswered && len(written) != 1:
				t.Errorf("request answered with %v, want one response", subsynctest.KindsOf(written))
			case !tt.unanswered:
				want := map[string]marker.Position{}
				if len(tt.rc.third) > 0 {
					want["north"] = tt.wm
				}
				if got := written[0].Watermarks; !maps.Equal(got, want) {
					t.Errorf("response watermarks = %v, want %v", got, want)
				}
			}
		})
	}
}

// TestSyncRun: the loop requests snapshots while data arrives and the link
// is up, follows the subscriptions, applies received updates, counts the
// snapshot statistics, and on stop closes the marker producer and drops
// its lag series.
func TestSyncRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{cursors: []string{"billing"}})
		r.local.MD = map[string]marker.Position{"billing": subsynctest.Pos(1, 1)}
		r.local.Backlog = map[string]int64{"billing": 3}
		r.remote.Backlog = map[string]int64{"billing": 5}
		var up atomic.Bool
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.s.Run(ctx, up.Load)
		}()
		synctest.Wait()
		if got := r.hist.Opens(); got != 1 {
			t.Errorf("history read %d times at start, want once", got)
		}
		subsynctest.ReadData(ctx, r.s, subsynctest.MsgAt(1, 2, -1, "x"))

		// Link down: no request.
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := r.sink.Take(); len(got) > 0 {
			t.Errorf("link down: wrote %v", subsynctest.KindsOf(got))
		}
		up.Store(true)
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		written := r.sink.Take()
		if len(written) != 1 || written[0].Kind != marker.KindSnapshotRequest || written[0].To != "west" {
			t.Fatalf("link up: wrote %+v, want one request to west", written)
		}
		if got := metricstest.Counter(r.m.SnapshotsStarted, "east", "west"); got != 1 {
			t.Errorf("snapshots_started_total = %v, want 1", got)
		}
		if got := metricstest.Counter(r.m.MarkersWritten, "east", "west", "snapshot-request"); got != 1 {
			t.Errorf("markers_written_total{kind=snapshot-request} = %v, want 1", got)
		}

		// The remote answers; the snapshot completes.
		resp := response("west", "east", syncTopic)
		resp.SnapshotID = written[0].SnapshotID
		time.Sleep(40 * time.Millisecond)
		subsynctest.ReadMarker(ctx, r.s, subsynctest.MarkerMsg(t, 1, 3, resp, syncKey, "west"))
		written = r.sink.Take()
		if len(written) != 1 || written[0].Kind != marker.KindSnapshot || written[0].Local != subsynctest.Pos(1, 3) || written[0].Remote != subsynctest.Pos(7, 3) {
			t.Fatalf("after the response: wrote %+v, want the snapshot (1:3, 7:3)", written)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := metricstest.Counter(r.m.SnapshotsCompleted, "east", "west"); got != 1 {
			t.Errorf("snapshots_completed_total = %v, want 1", got)
		}

		// Subscriptions are followed: lag set.
		if got := lagSeries(t, r.m); got["billing"] != [2]float64{2, 0} {
			t.Errorf("lag = %v, want billing 2 entries", got)
		}
		// Received updates are applied.
		r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 1)})
		subsynctest.ReadMarker(ctx, r.s, subsynctest.MarkerMsg(t, 1, 4, update("west", "east", syncTopic), syncKey, "west"))
		synctest.Wait()
		if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 5:7:-1"}) {
			t.Errorf("admin calls = %v, want the reset to 5:7", got)
		}

		// The statistics are counted once each, not again at every tick.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for name, c := range map[string]float64{
			"snapshots_started_total":            metricstest.Counter(r.m.SnapshotsStarted, "east", "west"),
			"snapshots_completed_total":          metricstest.Counter(r.m.SnapshotsCompleted, "east", "west"),
			"snapshots_timed_out_total":          metricstest.Counter(r.m.SnapshotsTimedOut, "east", "west"),
			"snapshot_requests_unanswered_total": metricstest.Counter(r.m.SnapshotsUnanswered, "east", "west"),
		} {
			want := 1.0
			if strings.Contains(name, "timed_out") || strings.Contains(name, "unanswered") {
				want = 0
			}
			if c != want {
				t.Errorf("%s = %v, want %v", name, c, want)
			}
		}

		cancel()
		<-done
		if r.sink.Closed != 1 {
			t.Errorf("marker sink closed %d times, want once", r.sink.Closed)
		}
		if got := lagSeries(t, r.m); len(got) > 0 {
			t.Errorf("lag series after stop = %v, want none", got)
		}
	})
}

// A tracked subscription the remote lacks is created there at its
// earliest message, once; one seen there and deleted later is left alone.
func TestSyncCreatesMissingRemoteSubscription(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	remoteSubs := &fakeSubAdmin{}
	r.s.RemoteSubs = remoteSubs
	r.local.Backlog = map[string]int64{"billing": 500, "audit": 3, "app-untracked": 1}
	r.remote.Backlog = map[string]int64{"audit": 3}
	ctx := context.Background()
	if err := r.s.lag(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := remoteSubs.TakeCalls(), []string{"create billing -1:-1:-1"}; !slices.Equal(got, want) {
		t.Errorf("remote admin calls %v, want %v", got, want)
	}
	r.remote.Backlog["billing"] = 500
	if err := r.s.lag(ctx); err != nil {
		t.Fatal(err)
	}
	// The operator deletes both on the remote: neither comes back.
	r.remote.Backlog = map[string]int64{}
	if err := r.s.lag(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remoteSubs.TakeCalls(); len(got) != 0 {
		t.Errorf("remote admin calls %v after the first creation, want none", got)
	}
	if got := metricstest.Counter(r.m.SubsCreatedRemote, "east", "west"); got != 1 {
		t.Errorf("subscriptions_created_on_remote_total = %v, want 1", got)
	}
}

// Follow's admin calls follow activity: an idle partition whose tracked
// subscriptions passed the newest snapshot is asked nothing but every
// idleFollow; data or a new snapshot brings the pace back; a subscription
// behind the newest snapshot is polled with a backoff up to behindFollow,
// and like an idle one once it has not moved for staleBehind.
// An idle partition's sync sleeps until its next follow instead of
// ticking; data (or a marker) wakes it at once.
func TestIdleSyncWakesOnData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		r.local.SetMD("billing", subsynctest.Pos(3, 10))
		ctx, wait, stop := runSyncRig(r)

		// Idle: run sleeps until the next follow (no request without data).
		wait(2 * time.Minute)
		if !r.s.pace.sleeping.Load() {
			t.Fatal("idle for 2 minutes, run not asleep")
		}
		if got := subsynctest.KindsOf(r.sink.Take()); len(got) != 0 {
			t.Fatalf("idle: markers written %v, want none", got)
		}
		// Data pokes it awake: the request goes out within a tick.
		r.s.DataAt(ctx, subsynctest.Pos(3, 11), "", marker.Position{})
		wait(r.s.Interval / 2)
		if got := subsynctest.KindsOf(r.sink.Take()); !slices.Contains(got, marker.KindSnapshotRequest) {
			t.Errorf("after data: markers written %v, want a snapshot request", got)
		}
		// While the request is pending, run ticks (it must time out).
		if r.s.pace.sleeping.Load() {
			t.Error("a request pending, run asleep")
		}
		stop()
	})
}

func TestFollowPacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		r.local.SetMD("billing", subsynctest.Pos(3, 10))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); r.s.Run(ctx, func() bool { return true }) }()
		calls := func() int {
			r.local.Mu.Lock()
			defer r.local.Mu.Unlock()
			return r.local.MDCalls
		}
		wait := func(d time.Duration) { time.Sleep(d); synctest.Wait() }

		wait(time.Second)
		if got := calls(); got != 1 {
			t.Fatalf("after start: %d mark-delete calls, want 1", got)
		}
		wait(4 * time.Minute)
		if got := calls(); got != 1 {
			t.Errorf("idle for 4 minutes: %d calls, want still 1", got)
		}
		wait(90 * time.Second)
		if got := calls(); got != 2 {
			t.Errorf("after idleFollow: %d calls, want 2", got)
		}

		// Traffic: followed again within half an interval.
		r.s.DataAt(ctx, subsynctest.Pos(3, 11), "", marker.Position{})
		wait(time.Second)
		if got := calls(); got != 3 {
			t.Errorf("after data: %d calls, want 3", got)
		}

		// A snapshot the subscription has not passed: polled, backing off.
		r.s.Machine.Marker(subsynctest.Pos(3, 12), marker.Marker{Kind: marker.KindSnapshot, From: "east", To: "west", Topic: syncTopic,
			SnapshotID: "s1", Local: subsynctest.Pos(3, 12), Remote: subsynctest.Pos(7, 1), Time: time.Now().UnixMilli()})
		before := calls()
		wait(2 * time.Minute)
		if n := calls() - before; n < 4 || n > 12 {
			t.Errorf("behind for 2 minutes: %d calls, want a backoff (4 to 12)", n)
		}
		// The consumer passes it: the update goes out at the next poll,
		// then the partition is idle again.
		r.local.SetMD("billing", subsynctest.Pos(3, 12))
		wait(behindFollow + time.Second)
		if got := subsynctest.KindsOf(r.sink.Take()); !slices.Contains(got, marker.KindUpdate) {
			t.Errorf("markers written %v, want an update", got)
		}
		before = calls()
		wait(4 * time.Minute)
		if n := calls() - before; n > 1 {
			t.Errorf("caught up, idle for 4 minutes: %d calls, want at most 1", n)
		}

		// Behind a newer snapshot, and nobody consumes: after staleBehind
		// without a move, polled like an idle partition.
		r.s.Machine.Marker(subsynctest.Pos(3, 20), marker.Marker{Kind: marker.KindSnapshot, From: "east", To: "west", Topic: syncTopic,
			SnapshotID: "s2", Local: subsynctest.Pos(3, 20), Remote: subsynctest.Pos(7, 2), Time: time.Now().UnixMilli()})
		wait(staleBehind + time.Minute)
		before = calls()
		wait(10 * time.Minute)
		if n := calls() - before; n < 1 || n > 3 {
			t.Errorf("behind and not moving for 10 more minutes: %d calls, want about one per idleFollow (1 to 3)", n)
		}
		cancel()
		<-done
	})
}

// An idle follow that finds nothing moved reads no backlogs: the lag
// gauges stand until something moves or lagRefresh passes; a subscription
// missing on the remote, or data, makes the next follow read them again.
func TestIdleFollowSkipsLag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		r.local.SetMD("billing", subsynctest.Pos(3, 10))
		r.local.Mu.Lock()
		r.local.Backlog = map[string]int64{"billing": 0}
		r.local.Mu.Unlock()
		ctx, wait, stop := runSyncRig(r)
		lagCalls := func() int {
			r.local.Mu.Lock()
			defer r.local.Mu.Unlock()
			return r.local.LagCalls
		}

		// Missing on the remote: every follow reads the backlogs.
		wait(time.Second)
		wait(idleFollow + time.Second)
		if got := lagCalls(); got != 2 {
			t.Fatalf("missing on the remote, two follows: %d backlog reads, want 2", got)
		}
		r.remote.Mu.Lock()
		r.remote.Backlog = map[string]int64{"billing": 0}
		r.remote.Mu.Unlock()
		wait(idleFollow)
		if got := lagCalls(); got != 3 {
			t.Fatalf("found on the remote: %d backlog reads, want 3", got)
		}
		wait(3 * idleFollow)
		if got := lagCalls(); got != 3 {
			t.Errorf("idle, nothing moved for 3 follows: %d backlog reads, want still 3", got)
		}
		r.s.DataAt(ctx, subsynctest.Pos(3, 11), "", marker.Position{})
		wait(idleFollow)
		if got := lagCalls(); got != 4 {
			t.Errorf("data, then a follow: %d backlog reads, want 4", got)
		}
		wait(lagRefresh + idleFollow)
		if got := lagCalls(); got < 5 {
			t.Errorf("after lagRefresh: %d backlog reads, want at least 5", got)
		}
		stop()
	})
}

// A subscription behind the newest snapshot that sits where a remote's
// update put it has nobody consuming it here: it is followed every
// idleFollow from the start, not polled for a move every behindFollow.
func TestFollowPacingUpdatedCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		r.local.SetMD("billing", subsynctest.Pos(3, 10))
		r.applied.set("east", syncTopic, "billing", subsynctest.Pos(3, 11))
		r.s.Machine.Marker(subsynctest.Pos(3, 20), marker.Marker{Kind: marker.KindSnapshot, From: "east", To: "west", Topic: syncTopic,
			SnapshotID: "s1", Local: subsynctest.Pos(3, 20), Remote: subsynctest.Pos(7, 2), Time: time.Now().UnixMilli()})
		_, wait, stop := runSyncRig(r)
		calls := func() int {
			r.local.Mu.Lock()
			defer r.local.Mu.Unlock()
			return r.local.MDCalls
		}

		wait(4 * time.Minute)
		if got := calls(); got != 1 {
			t.Errorf("left where an update put it, 4 minutes: %d mark-delete calls, want 1", got)
		}
		// A consumer here moves it: polled again while behind.
		r.local.SetMD("billing", subsynctest.Pos(3, 15))
		wait(2 * time.Minute)
		before := calls()
		wait(2 * time.Minute)
		if n := calls() - before; n < 3 {
			t.Errorf("moved by a consumer here and behind: %d calls in 2 minutes, want a poll at least every behindFollow", n)
		}
		stop()
	})
}

// runSyncRig runs r's sync in the test's bubble; wait lets d of fake time
// pass and everything settle; stop ends the sync.
func runSyncRig(r *syncRig) (ctx context.Context, wait func(time.Duration), stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.s.Run(ctx, func() bool { return true }) }()
	return ctx, func(d time.Duration) { time.Sleep(d); synctest.Wait() }, func() { cancel(); <-done }
}

// TestApplyWorkerOnlyWhileUpdatesWait: no goroutine waits for updates; one
// starts when an update is queued (or at Run's start for updates queued
// before), applies, and ends when none waits; after Run's context is
// done an update starts nothing that applies.
func TestApplyWorkerOnlyWhileUpdatesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{})
		r.subs.Set("billing", subscription.State{Exists: true, MarkDelete: subsynctest.Pos(1, 3)})
		working := func() bool {
			r.s.queue.mu.Lock()
			defer r.s.queue.mu.Unlock()
			return r.s.queue.running
		}
		origin := int64(1)
		queue := func(at marker.Position) {
			up := update("west", "east", syncTopic)
			up.Remote = at
			origin++
			if reason := r.s.enqueueApply(up, subsynctest.Pos(90, origin)); reason != "" {
				t.Fatalf("update refused: %s", reason)
			}
		}
		queue(subsynctest.Pos(1, 10)) // before Run: waits for it
		synctest.Wait()
		if got := r.subs.TakeCalls(); len(got) != 0 || working() {
			t.Fatalf("before Run: calls %v, worker %v", got, working())
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.s.startApplying(ctx)
		synctest.Wait()
		if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 1:10:-1"}) || working() {
			t.Fatalf("at Run's start: calls %v, worker still running %v", got, working())
		}
		queue(subsynctest.Pos(1, 20))
		synctest.Wait()
		if got := r.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 1:20:-1"}) || working() {
			t.Fatalf("an update while running: calls %v, worker still running %v", got, working())
		}
		cancel()
		queue(subsynctest.Pos(1, 30))
		synctest.Wait()
		if got := r.subs.TakeCalls(); len(got) != 0 || working() {
			t.Errorf("after Run: calls %v, worker %v", got, working())
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestSyncFenceThreeClusters: east's billing follows two remotes, west and
// north, through one Applied. A protocol move for west's update lands but
// its read-back fails (a timeout): east's follow towards north must not
// send the position the move set on to north as consumed here; and after
// north's update reset billing further than west's last reset, west's
// next update, lower, must not reset it back on the word of a stats
// reading that cannot show another's reset (the fresh path).
func TestSyncFenceThreeClusters(t *testing.T) {
	t.Run("a move whose read-back failed is not sent on to the third cluster", func(t *testing.T) {
		west, f, local, _ := protocolRig(t) // east, following west
		local.set("billing", subscription.State{Exists: true, Consumers: 1, Type: subscription.Failover})
		north := newSyncRig(t, rigConfig{}) // east, following north
		cacheSnapshot(t, north, "s1", subsynctest.Pos(1, 10), subsynctest.Pos(7, 20))
		north.s.Remote, north.s.Applied, north.s.LocalAdmin = "north", west.applied, west.local
		west.local.SetMD("billing", subsynctest.Pos(1, 5))
		north.readBefore(west.local.MD)
		f.during = func(m wire.Move) { west.local.SetMD("billing", wirePosition(m.To)) } // the broker took it
		f.err = []error{fmt.Errorf("reading the mark-delete position back: %w", context.DeadlineExceeded)}
		west.s.apply(context.Background(), "billing", subsynctest.Pos(1, 15))
		north.readBefore(west.local.MD) // read twice: confirmed (confirm.go)
		if err := north.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(north.sink.Take()); len(got) > 0 {
			t.Errorf("west's update sent on to north as consumed on east: %v", got)
		}
		// Consumers on east move past it: north is told.
		west.local.SetMD("billing", subsynctest.Pos(1, 16))
		north.readBefore(west.local.MD)
		if err := north.s.follow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(north.sink.Take()); got["billing"].To != "north" || got["billing"].Remote != subsynctest.Pos(7, 20) {
			t.Errorf("after consuming past it: updates %v, want billing to north at 7:20", got)
		}
	})
	t.Run("a fresh reset does not go back past another remote's", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			west, _ := standbyRig(t)
			north, _ := standbyRig(t)
			north.s.Remote, north.s.Applied, north.s.SubAdmin = "north", west.applied, west.subs
			ctx := context.Background()
			west.s.apply(ctx, "billing", subsynctest.Pos(4, 10))
			north.s.apply(ctx, "billing", subsynctest.Pos(4, 30))
			if got := west.subs.TakeCalls(); !slices.Equal(got, []string{"reset billing 4:10:-1", "reset billing 4:30:-1"}) {
				t.Fatalf("admin calls %v, want west's reset then north's", got)
			}
			time.Sleep(west.s.Interval)
			west.s.apply(ctx, "billing", subsynctest.Pos(4, 20))
			if got := west.subs.TakeCalls(); len(got) > 0 {
				t.Errorf("west's lower update after north's reset: admin calls %v, want none (not moved back)", got)
			}
			if st, _ := west.subs.State(ctx, syncTopic, "billing"); st.MarkDelete != subsynctest.Pos(4, 29) {
				t.Errorf("billing at %v, want 4:29 where north's reset put it", st.MarkDelete)
			}
		})
	})
}

// TestSyncStandbyLetsMarkerProducerGo: when another instance's cursor
// becomes the partition's active consumer (HA) the marker producer is
// closed once and the follow sends no update (sending would open the
// producer again and keep its name from the active instance); active
// again, the next follow is due at once and sends what was held.
func TestSyncStandbyLetsMarkerProducerGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := subsynctest.Pos
		ctx := context.Background()
		r := newSyncRig(t, rigConfig{})
		cacheSnapshot(t, r, "s1", p(1, 10), p(7, 20))
		r.readBefore(map[string]marker.Position{"billing": p(1, 5)}) // known: a move forward goes at once
		r.local.SetMD("billing", p(1, 12))
		r.s.setActive(true)
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take())["billing"].Remote; got != p(7, 20) {
			t.Fatalf("active: update to %v, want 7:20", got)
		}

		r.s.setActive(false)
		r.s.setActive(false)
		if r.sink.Closed != 1 {
			t.Errorf("standby: marker producer closed %d times, want once", r.sink.Closed)
		}
		cacheSnapshot(t, r, "s2", p(1, 30), p(7, 40))
		r.local.SetMD("billing", p(1, 31))
		time.Sleep(r.s.Interval)
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take()); len(got) > 0 {
			t.Errorf("standby: updates %v written, want none", got)
		}

		r.s.setActive(true)
		if !r.s.followDue(time.Now()) {
			t.Error("active again: the next follow is not due at once")
		}
		if err := r.s.follow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := updatesWritten(r.sink.Take())["billing"].Remote; got != p(7, 40) {
			t.Errorf("active again: update to %v, want 7:40", got)
		}
	})
}

// TestSyncActiveChangeWakesRestingLoop: a change of the partition's active
// consumer is acted on at once, not at the loop's next wake (up to
// idleFollow on a resting partition; soak, seed 1382347120672031276:
// ProducerBusy for 66 s): the standby lets the marker producer go, and
// the instance made active sends the update it held, with no time
// passing.
func TestSyncActiveChangeWakesRestingLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := subsynctest.Pos
		r := newSyncRig(t, rigConfig{})
		var active atomic.Bool
		active.Store(true)
		r.s.Active = active.Load
		cacheSnapshot(t, r, "s1", p(1, 10), p(7, 20))
		r.readBefore(map[string]marker.Position{"billing": p(1, 5)})
		r.local.SetMD("billing", p(1, 12))
		_, wait, stop := runSyncRig(r)
		defer stop()
		wait(10 * time.Second)
		if got := updatesWritten(r.sink.Take())["billing"].Remote; got != p(7, 20) {
			t.Fatalf("active: update to %v, want 7:20", got)
		}
		wait(10 * time.Minute) // at rest: the loop sleeps until its next follow

		at := time.Now()
		active.Store(false)
		r.s.ActiveChanged()
		synctest.Wait()
		if r.sink.Closed != 1 || time.Since(at) != 0 {
			t.Fatalf("made standby: marker producer closed %d times after %v, want once at once", r.sink.Closed, time.Since(at))
		}
		cacheSnapshot(t, r, "s2", p(1, 30), p(7, 40))
		r.local.SetMD("billing", p(1, 31))
		wait(10 * time.Minute)
		if got := updatesWritten(r.sink.Take()); len(got) > 0 {
			t.Fatalf("standby: updates %v written, want none", got)
		}

		at = time.Now()
		active.Store(true)
		r.s.ActiveChanged()
		synctest.Wait()
		if got := updatesWritten(r.sink.Take())["billing"].Remote; got != p(7, 40) || time.Since(at) != 0 {
			t.Errorf("made active: update to %v after %v, want 7:40 at once", got, time.Since(at))
		}
	})
}

// TestSyncStandbyHoldsNoMarkerProducer: a standby neither opens the
// marker producer (the active instance reads the same partition and
// writes what is due) nor keeps one it opened before Run's loop started
// (the pipe feeds the sync from its session's start, rebuild or not).
// Soak, seed 1382347120672031276 with broker restarts: east-a, active for
// 3 s after its restart, wrote responses during its 3.6 s re-read, then
// kept the producer as a standby: east-b's markers were refused with
// ProducerBusy to the run's end.
func TestSyncStandbyHoldsNoMarkerProducer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newSyncRig(t, rigConfig{})
		var active atomic.Bool
		active.Store(true)
		r.s.Active = active.Load
		req := marker.Marker{Kind: marker.KindSnapshotRequest, From: "east", To: "west", Topic: syncTopic, SnapshotID: "x"}
		r.s.write(ctx, []marker.Marker{req}) // active, before Run: as intake does
		if !r.sink.Holds() {
			t.Fatal("active: the marker was not written")
		}
		active.Store(false) // made a standby before Run's loop looked
		_, wait, stop := runSyncRig(r)
		defer stop()
		wait(time.Second)
		if r.sink.Holds() {
			t.Fatal("standby at Run's start: the marker producer opened before is kept")
		}
		r.sink.Take()
		r.s.write(ctx, []marker.Marker{req})
		if got := r.sink.Take(); len(got) > 0 || r.sink.Holds() {
			t.Errorf("standby: wrote %v (holds a producer: %v), want nothing", subsynctest.KindsOf(got), r.sink.Holds())
		}
		// Nor does its machine start a request it cannot write: pending,
		// it would hold the next one back until its timeout once active.
		r.s.DataAt(ctx, subsynctest.Pos(3, 1), "", marker.Position{})
		r.s.tick(ctx)
		if r.s.Machine.Pending() {
			t.Error("standby: a snapshot request is pending")
		}
	})
}

// TestSyncMadeStandbyDuringWrite: an instance made a standby while a
// marker is being written lets the producer go at once, since Run's loop
// may have looked at the change already and would not close it again.
func TestSyncMadeStandbyDuringWrite(t *testing.T) {
	r := newSyncRig(t, rigConfig{})
	var active atomic.Bool
	active.Store(true)
	r.s.Active = active.Load
	r.s.Writer = flipSink{r.sink, func() { active.Store(false) }}
	r.s.write(context.Background(), []marker.Marker{{Kind: marker.KindSnapshotRequest, From: "east", To: "west", Topic: syncTopic, SnapshotID: "x"}})
	if len(r.sink.Take()) != 1 || r.sink.Holds() {
		t.Errorf("made a standby during the write: the producer is still held (closed %d times)", r.sink.Closed)
	}
}

// flipSink runs during after each write, as a change of the active
// consumer arriving while the marker is sent.
type flipSink struct {
	*subsynctest.Sink
	during func()
}

func (f flipSink) Write(ctx context.Context, mk marker.Marker) error {
	err := f.Sink.Write(ctx, mk)
	f.during()
	return err
}

// TestSyncRequestsDuringReRead: the snapshot machine is ticked while the
// start-up re-read runs, so that a process whose re-read is slow (10-11 s
// for 10,000 entries under the soak's load) takes snapshots meanwhile;
// otherwise one killed again within its re-read had taken none since its
// start, and the positions its applications consumed then were never
// covered.
func TestSyncRequestsDuringReRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, rigConfig{cursors: []string{"billing"}})
		for e := range int64(1000) {
			r.hist.Msgs = append(r.hist.Msgs, subsynctest.MsgAt(1, e, -1, "x"))
		}
		r.hist.perEntry = 10 * time.Millisecond // 10 s in all
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r.s.DataAt(ctx, subsynctest.Pos(2, 1), "", marker.Position{}) // the pipe copies meanwhile
		done := make(chan struct{})
		go func() { defer close(done); r.s.Run(ctx, func() bool { return true }) }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if r.hist.Read >= 1000 {
			t.Fatal("the re-read ended within 3 s; the test needs it slower")
		}
		if got := subsynctest.KindsOf(r.sink.Take()); !slices.Contains(got, marker.KindSnapshotRequest) {
			t.Errorf("3 s into a 10 s re-read: wrote %v, want a snapshot request", got)
		}
		cancel()
		<-done
	})
}

// TestSyncRequestNotWrittenMakesRoom: a snapshot request whose write
// failed is dropped from the machine at once: pending, it would hold the
// next request back for the whole timeout (30 s) although no response
// can come.
func TestSyncRequestNotWrittenMakesRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newSyncRig(t, rigConfig{})
		r.s.linkUp = func() bool { return true }
		r.s.DataAt(ctx, subsynctest.Pos(3, 1), "", marker.Position{})
		r.sink.FailNext(1)
		r.s.tick(ctx)
		if r.s.Machine.Pending() {
			t.Fatal("a request whose write failed is pending")
		}
		time.Sleep(time.Second) // the request interval
		r.s.tick(ctx)
		if got := subsynctest.KindsOf(r.sink.Take()); !slices.Equal(got, []marker.Kind{marker.KindSnapshotRequest}) {
			t.Errorf("a second after the failed write: wrote %v, want a request", got)
		}
	})
}
