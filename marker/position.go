package marker

import (
	"cmp"
	"strconv"
	"strings"
)

// Position is a message id inside ONE partition of ONE cluster: the ledger,
// the entry in the ledger, and the index of the message in a batched entry.
// Positions of different partitions or clusters never compare meaningfully.
type Position struct {
	Ledger int64
	Entry  int64
	// Batch is the index inside a batched entry, or -1 for an entry that is
	// not batched (the whole entry).
	Batch int32
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q in the
// partition: by ledger, then entry, then batch index.
//
// Batch -1 (a non-batched entry, or the entry as a whole) sorts after every
// batch index of the same entry, so a position naming a whole entry is at
// or beyond each message in it, which is what "consumed up to" needs. Pulsar
// uses no other negative batch index; should one appear, it also sorts after
// all non-negative indexes (in the order of its value as a uint32), so that
// Compare stays a total order.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.Ledger, q.Ledger); c != 0 {
		return c
	}
	if c := cmp.Compare(p.Entry, q.Entry); c != 0 {
		return c
	}
	return cmp.Compare(uint32(p.Batch), uint32(q.Batch))
}

// NoneSeen is the watermark of a third origin of which the responder's
// partition held no message: it sorts before every real position, and a
// requester needs nothing of that origin. Responses name it rather than
// leave the origin out, so that a response read back after a restart says
// what was known of every origin (see snapshot.Machine.Learn).
var NoneSeen = Position{Ledger: -1, Entry: -1, Batch: -1}

// String returns "ledger:entry:batch", the form of the origin-id property
// that the replicator writes on every copy.
func (p Position) String() string {
	b := make([]byte, 0, 48)
	b = strconv.AppendInt(b, p.Ledger, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.Entry, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(p.Batch), 10)
	return string(b)
}

// ParsePosition reads the "ledger:entry:batch" form String writes (the
// origin-id property of every copy): three base-10 integers, the batch
// index within 32 bits. Anything else is refused with ok false.
func ParsePosition(s string) (p Position, ok bool) {
	l, rest, ok1 := strings.Cut(s, ":")
	e, b, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return Position{}, false
	}
	ledger, err1 := strconv.ParseInt(l, 10, 64)
	entry, err2 := strconv.ParseInt(e, 10, 64)
	batch, err3 := strconv.ParseInt(b, 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return Position{}, false
	}
	return Position{Ledger: ledger, Entry: entry, Batch: int32(batch)}, true
}
