package entrypath

// Why a session ends, and what comes next: the next session at once,
// after a backoff, or, at a refusal, none until the operator acts
// (runSessions).

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// restartNow is the type of the errors that end a session for a cause
// that is no failure: the cursor became a standby or delivered again, or
// ahead of its first unacknowledged entry; the remote is out of reach and
// the session stepped down; the entries reached another sequence id
// epoch; an entry the remote refuses was skipped. The session ended so
// that the next one starts from what is known for sure, and runSessions
// starts it at once, without a backoff or a warning (restartsAtOnce).
// Each cause is one sentinel of this type, which errors.Is tells apart;
// an error that wraps one is of the class too.
type restartNow struct{ msg string }

func (e *restartNow) Error() string { return e.msg }

// restartsAtOnce reports whether runSessions starts the next session at
// once after one that ended with err: err is nil (the session ended
// without an error) or a restartNow. Any other error is a failure, and
// the next session waits for a backoff.
func restartsAtOnce(err error) bool {
	var r *restartNow
	return err == nil || errors.As(err, &r)
}

// errStandby ends a session whose cursor became a standby while it held
// the producer; Run starts the next one at once.
var errStandby error = &restartNow{"cursor became a standby"}

// errRedelivered ends a session whose cursor delivered an entry again
// (the client reconnected, or the cursor became active again, and the
// broker redelivered what was not acknowledged). Some of those entries
// may be in flight or on the remote already; rather than track which,
// Run starts the next session at once, and its read-back of the remote
// (copiedSince) sorts them out.
var errRedelivered error = &restartNow{"cursor redelivered messages"}

// errStartAhead ends a session whose cursor delivered a later entry before
// the first unacknowledged one. A Failover subscription does that when
// its active consumer changes while a read is pending: the broker hands
// the new consumer what that read returns (entries after the old one's
// last), and only then rewinds to the first unacknowledged entry. Sent,
// the later entry would land on the remote before the earlier ones (two
// instances killed and started under load are enough). The next session
// starts after the rewind.
var errStartAhead error = &restartNow{"cursor delivered a later entry before the first unacknowledged one"}

// errSteppedDown ends a session whose remote had no working link for
// stepDownAfter: its cursor is closed so that the broker makes another
// instance's consumer active (one that may reach the remote), and the
// partition subscribes again only once the remote answers (awaitTarget).
// With no other instance nothing moves meanwhile; the backlog waits on
// the cursor.
var errSteppedDown error = &restartNow{"remote unreachable: stepped down"}

// errEpochChanged ends a session at the first entry of another epoch than
// its producer's (see entrySeq), once every entry it sent was confirmed;
// Run starts the next session at once, which opens the producer under the
// new epoch's name.
var errEpochChanged error = &restartNow{"ledger ids reached another sequence id epoch"}

// errRefusedSkipped ends a session whose remote refused an entry for good
// with on_refused: skip: the entry was skipped, but the producer gave up
// with the refusal, so the next session (at once) sends what follows.
var errRefusedSkipped error = &restartNow{"an entry the remote refuses for good was skipped (on_refused: skip)"}

// errInDoubt ends a session whose producer found, reconnecting, that the
// remote's deduplication record for its name went back (a broker that
// crashed rebuilt it without the pair's copies; wire.ErrInDoubt): the
// entries in flight may be on the remote, and the wire producer failed
// them rather than send them again (stored twice, behind later ones).
// None of them is acknowledged; the next session starts at once from the
// cursor, reads the remote back (copiedSince: its window covers the
// producer's max_pending_messages in flight) and skips the copies it
// finds there, sending the rest.
var errInDoubt error = &restartNow{"entries in flight in doubt: the remote's deduplication record went back"}

// inDoubt wraps err, which ends the session while doing what, in
// errInDoubt when the producer failed with wire.ErrInDoubt.
func inDoubt(what string, err error) error {
	if errors.Is(err, wire.ErrInDoubt) {
		return fmt.Errorf("%w: %s: %w", errInDoubt, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Other errors that end a session, retried after a backoff.

// errAwaitingReadBack ends a session without the read-back's proof at an
// entry the remote may hold already (see session.awaitReadBack).
var errAwaitingReadBack = errors.New("the remote's deduplication record may cover this entry and the read-back failed: waiting for one that goes through")

// errProducerGaveUp ends a session whose producer gave up for good while
// its link was down (its reconnect refused with an error no retry
// changes: a terminated target topic, a revoked permission), found when
// the step-down fell due (see stepDown): the remote answers and refuses,
// so the partition does not step down. The next session opens a new
// producer at its next entry, whose refusal takes its usual route (a
// terminated topic stops the partition there).
var errProducerGaveUp = errors.New("the producer on the remote gave up")

// errUnprovenDuplicate ends a session whose remote answered a send as a
// duplicate. The answer means the broker recorded a sequence id at or
// above the entry's for this producer name, which a later entry can
// have set; so the entry is not acknowledged on its word. The next
// session reads the remote back and acknowledges the entry only if it
// finds the copy there (copiedSince), and sends it again otherwise.
var errUnprovenDuplicate = errors.New("the remote answered a send as a duplicate; re-reading the remote before going on")

// refusedError ends a session at a message the remote can never take
// (over its size limit, refused by its broker for good, a schema the
// source no longer serves) when the pair does not skip such messages
// (on_refused: stop, the default), or at a target topic that takes no
// message at all (stopTargetTerminated, whatever on_refused says).
type refusedError struct {
	pos    marker.Position
	reason string // a refusal's skip reason, or stopTargetTerminated (see refusal)
	schema []byte // the entry's schema version when the refusal is about it
	err    error
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the remote refuses the message at %s for good (%s): %v", e.pos.String(), e.reason, e.err)
}

func (e *refusedError) Unwrap() error { return e.err }

// stopTargetTerminated is the reason a partition stops at a target topic
// that was terminated (TopicTerminatedError, on a send or when the
// producer opens): the broker takes no message on it ever again, so
// on_refused: skip would acknowledge every message of the partition from
// there on, unsent. It is never a skip reason: the partition stops
// whatever on_refused says, its backlog waiting on the cursor, until the
// operator deletes or replaces the target topic and restarts the sidecar.
const stopTargetTerminated = "target-terminated"

// refusal classifies a send error: the skip reason of an entry the
// remote can never take, stopTargetTerminated for a target topic that
// takes none, or "" for any other error (retried).
//
// The broker's own codes classify the refusals: NotAllowed and
// IncompatibleSchema answer the same entry the same way however often it
// is sent, and a terminated topic every entry: retried as an ordinary
// error, they would end a session every 10 s for ever, with on_refused
// having no say. A schema version the source no longer serves
// (errSourceSchemaMissing) is gone for good too. Authentication and
// authorization are not refusals of the entry: a grant or a new token
// lets it through, and the sidecar reports those by name (noteOpen).
func refusal(err error) string {
	var be *wire.BrokerError
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return entryrule.SkipRejectedTooBig
	case errors.Is(err, errSourceSchemaMissing):
		return entryrule.SkipSourceSchemaMissing
	case errors.As(err, &be) && be.Code == wire.TopicTerminatedError:
		return stopTargetTerminated
	case errors.As(err, &be) && (be.Code == wire.NotAllowedError || be.Code == wire.MetadataError && strings.HasPrefix(be.Op, "send")):
		// MetadataError on a send: the entry's metadata refused by
		// policy, e.g. "Messages must be encrypted".
		return entryrule.SkipRejectedNotAllowed
	case errors.As(err, &be) && be.Code == wire.IncompatibleSchema:
		return entryrule.SkipRejectedSchema
	}
	return ""
}

// skips reports whether an entry refused for reason (see refusal) is
// skipped: on_refused: skip, and the reason is the entry's own.
func (p *Partition) skips(reason string) bool {
	return p.skipRefused && reason != stopTargetTerminated
}

// schemaVersionString is a schema version as an operator reads it:
// Pulsar's are 8-byte big-endian numbers, anything else is shown in hex.
func schemaVersionString(v []byte) string {
	if len(v) == 8 {
		return strconv.FormatUint(binary.BigEndian.Uint64(v), 10)
	}
	return hex.EncodeToString(v)
}
