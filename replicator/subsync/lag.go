package subsync

// Lag reporting: after a follow, how many messages the remote copy of each
// tracked subscription would deliver again after a failover, and how old
// the snapshot behind its last update is (the subscription lag gauges).
// The reading and what it last set are a lagReport, which knows nothing
// of the sync; the sync reads the backlogs and creates on the remote the
// tracked subscriptions a reading finds missing there.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// lagGauges are the lag series of one sync: its pair and partition.
type lagGauges struct {
	m                    *metrics.Metrics
	local, remote, topic string
}

// labels are the lag series' labels for sub.
func (g lagGauges) labels(sub string) [4]string {
	return [4]string{g.local, g.remote, metrics.TopicLabel(g.topic), sub}
}

// key names this sync among the reporters of subscription lag.
func (g lagGauges) key() string { return g.remote + " " + g.topic }

func (g lagGauges) set(sub string, entries, ageSeconds float64) {
	g.m.SetLag(g.labels(sub), g.key(), entries, ageSeconds)
}

func (g lagGauges) drop(sub string) { g.m.DropSubLag(g.labels(sub), g.key()) }

// lagReport is what the lag gauges of one sync were last set to, and
// what they are computed from besides the backlogs. Used by run alone.
type lagReport struct {
	// at is when a reading last found every tracked subscription on the
	// remote (zero: not yet, not so, or a reading is under way).
	at time.Time
	// reported are the subscriptions whose lag the last reading set: one
	// gone since has its series dropped. largest is the largest lag
	// (entries) it set.
	reported map[string]lagReading
	largest  float64
	// sent is the snapshot behind the last update sent per subscription,
	// whose age the gauges show while the remote copy trails.
	sent map[string]snapshot.Snapshot
	// onRemote are the tracked subscriptions found on the remote.
	onRemote map[string]bool
}

// lagReading is what lag last read for a subscription: the entries a
// failover would deliver again, and whether the age of the snapshot
// behind its copy counts (the copy trails).
type lagReading struct {
	entries float64
	aging   bool
}

// sentUpdate records snap as the snapshot behind the update just sent for
// sub.
func (l *lagReport) sentUpdate(sub string, snap snapshot.Snapshot) {
	if l.sent == nil {
		l.sent = map[string]snapshot.Snapshot{}
	}
	l.sent[sub] = snap
}

// fresh reports whether the last complete reading is recent enough at
// `at` to stand when nothing moved on the partition (lagRefresh).
func (l *lagReport) fresh(at time.Time) bool {
	return !l.at.IsZero() && at.Sub(l.at) < lagRefresh
}

// report sets the gauges of the tracked subscriptions of local from the
// backlogs read on both sides, drops the series of those gone since the
// last reading, and calls missing for each tracked subscription the
// remote lacks; the reading counts as complete, at `at`, when there is
// none.
func (l *lagReport) report(g lagGauges, local, remote map[string]int64, tracked func(string) bool, missing func(string), at time.Time) {
	reported, complete := map[string]lagReading{}, true
	defer func() {
		l.largest = 0
		for _, r := range reported {
			l.largest = max(l.largest, r.entries)
		}
		if complete {
			l.at = at
		}
		for name := range l.reported {
			if _, ok := reported[name]; !ok {
				g.drop(name)
			}
		}
		l.reported = reported
	}()
	for name, lb := range local {
		if !tracked(name) {
			continue
		}
		rb, ok := remote[name]
		if !ok {
			missing(name)
			complete = false
			continue
		}
		l.seen(name)
		r := lagReading{entries: float64(subscription.Lag(lb, rb))}
		age := 0.0
		if snap, ok := l.sent[name]; ok && lb < rb {
			age, r.aging = time.Since(snap.Time).Seconds(), true
		}
		g.set(name, r.entries, age)
		reported[name] = r
	}
}

// seen records sub as found on the remote.
func (l *lagReport) seen(sub string) {
	if l.onRemote == nil {
		l.onRemote = map[string]bool{}
	}
	l.onRemote[sub] = true
}

// aged moves the age gauges on without reading the backlogs (follow
// found nothing moved): the entries stand, the snapshot only gets older.
func (l *lagReport) aged(g lagGauges) {
	for name, r := range l.reported {
		if snap, ok := l.sent[name]; ok && r.aging {
			g.set(name, r.entries, time.Since(snap.Time).Seconds())
		}
	}
}

// gauges are this sync's lag series.
func (s *Sync) gauges() lagGauges {
	return lagGauges{m: s.Metrics, local: s.Local, remote: s.Remote, topic: s.Topic}
}

// lagKey names this sync among the reporters of subscription lag.
func (s *Sync) lagKey() string { return s.gauges().key() }

// lag sets, per tracked subscription, how many messages the remote copy of
// the subscription would deliver again after a failover right now, and how
// old the snapshot behind its last update is.
func (s *Sync) lag(ctx context.Context) error {
	s.lags.at = time.Time{}
	local, remote, err := s.backlogs(ctx, s.fl.prio)
	if err != nil {
		return err
	}
	s.lags.report(s.gauges(), local, remote, s.Tracked, func(sub string) { s.createOnRemote(ctx, sub) }, s.pace.at)
	return nil
}

// lagAged moves the age gauges on without reading the backlogs.
func (s *Sync) lagAged() { s.lags.aged(s.gauges()) }

// lastEntryReader is what the creation fence (createOnRemote) asks of the
// remote's admin API besides subscription.Admin: the partition's newest
// entry.
type lastEntryReader interface {
	LastEntry(ctx context.Context, topic string) (marker.Position, error)
}

// createOnRemote creates a tracked subscription that the remote lacks
// there, at its earliest message: until a snapshot covers it no update
// can say where it should be, and a consumer failing over to a missing
// subscription would start at its initial position (Latest by default in
// every client) and skip everything not consumed here. Earliest delivers
// again instead. A subscription once seen on the remote is not created
// again (its deletion there is the operator's).
func (s *Sync) createOnRemote(ctx context.Context, sub string) {
	if s.RemoteSubs == nil || s.lags.onRemote[sub] {
		return
	}
	earliest := marker.Position{Ledger: -1, Entry: -1, Batch: -1}
	// The broker makes it at the remote's newest entry first and resets it
	// after (confirm.go): the other direction's follow must not take a
	// position read meanwhile for its consumers'. Until the creation ends
	// every position counts as put there by the sidecar; after, every
	// position up to the remote's newest entry then, where the creation
	// could have shown it.
	begun := s.Applied.beginCreate(s.Remote, s.Topic, sub)
	if err := s.RemoteSubs.Create(ctx, s.Topic, sub, earliest); err != nil {
		s.Applied.end(begun, false, marker.Position{})
		s.Log.Warn("creating a subscription on the remote failed", zap.String("subscription", sub), zap.Error(err))
		return
	}
	upTo := fenceAll
	if le, ok := s.RemoteSubs.(lastEntryReader); ok {
		if p, err := le.LastEntry(ctx, s.Topic); err == nil {
			upTo = p
		} else {
			s.Log.Warn("reading the remote's newest entry after creating a subscription there failed: its consumers' progress is not followed back until an update moves it",
				zap.String("subscription", sub), zap.Error(err))
		}
	}
	s.Applied.end(begun, true, upTo)
	s.lags.seen(sub)
	s.Metrics.SubsCreatedRemote.WithLabelValues(s.Local, s.Remote).Inc()
	s.Log.Info("subscription created on the remote at its cluster.Earliest message: no snapshot covers it yet",
		zap.String("subscription", sub))
}
