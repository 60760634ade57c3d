package config

// Facts derived from a config that more than one part of geo-sidecar needs:
// whose cursor a subscription is, which subscriptions an entry keeps in
// step, which entries copy a topic where, and whose copies reach both sides
// of a pair. Each is defined here once, so the replicator, the status
// report, the drill and validation cannot drift apart.

import (
	"slices"
	"strings"
)

// PulsarCursorPrefix starts the cursors Pulsar keeps for itself
// ("pulsar.repl.<cluster>" for built-in geo-replication, "pulsar.dedup").
// Sharing it would let geo-sidecar and the broker fight over one cursor.
const PulsarCursorPrefix = "pulsar."

// IsPulsarCursor reports whether sub is one of Pulsar's own cursors.
func IsPulsarCursor(sub string) bool { return strings.HasPrefix(sub, PulsarCursorPrefix) }

// OwnCursorPrefix starts every cursor this sidecar creates: the replication
// cursors ([Sidecar.CursorName]) and the short-lived ones that read history.
func (s Sidecar) OwnCursorPrefix() string { return s.CursorPrefix + "." }

// IsOwnCursor reports whether sub is one of geo-sidecar's own cursors.
func (s Sidecar) IsOwnCursor(sub string) bool { return strings.HasPrefix(sub, s.OwnCursorPrefix()) }

// Tracks reports whether r keeps the position of subscription sub in step
// on its targets: sub is listed or matches a pattern, and is neither one of
// geo-sidecar's cursors (s is the config's sidecar section) nor Pulsar's. A
// pattern like ".*" matches those too, and moving them would skip or repeat
// replicated data.
func (r Replication) Tracks(s Sidecar, sub string) bool {
	return !s.IsOwnCursor(sub) && !IsPulsarCursor(sub) && r.MatchesSubscription(sub)
}

// EntriesCopying returns the indexes in c.Replication of the entries that
// copy topic (its short name) in namespace ns from cluster from to cluster
// to, in config order; none when the config does not copy it that way.
func (c *Config) EntriesCopying(ns, topic, from, to string) []int {
	var out []int
	for i, r := range c.Replication {
		if r.Source == from && r.Namespace == ns && r.MatchesTopic(topic) && slices.Contains(r.Targets, to) {
			out = append(out, i)
		}
	}
	return out
}

// Copies reports whether c copies topic in namespace ns from cluster from
// to cluster to.
func (c *Config) Copies(ns, topic, from, to string) bool {
	return len(c.EntriesCopying(ns, topic, from, to)) > 0
}

// ThirdOrigins returns, sorted, the clusters other than a and b whose
// messages of topic in namespace ns are copied into both a and b. A
// snapshot between a and b completes only once each side has seen every
// third origin up to the same point (package snapshot, The round); an
// origin that reaches only one side is never covered.
func (c *Config) ThirdOrigins(ns, topic, a, b string) []string {
	var out []string
	for _, r := range c.Replication {
		o := r.Source
		if o == a || o == b || slices.Contains(out, o) {
			continue
		}
		if c.Copies(ns, topic, o, a) && c.Copies(ns, topic, o, b) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}
