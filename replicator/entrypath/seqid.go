package entrypath

// The sequence ids the copies are sent with, and their epochs.

import (
	"strconv"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// entrySeq is the sequence id a copy of the entry at pos is sent with:
// the entry's position packed as ledger<<32 | entry (the ledger's low 31
// bits: see epochs below), so that the same entry carries the same id in
// every session and on every instance, and ids grow with positions. The
// remote's deduplication then stores each entry once and in order
// whichever session's copy arrives first, even when sends of a session
// given up on (a send timeout, a lost connection, an instance that lost
// the cursor) are still in the link and land after the next session's.
// Ids counted per session from the broker's record could not: the
// broker's record and the read-back's proof (copiedSince) are taken at
// different moments, so when old sends land in between, a new session
// numbers the next entries below ids already used for later ones, and a
// slow link gets copies stored twice and out of order.
//
// Ledger ids are BookKeeper's, counted across the whole cluster, so a
// long-lived cluster reaches 2^31 and beyond, while the broker's ids are
// signed (below 2^63) and 32 bits go to the entry: 31 bits of ledger fit.
// So ledger ids are cut into epochs of 2^31 (seqEpoch), and each epoch
// has a producer name of its own (epochProducerName): in epoch e the id
// is (ledger mod 2^31)<<32 | entry under the e-th name. Within an epoch
// ids grow with positions as before; at the step from one epoch to the
// next the packed ledger falls back to 0, which the broker would take for
// a duplicate of everything sent under the old name, so the new epoch
// starts under a name the broker has no record for. A session's producer
// belongs to one epoch: at the first entry of another one the session
// ends once what it sent is confirmed (errEpochChanged), and the next
// session opens the producer under that epoch's name. Epoch 0 (ledgers
// below 2^31) keeps the name and the packing of the versions before
// epochs, so the remotes' records for it stay valid. Every ledger id has
// an epoch (read as unsigned, even the ones no BookKeeper hands out), so
// every real position gets its packed id. The read-back (copiedSince)
// recognises copies by their signed origin whatever the producer name,
// so copies sent before the step are found after it; only recordReach
// reads the record of a name, the one of the epoch it asks for.
//
// Why not another packing under one name: no split of 63 bits holds any
// ledger id with 2^32 entries, a split giving the ledger more bits fails
// on large ledgers instead, and ids relative to some base need the base
// kept somewhere; a name per 2^31 ledger ids costs one session restart
// per partition each time the cluster counts another 2^31 ledgers.
//
// floor is the lowest id the broker takes as new: its record for the
// producer's name when the producer opened plus one, or the previous id
// sent plus one. An entry whose packed id is below it (the broker
// recorded a later entry of this partition whose copy the read-back did
// not find, or a record counted by an older version on a ledger 0), or
// whose entry id does not fit (2^32 entries in one ledger, only reachable by
// configuring ledgers that large), gets the floor instead: sent again
// under a new id, a possible duplicate but never taken for one. That
// takes the read-back's proof that the entry is not on the remote: a
// session whose read-back failed sends no entry under a counted id
// (see maxReadBackRetries). The caller sends it under the producer name
// of pos's epoch.
func entrySeq(pos marker.Position, floor uint64) (seq uint64, packed bool) {
	if pos.Entry < 0 || pos.Entry >= 1<<32 {
		return floor, false
	}
	id := (uint64(pos.Ledger)&epochLedgerMask)<<32 | uint64(pos.Entry)
	if id < floor {
		return floor, false
	}
	return id, true
}

// epochLedgerBits is how many low bits of a ledger id entrySeq packs;
// the bits above them are the ledger's epoch.
const epochLedgerBits = 31

const epochLedgerMask = 1<<epochLedgerBits - 1

// seqEpoch is the epoch of a ledger id (see entrySeq): 0 below 2^31.
func seqEpoch(ledger int64) uint64 { return uint64(ledger) >> epochLedgerBits }

// epochProducerName is the producer name the entry pipe sends the
// entries of epoch under (see entrySeq): base in epoch 0, as every
// version before epochs did, base + ".epoch<e>" after. Cluster names
// hold no dot, so no pair's base name ends like that; the prefix stays
// base's, which starts with marker.SidecarProducers.
func epochProducerName(base string, epoch uint64) string {
	if epoch == 0 {
		return base
	}
	return base + ".epoch" + strconv.FormatUint(epoch, 10)
}

// recordReach is how many entries from pos on the remote's record for
// the producer name of pos's epoch (an id entrySeq packed) says the pair
// may have copied: the read-back must look back that far from the
// remote's end to see them all. Its usual window (max_pending_messages +
// 100) covers one session's sends in flight; copies from further back
// (an instance that ran ahead of a cursor whose acknowledgements were
// lost) would otherwise be missed and sent again under a counted id. 0
// when the record is not in pos's ledger (or not a packed id): the usual
// window then.
func recordReach(record int64, pos marker.Position) int64 {
	if record < 0 || pos.Entry < 0 {
		return 0
	}
	ledger, entry := uint64(record)>>32, record&(1<<32-1)
	if ledger != uint64(pos.Ledger)&epochLedgerMask || entry < pos.Entry {
		return 0
	}
	return entry - pos.Entry + 1
}
