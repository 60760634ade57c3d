package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// VerifyMetrics are the continuous verifier's (replicator/verify,
// sidecar.verify): what it found, what it read, and how old the copy it
// has verified is. They are kept apart from the data path's because they
// are a second opinion on it: they count what the clusters hold, not
// what the pipe believes it sent.
type VerifyMetrics struct {
	// Found counts the faults found on a pair's copies, by kind
	// (missing, duplicated, divergent, out-of-order, present-unproven, target-only): one
	// increment per entry at fault.
	Found *prometheus.CounterVec
	// Read counts the messages the verifier read, both sides together:
	// what its cost is proportional to, and what
	// sidecar.verify.max_messages_per_second bounds.
	Read *prometheus.CounterVec
	ages *verifiedAges
}

func newVerifyMetrics(ns string) *VerifyMetrics {
	return &VerifyMetrics{
		Found: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "verify_found_total", Help: "Entries the continuous verifier found at fault on the target's copy, by kind (missing, duplicated, divergent, out-of-order, present-unproven, target-only); see docs/verify.md."},
			[]string{"source", "target", "kind"}),
		Read: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "verify_read_messages_total", Help: "Messages the continuous verifier read, both sides together (bounded by sidecar.verify.max_messages_per_second)."},
			[]string{"source", "target"}),
		ages: &verifiedAges{desc: prometheus.NewDesc(ns+"_verify_verified_through_age_seconds",
			"How long ago the newest point was that the continuous verifier has proven the copy complete through: every entry published before it is copied once, unchanged, in order, or counted in verify_found_total. The oldest over the topic's partitions this instance verifies.",
			[]string{"source", "target", "topic"}, nil)},
	}
}

// Describe and Collect make VerifyMetrics one collector of its parts.
func (v *VerifyMetrics) Describe(ch chan<- *prometheus.Desc) {
	v.Found.Describe(ch)
	v.Read.Describe(ch)
	v.ages.Describe(ch)
}

func (v *VerifyMetrics) Collect(ch chan<- prometheus.Metric) {
	v.Found.Collect(ch)
	v.Read.Collect(ch)
	v.ages.Collect(ch)
}

// SetVerified records that partition's copy from source to target is
// verified through everything published before asOf. The topic's series
// is read at each scrape as the age of the oldest of its partitions, so
// that it grows while a walk is stuck, not only when one ends.
func (v *VerifyMetrics) SetVerified(source, target, partition string, asOf time.Time) {
	a := v.ages
	a.mu.Lock()
	defer a.mu.Unlock()
	key := [3]string{source, target, TopicLabel(partition)}
	if a.asOf == nil {
		a.asOf = map[[3]string]map[string]time.Time{}
	}
	parts := a.asOf[key]
	if parts == nil {
		parts = map[string]time.Time{}
		a.asOf[key] = parts
	}
	parts[partition] = asOf
}

// DropVerified forgets partition (no longer verified here: stopped, or
// another instance is active on it); a series left with no partition
// goes.
func (v *VerifyMetrics) DropVerified(source, target, partition string) {
	a := v.ages
	a.mu.Lock()
	defer a.mu.Unlock()
	key := [3]string{source, target, TopicLabel(partition)}
	delete(a.asOf[key], partition)
	if len(a.asOf[key]) == 0 {
		delete(a.asOf, key)
	}
}

// verifiedAges is a collector: ages are computed when scraped.
type verifiedAges struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	asOf map[[3]string]map[string]time.Time // source, target, topic -> partition -> verified as of
}

func (a *verifiedAges) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *verifiedAges) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	a.mu.Lock()
	type series struct {
		labels [3]string
		age    float64
	}
	out := make([]series, 0, len(a.asOf))
	for key, parts := range a.asOf {
		var age time.Duration
		for _, t := range parts {
			age = max(age, now.Sub(t))
		}
		out = append(out, series{key, age.Seconds()})
	}
	a.mu.Unlock()
	for _, s := range out {
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, s.age, s.labels[:]...)
	}
}
