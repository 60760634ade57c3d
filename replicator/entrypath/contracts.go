package entrypath

// The contracts of the entry pipe: what it needs of its cursor, its
// producer and the clusters (entrySource, entryTarget, entryEndpoints;
// entryends.go implements them over the wire client, the tests with
// fakes), and how it feeds the subscription sync (SyncFeed, implemented by
// subsync).

import (
	"context"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// entrySource is a partition's cursor in the entry pipe (a wire.Consumer):
// Receive from one goroutine, Ack and Release from another.
type entrySource interface {
	Receive(ctx context.Context) (wire.Entry, error)
	Ack(wire.MessageID) error
	// Release hands the entry's permits back (after the remote confirmed
	// it, or it was skipped), so that permits bound what is in flight.
	Release(wire.Entry) error
	// MarkDelete is the subscription's mark-delete position; ok is false
	// when the broker does not say.
	MarkDelete(ctx context.Context) (id wire.MessageID, ok bool, err error)
	Close() error
}

// entryTarget is a partition's producer on the remote (a wire.Producer).
// Callbacks run in send order.
type entryTarget interface {
	Send(ctx context.Context, out wire.Outgoing, done func(wire.Receipt, error)) error
	// LastSequenceID is the remote broker's last recorded sequence id for
	// the producer name (-1 without deduplication).
	LastSequenceID() int64
	Flush(ctx context.Context) error
	Close() error
}

// entryEndpoints opens a partition's cursor and producer for the entry
// pipe, and reads the remote back (copiedSince).
type entryEndpoints interface {
	openCursor(ctx context.Context, onActive func(active bool)) (entrySource, error)
	// openProducer opens the producer; onLink is told, from the
	// producer's goroutine and without blocking, when its link to the
	// remote is up (created, connection speaking) and when it is down
	// (reconnecting, or its connection silent), until Close.
	// The producer sends under the producer name of epoch (see
	// entrySeq).
	openProducer(ctx context.Context, epoch uint64, onLink func(up bool)) (entryTarget, error)
	// reachTarget asks the remote whether it answers from here (a fresh
	// lookup of the partition and a connection to its broker): nil when
	// it does. A stepped-down partition resubscribes only after that.
	reachTarget(ctx context.Context) error
	// copiedSince is the read-back's proof from from on; reach, when
	// above 0, is how many of the pair's copies the remote may hold from
	// from on (see recordReach), beyond the usual in-flight window.
	copiedSince(ctx context.Context, from marker.Position, reach int64) (copySet, error)
	// targetSchema returns the remote's version of the schema the local
	// partition knows as version (fetched here, registered there with
	// get-or-create on first use, remembered after).
	targetSchema(ctx context.Context, version []byte) ([]byte, error)
}

// SyncFeed is the subscription sync of the partition as the entry pipe feeds
// it: every entry the pipe reads goes to DataAt or MarkerAt, in the order
// read, from the session's goroutine, while the sync's own goroutine
// (Run, started by the partition beside its sessions and outliving them,
// so that a snapshot in progress survives a reconnect) ticks, follows and
// applies. Implementations must be safe for that: one feeding goroutine
// at a time, beside Run.
type SyncFeed interface {
	// DataAt feeds data read at pos: a copy of origin's entry at at when
	// the copy's origin is signed (marker.Origin.Signed), local data (or
	// a copy not proven one) when origin is "".
	DataAt(ctx context.Context, pos marker.Position, origin string, at marker.Position)
	// MarkerAt feeds a marker read at pos (entryrule.Marker): body is its
	// encoded form, from is where the entry says it was copied from
	// (entryrule.Origin), producer the name it was written under. It reports
	// whether the pipe forwards the entry to the remote.
	MarkerAt(ctx context.Context, pos marker.Position, body []byte, from marker.Origin, producer string) (forward bool)
	// BatchedMarker feeds a marker read at pos in an entry that cannot
	// hold one marker as written (a batch, compressed, encrypted); the
	// pipe skips it.
	BatchedMarker(pos marker.Position)
	// Takeover tells the sync that the pipe resumed past entries it did
	// not read itself (another instance processed them; see continues).
	Takeover()
	// StartsAt reports whether pos, the first entry the pipe reads since
	// the sync was built, is where the sync assumes reading starts: any
	// entry, unless the sync assumes it reads the partition from its
	// first entry (snapshot.Config.Fresh).
	StartsAt(pos marker.Position) bool
	// ActiveChanged tells the sync that Config.Active changed (the sync
	// reads it through its own Config.Active): this instance's cursor
	// became, or stopped being, the partition's active consumer.
	ActiveChanged()
	// Run runs the sync until ctx is done; linkUp reports whether the
	// pipe has a producer to the remote open.
	Run(ctx context.Context, linkUp func() bool)
}
