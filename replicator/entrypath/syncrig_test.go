package entrypath

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync"
	"github.com/geo-sidecar/geo-sidecar/replicator/subsync/subsynctest"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// A subscription sync for the tests of what feeds it and builds it (the
// entry pipe, pair.syncFor): subsync.New over fakes of the admin APIs, the
// marker producer and the start-up reader of one pair (east, west) on one
// partition: the fakes are subsynctest's, shared with subsync's own tests;
// the rig is not (subsync's reaches into the sync).

const syncTopic = subsynctest.Topic

var syncKey = []byte("sync-test-marker-key-0123456789")

// syncTracked is the rig's subscription selection: billing and audit.
func syncTracked(sub string) bool { return sub == "billing" || sub == "audit" }

// The admin fakes are subsynctest's, as subsync's own tests use them.
type (
	fakeSyncAdmin = subsynctest.SyncAdmin
	fakeSubAdmin  = subsynctest.SubAdmin
)

// fakeHistory is a subsync.HistorySource over subsynctest's History
// (which cannot name subsync's types).
type fakeHistory struct{ subsynctest.History }

func (h *fakeHistory) Open(ctx context.Context, from marker.Position) (subsync.HistoryReader, error) {
	r, err := h.History.Open(ctx, from)
	if err != nil {
		return nil, err
	}
	return fakeHistoryReader{r}, nil
}

type fakeHistoryReader struct{ *subsynctest.HistoryReader }

func (r fakeHistoryReader) Next(ctx context.Context) (subsync.HistoryEntry, bool, error) {
	e, ok, err := r.HistoryReader.Next(ctx)
	return subsync.HistoryEntry(e), ok, err
}

// syncRig is one Sync for (east, west) on syncTopic with fakes around
// it.
type syncRig struct {
	s       *subsync.Sync
	local   *fakeSyncAdmin
	remote  *fakeSyncAdmin
	subs    *fakeSubAdmin
	sink    *subsynctest.Sink
	hist    *fakeHistory
	applied *subsync.Applied
	m       *metrics.Metrics
}

// rigConfig varies the rig's snapshot machine and start-up state.
type rigConfig struct {
	third   []string // third origins
	fresh   bool
	cursors []string // cursors at start
}

func newSyncRig(t *testing.T, rc rigConfig) *syncRig {
	t.Helper()
	ids := 0
	r := &syncRig{
		local: &fakeSyncAdmin{}, remote: &fakeSyncAdmin{}, subs: &fakeSubAdmin{},
		sink: &subsynctest.Sink{}, hist: &fakeHistory{}, applied: &subsync.Applied{}, m: metrics.New(nil),
	}
	r.s = subsync.New(subsync.Config{
		Local: "east", Remote: "west", Topic: syncTopic, Keys: marker.NewKeys(syncKey),
		Interval: 1e9, // 1 s
		Tracked:  syncTracked,
		Machine: snapshot.New(snapshot.Config{
			Topic: syncTopic, Local: "east", Remote: "west",
			ThirdOrigins: rc.third, Fresh: rc.fresh,
			NewID: func() string { ids++; return fmt.Sprintf("snap-%d", ids) },
		}),
		Planner:        subscription.NewPlanner(),
		Writer:         r.sink,
		LocalAdmin:     r.local,
		RemoteAdmin:    r.remote,
		SubAdmin:       r.subs,
		History:        r.hist,
		Metrics:        r.m,
		Log:            zaptest.NewLogger(t),
		Applied:        r.applied,
		CursorsAtStart: slices.Clone(rc.cursors),
	})
	return r
}

// pending returns the updates waiting to be applied.
func (r *syncRig) pending() map[string]marker.Position { return r.s.Pending() }
