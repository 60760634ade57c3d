package main

import "slices"

// topology is what one run replicates where: the clusters, which
// produce load, and each source's targets. Two sidecar instances (a and
// b) run per source.
type topology struct {
	// Clusters are every cluster of the run, the pair first.
	Clusters []string
	// Loaded are the clusters the load generator and the applications
	// produce to and consume on: the active-active pair.
	Loaded []string
	// Targets are each source's targets (one replication entry per
	// source, the load topics under topic_patterns, the subscriptions
	// kept in step).
	Targets map[string][]string
	// Verified are the pairs (source, target) whose copy verify
	// --complete proves and whose subscriptions the goal rows judge: the
	// pairs that carry the load. north->east carries none (no load on
	// north): it is there for the markers only (below).
	Verified [][2]string
	// WAN is the cluster the b instances of WANFrom reach through the
	// test bed's WAN proxy (cluster.sh wan_ports), "" for none.
	WAN, WANFrom string
}

// topologyOf is the run's topology: east<->west active-active, and with
// north the one-way pair east->north. A one-way pair's replicated
// subscriptions need the target's sidecars to answer the source's
// snapshot requests in-band, and their responses to come back (package
// snapshot, The round), so north's own instances copy north->east: north
// has no load, only those markers travel, and nothing of west's origin
// reaches north (the sidecars copy only local-origin messages). East's b
// instance reaches north through the WAN proxy, where the WAN faults cut,
// half-open and slow its link.
func topologyOf(north bool) topology {
	t := topology{
		Clusters: []string{"east", "west"},
		Loaded:   []string{"east", "west"},
		Targets:  map[string][]string{"east": {"west"}, "west": {"east"}},
		Verified: [][2]string{{"east", "west"}, {"west", "east"}},
	}
	if north {
		t.Clusters = append(t.Clusters, "north")
		t.Targets["east"] = []string{"west", "north"}
		t.Targets["north"] = []string{"east"}
		t.Verified = append(t.Verified, [2]string{"east", "north"})
		t.WAN, t.WANFrom = "north", "east"
	}
	return t
}

// Sources are the clusters with sidecar instances, in Clusters' order.
func (t topology) Sources() []string {
	var out []string
	for _, c := range t.Clusters {
		if len(t.Targets[c]) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// Reach says, per origin cluster, which clusters must hold its
// messages: the origin itself and its targets. A copy anywhere else is
// the checker's Unexpected.
func (t topology) Reach() map[string][]string {
	reach := map[string][]string{}
	for _, c := range t.Clusters {
		reach[c] = append([]string{c}, t.Targets[c]...)
	}
	return reach
}

// viaWAN says whether instance src-suffix reaches cluster c through the
// WAN proxy.
func (t topology) viaWAN(src, suffix, c string) bool {
	return t.WAN != "" && c == t.WAN && src == t.WANFrom && suffix == "b"
}

// WANInstance is the instance whose link to WAN the WAN faults hit.
func (t topology) WANInstance() string {
	if t.WAN == "" {
		return ""
	}
	return t.WANFrom + "-b"
}

func (t topology) loaded(c string) bool { return slices.Contains(t.Loaded, c) }
