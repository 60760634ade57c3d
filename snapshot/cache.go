package snapshot

import (
	"slices"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// cache holds completed snapshots sorted by Local (then Remote, then ID),
// at most size of them, evicting as described in the package comment.
type cache struct {
	size int
	s    []Snapshot
}

// add inserts s unless a snapshot with its ID is cached, then evicts one
// entry if the cache overflows.
func (c *cache) add(s Snapshot) {
	for _, x := range c.s {
		if x.ID == s.ID {
			return
		}
	}
	i := len(c.s)
	for i > 0 && less(s, c.s[i-1]) {
		i--
	}
	c.s = slices.Insert(c.s, i, s)
	if len(c.s) > c.size {
		c.evict()
	}
}

func less(a, b Snapshot) bool {
	if c := a.Local.Compare(b.Local); c != 0 {
		return c < 0
	}
	if c := a.Remote.Compare(b.Remote); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// evict removes one entry: with room for one, all but the newest; else the
// middle entry i whose removal leaves the smallest gap relative to its
// age, (t[i+1]-t[i-1]) / (T-t[i-1]). Times out of order (clocks of
// different hosts after a takeover) only make the choice less apt.
func (c *cache) evict() {
	n := len(c.s)
	if c.size <= 1 {
		c.s = slices.Delete(c.s, 0, n-1)
		return
	}
	newest := c.s[n-1].Time
	best, bestCost := 1, 0.0
	for i := 1; i < n-1; i++ {
		older := age(newest, c.s[i-1].Time)
		gap := older - age(newest, c.s[i+1].Time)
		cost := 0.0
		if older > 0 && gap > 0 {
			cost = float64(gap) / float64(older)
		}
		if i == 1 || cost < bestCost {
			best, bestCost = i, cost
		}
	}
	c.s = slices.Delete(c.s, best, best+1)
}

// age is how long before newest t is, 0 if after.
func age(newest, t time.Time) time.Duration {
	return max(newest.Sub(t), 0)
}

// covering returns the index of the newest snapshot whose Local entry is at
// or before md's entry, or -1. The entries covered are a prefix of c.s, as
// the entry order is the Compare order with batch indexes ignored.
func (c *cache) covering(md marker.Position) int {
	i := len(c.s) - 1
	for i >= 0 && !entryAtOrBefore(c.s[i].Local, md) {
		i--
	}
	return i
}

// prune drops every snapshot older than the one covering md.
func (c *cache) prune(md marker.Position) {
	if i := c.covering(md); i > 0 {
		c.s = slices.Delete(c.s, 0, i)
	}
}

func entryAtOrBefore(p, md marker.Position) bool {
	if p.Ledger != md.Ledger {
		return p.Ledger < md.Ledger
	}
	return p.Entry <= md.Entry
}
