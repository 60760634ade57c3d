package subsync

// What follow keeps between its rounds (follow.go): the positions and
// stats readings it used, and the positions awaiting their confirming
// read (confirm.go). Used by run alone.

import (
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
)

type followState struct {
	// mds are the tracked subscriptions' positions at the last follow.
	mds map[string]marker.Position
	// seen is each tracked subscription's stats at the last position
	// read (Stats set), and readAt when positions were last read: a
	// subscription whose stats did not change since is not read again
	// before idleFollow (moved).
	seen   map[string]SubStat
	readAt time.Time
	// seenAt is when the reading behind seen was sent, or a later one
	// that showed nothing moved (resting).
	seenAt time.Time
	// readNewest is the newest snapshot when positions were last read.
	readNewest string
	// reading is the stats reading of the current follow (nil without
	// Stats, or when it failed), prio its place in the budget.
	reading map[string]SubStat
	prio    float64
	// maxAge is how old a shared reading this follow may use
	// (readingAge); dataSinceRead whether data came since positions
	// were last read.
	maxAge        time.Duration
	dataSinceRead bool
	// waitingSince is when follows began putting a position read off
	// for consumers not past a snapshot that just completed (zero: not
	// now); positions read or proven end it (adminpath.go, mayWait).
	waitingSince time.Time
	// freshRead: this follow's positions were read by it (not kept from
	// an earlier read, nor proven from a stats reading).
	freshRead bool
	// readSent is when the positions of this follow were asked for: the
	// follow's start for an admin read (or positions kept), the poll's
	// for the servlet's (confirm.go).
	readSent time.Time
	// servlet: this follow's positions came from the positions servlet
	// (servletPositions); acked are their individually acknowledged
	// ranges past the mark-delete position (none for a subscription the
	// servlet listed truncated), and holesSent the last acked marker sent
	// of each (holes.go).
	servlet   bool
	acked     map[string][]positions.Range
	holesSent map[string]holesSent
	// unconfirmed holds the positions that would have sent an update but
	// are not trusted yet (confirm.go).
	unconfirmed map[string]unconfirmedPos
}

// unconfirmedPos is a position waiting for its confirming read, and when
// its read was asked for (followState.readSent).
type unconfirmedPos struct {
	md marker.Position // for the log and for debugging
	at time.Time
}
