package subsync

// Lag reporting: after a follow, how many messages the remote copy of each
// tracked subscription would deliver again after a failover, and how old
// the snapshot behind its last update is (the subscription lag gauges).
// The reading and what it last set are a lagReport, which knows nothing
// of the sync; the follow reads the backlogs and creates on the remote
// the tracked subscriptions a reading finds missing there (backlogs.go:
// Sync.lag; create.go: Sync.createOnRemote).

import (
	"time"

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
func (l *lagReport) fresh(at time.Time) bool { return l.freshWithin(at, lagRefresh) }

// freshWithin reports whether the last complete reading is younger than
// d at `at`.
func (l *lagReport) freshWithin(at time.Time, d time.Duration) bool {
	return !l.at.IsZero() && at.Sub(l.at) < d
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
