package subscription

// Applying an update received from a remote: which route moves the
// subscription (Decide, a pure function of what is known of it), and
// Apply, which takes that route through one of three movers: the brokers'
// positions servlet where it runs (Movers.Servlet: a cumulative
// acknowledgement inside the broker, as Pulsar's own replicated
// subscriptions apply an update, for any type with consumers attached or
// not, docs/design/subscription-follow.md §12.7), the binary protocol
// (Movers.Protocol: an acknowledgement by a consumer that attaches for a
// few milliseconds and never receives, §3–§5) or the admin API (Admin:
// reset-cursor, which disconnects every consumer attached, so only where
// none is).

import (
	"context"
	"errors"
	"fmt"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Type is a subscription's type, as the broker's stats name it.
type Type uint8

// Subscription types. TypeUnknown is the broker's "None" (nobody attached
// since the topic was loaded) or a type not known here.
const (
	TypeUnknown Type = iota
	Exclusive
	Failover
	Shared
	KeyShared
)

// ParseType reads the type of a subscription's stats ("Exclusive",
// "Failover", "Shared", "Key_Shared"); anything else is TypeUnknown.
func ParseType(s string) Type {
	switch s {
	case "Exclusive":
		return Exclusive
	case "Failover":
		return Failover
	case "Shared":
		return Shared
	case "Key_Shared":
		return KeyShared
	}
	return TypeUnknown
}

func (t Type) String() string {
	switch t {
	case Exclusive:
		return "Exclusive"
	case Failover:
		return "Failover"
	case Shared:
		return "Shared"
	case KeyShared:
		return "Key_Shared"
	}
	return "unknown"
}

// KeySharedMode is how a Key_Shared subscription shares its keys.
type KeySharedMode uint8

// Key_Shared modes. ModeUnknown: not read (the admin stats of
// pulsar-client-go do not carry it), or not Key_Shared.
const (
	ModeUnknown KeySharedMode = iota
	AutoSplit
	Sticky
)

// State is a subscription's state on one partition.
type State struct {
	Exists     bool
	MarkDelete marker.Position // entry granular; Batch is ignored
	// Consumers are the applications' consumers attached (a move's own
	// consumer is not one).
	Consumers int
	// Type is the type the subscription's applications use: the broker's
	// while one is attached, else the last one known (TypeUnknown: none).
	Type            Type
	Mode            KeySharedMode // Key_Shared only
	AllowOutOfOrder bool          // Key_Shared only
}

// Target is what the caller knows of the subscription an update moves, as
// Decide takes it: its State as last read (possibly some time ago), and
// what that reading left open.
type Target struct {
	State
	// MarkDeleteKnown: State.MarkDelete is a reading (the admin's, or the
	// last move's read-back); false, it is not known and not compared.
	MarkDeleteKnown bool
	// Protocol: a protocol mover is available for the subscription's
	// cluster.
	Protocol bool
	// Servlet: the positions servlet of the broker that has the
	// subscription's topic can move it (Movers.Servlet). Nothing else of
	// the Target is needed then: the servlet moves any type, consumers
	// attached or not, and refuses a move backwards itself.
	Servlet bool
	// Busy: the broker refused the last protocol move's consumer, and the
	// state was not read again since.
	Busy bool
	// Fresh: nobody attached and MarkDelete still the one the caller's
	// last move left, both shown by a reading taken after that move and
	// a moment ago (the caller's rule: replicator/subsync's standby.go).
	// The admin route then resets without reading the state again (one
	// request instead of three). Ignored unless Exists, MarkDeleteKnown
	// and Consumers == 0.
	Fresh bool
}

// Route is how an update moves a subscription; the values are bounded
// metric labels.
type Route string

const (
	// RouteProtocol: an acknowledgement over the binary protocol.
	RouteProtocol Route = "protocol"
	// RouteAdmin: the admin API (create, reset-cursor).
	RouteAdmin Route = "admin"
	// RouteNone: not moved (a refusal, decided without a call).
	RouteNone Route = "none"
	// RouteServlet: a cumulative acknowledgement by the broker's
	// positions servlet.
	RouteServlet Route = "servlet"
)

// Routes are the values of Route, for metrics set at 0.
var Routes = []Route{RouteProtocol, RouteAdmin, RouteNone, RouteServlet}

// Ack is the acknowledgement a protocol move sends.
type Ack uint8

const (
	// Cumulative: one acknowledgement of the target (Failover).
	Cumulative Ack = iota + 1
	// Individual: one of each entry after the mark-delete position up to
	// the target (Shared, Key_Shared: they take no cumulative one).
	Individual
)

// Outcome of Apply; the values are bounded metric labels.
type Outcome string

const (
	Applied          Outcome = "applied"
	Created          Outcome = "created"
	RefusedConsumers Outcome = "consumers-attached"
	// RefusedType: consumers are attached and the subscription's type
	// cannot be moved under them over the protocol (Exclusive, STICKY,
	// unknown), or the broker refused the move's consumer.
	RefusedType      Outcome = "refused-type"
	RefusedBackwards Outcome = "not-forward"
	Failed           Outcome = "error"
)

// Outcomes are the values of Outcome, for metrics set at 0.
var Outcomes = []Outcome{Applied, Created, RefusedConsumers, RefusedType, RefusedBackwards, Failed}

// Decision is the route an update takes, and how.
type Decision struct {
	Route Route
	// Outcome is why, for RouteNone.
	Outcome Outcome
	// At is, for RouteProtocol, the entry the mark-delete position is
	// moved to (everything up to and including it consumed: see
	// ProtocolTarget); for RouteAdmin, the entry the subscription is
	// positioned at (delivered again: see entryOf).
	At marker.Position
	// Create, for RouteAdmin: the subscription is missing; create it at At.
	Create bool
	// For RouteProtocol, how to attach and acknowledge.
	Type            Type
	AllowOutOfOrder bool
	Ack             Ack
}

// ProtocolTarget is where a protocol move puts the mark-delete position
// for an update to to (everything at or before to was consumed on the
// remote): to's entry when to is a whole entry, else the entry before it,
// whose messages are all consumed (to's entry holds some that may not be;
// entry -1 is valid, design §4).
func ProtocolTarget(to marker.Position) marker.Position {
	if to.Batch >= 0 {
		return marker.Position{Ledger: to.Ledger, Entry: to.Entry - 1, Batch: -1}
	}
	return entryOf(to)
}

// servable reports whether a protocol move can serve a subscription of
// the state st, consumers attached or not. With consumers attached the
// broker admits ours beside them only with the same type and Key_Shared
// mode; with none, nothing checks, so the type must be one the
// applications use and that a reconnecting application's consumer is
// admitted beside: never Exclusive, STICKY or an unknown type (an
// application refused while it reconnects stays refused for good with
// pulsar-client-go, E5, E6). Key_Shared only when AUTO_SPLIT is known,
// attached or not: "attached" is a reading up to minutes old, and a move
// that relied on the broker refusing it beside a STICKY application's
// consumers found, when those were all gone for a moment (a topic
// unload), no one to be refused beside: the dispatcher was made
// AUTO_SPLIT and the application's reconnecting consumers were refused
// for good.
func servable(st State) bool {
	switch st.Type {
	case Failover, Shared:
		return true
	case KeyShared:
		return st.Mode == AutoSplit
	}
	return false
}

// Decide is the route an update to to (a position in this cluster's
// partition: everything at or before it was consumed on the remote) takes
// for a subscription known as t. Pure; table-tested.
//
//   - Servlet: by the servlet, to ProtocolTarget(to), whatever else is
//     known.
//   - Missing: created by the admin API at to's entry (an attach would
//     give the subscription a type before its applications do).
//   - Consumers attached: over the protocol when the type allows it
//     (Failover cumulatively; Shared and Key_Shared AUTO_SPLIT, the mode
//     known, entry by entry), else refused: RefusedType (Exclusive,
//     Key_Shared STICKY or of an unknown mode, an unknown type, or
//     the broker refused the last attach: Busy), RefusedConsumers when no
//     protocol mover is available. Reset-cursor is never used then: it
//     disconnects them.
//   - None attached: over the protocol with the applications' type when
//     it is known and servable, else reset-cursor at to's entry (Apply
//     reads the state again first).
//
// A protocol move never goes back: the broker ignores an acknowledgement
// at or before the mark-delete position. When that position is known and
// not before the move's target, the move is not attempted
// (RefusedBackwards); nor is a reset to an entry not after it.
func Decide(t Target, to marker.Position) Decision {
	if t.Servlet {
		// Forward only by the servlet's own check, made atomically with
		// the move: a mark-delete position known here may be older than
		// an operator's rewind.
		return Decision{Route: RouteServlet, At: ProtocolTarget(to)}
	}
	if !t.Exists {
		return Decision{Route: RouteAdmin, Create: true, At: entryOf(to)}
	}
	attached := t.Consumers > 0
	switch {
	case t.Busy && attached:
		return Decision{Route: RouteNone, Outcome: RefusedType}
	case attached && !t.Protocol:
		return Decision{Route: RouteNone, Outcome: RefusedConsumers}
	case attached && !servable(t.State):
		return Decision{Route: RouteNone, Outcome: RefusedType}
	case t.Protocol && !t.Busy && servable(t.State):
		p := ProtocolTarget(to)
		if t.MarkDeleteKnown && p.Compare(entryOf(t.MarkDelete)) <= 0 {
			return Decision{Route: RouteNone, Outcome: RefusedBackwards}
		}
		d := Decision{Route: RouteProtocol, At: p, Type: t.Type, Ack: Individual}
		if t.Type == Failover {
			d.Ack = Cumulative
		}
		if t.Type == KeyShared {
			d.AllowOutOfOrder = t.AllowOutOfOrder
		}
		return d
	}
	// Positioned at `at`, the new mark-delete is just before at's entry: a
	// move only when at's entry is strictly after the current one. Equal
	// entries would redeliver the mark-delete entry, a step back.
	at := entryOf(to)
	if t.MarkDeleteKnown && at.Compare(entryOf(t.MarkDelete)) <= 0 {
		return Decision{Route: RouteNone, Outcome: RefusedBackwards}
	}
	return Decision{Route: RouteAdmin, At: at}
}

// Admin is the admin API as Apply's fallback uses it, for one partition.
// Implementations must be safe for concurrent use.
type Admin interface {
	// State reads sub's state now (stats and internal stats). A Type it
	// cannot read (the broker's None) is TypeUnknown.
	State(ctx context.Context, topic, sub string) (State, error)
	// Create creates sub so that the next message it delivers is the
	// entry at `at`.
	Create(ctx context.Context, topic, sub string, at marker.Position) error
	// Reset moves sub so that the next message it delivers is the entry at
	// `at` (Pulsar's reset-cursor, which disconnects consumers: Apply only
	// calls it when none are attached).
	Reset(ctx context.Context, topic, sub string, at marker.Position) error
}

// Movers are the movers Apply may use besides the admin API; a nil one is
// not available.
type Movers struct {
	Protocol Mover
	// Servlet moves with the broker's positions servlet: d.At is
	// acknowledged cumulatively. Its Moved has HasBefore (Before =
	// After) only when the subscription was at or past d.At already. An
	// error wrapping ErrUnavailable means it could not serve this move
	// (the subscription or its topic is not on the broker it knows):
	// Apply then takes the other routes.
	Servlet Mover
}

// ErrUnavailable is wrapped by a Movers.Servlet error when the servlet
// did not move the subscription and another route may.
var ErrUnavailable = errors.New("subscription: the servlet cannot move it")

// Mover moves a subscription over the binary protocol (see
// wire.Client.MoveSubscription) as d says: it attaches with d.Type (and
// d.AllowOutOfOrder), acknowledges up to d.At (d.Ack) and reads the
// mark-delete position back. A consumer of the move refused by the broker
// is an error wrapping ErrBusy. Implementations must be safe for
// concurrent use.
type Mover interface {
	Move(ctx context.Context, topic, sub string, d Decision) (Moved, error)
}

// Moved is what a protocol move read of the mark-delete position: After
// the acknowledgements, and Before them when it read it (HasBefore).
type Moved struct {
	Before, After marker.Position
	HasBefore     bool
}

// ErrBusy is wrapped by a Mover's error when the broker refused the move's
// consumer (another type attached, Exclusive taken, a consumer limit, a
// STICKY range): the subscription is unchanged.
var ErrBusy = errors.New("subscription: the broker refused the move's consumer")

// Result is what Apply did.
type Result struct {
	Route   Route
	Outcome Outcome
	// UpTo, when Moved, is the highest mark-delete position the
	// subscription can have while it is still where this update put it
	// (not moved by consumers since): the protocol move's target (or as
	// far as it got), or the entry before the one a reset or create
	// positioned it at. A position at or before it was set by the
	// update, and must not be sent on as one consumed here.
	UpTo  marker.Position
	Moved bool
	// MarkDelete is the subscription's mark-delete position after, when
	// read (MarkDeleteKnown).
	MarkDelete      marker.Position
	MarkDeleteKnown bool
	// Read is the state the admin route read (nil if it read none).
	Read *State
}

// Apply moves sub on topic for an update to to, along the route Decide
// gives for t, forward only, never disconnecting a consumer.
//
// The admin route first reads the state again (t may be old: consumers may
// have attached since) and decides on that reading: a consumer found
// attached then takes the protocol route or refuses. A Fresh target with
// nobody attached and its mark-delete position known is reset at once,
// on the caller's word that it holds now (Target.Fresh). A missing
// subscription is created at to's entry (Created); an existing one is
// reset there (Applied). Apply is not atomic: a consumer may attach, and
// consume, between that read and the reset, which then disconnects it and
// may move it back to to's entry: a duplicate, never a loss.
//
// The protocol route reports Applied when the mark-delete position read
// back reached the target (or, for Shared and Key_Shared, moved towards
// it: a move acknowledges a bounded number of entries), RefusedBackwards
// when it was there before, RefusedType when the broker refused the
// move's consumer (Result.Route is then RouteProtocol), Failed with an
// error otherwise.
//
// Refusals return a nil error; the caller counts them, and a later update
// retries. Failed comes with an error that names topic and sub.
func Apply(ctx context.Context, admin Admin, m Movers, t Target, topic, sub string, to marker.Position) (Result, error) {
	mover := m.Protocol
	if mover == nil {
		t.Protocol = false
	}
	if m.Servlet == nil {
		t.Servlet = false
	}
	d := Decide(t, to)
	if d.Route == RouteServlet {
		res, err := move(ctx, RouteServlet, m.Servlet, topic, sub, d)
		if !errors.Is(err, ErrUnavailable) {
			return res, err
		}
		t.Servlet = false
		d = Decide(t, to)
	}
	switch d.Route {
	case RouteNone:
		return Result{Route: RouteNone, Outcome: d.Outcome}, nil
	case RouteProtocol:
		return move(ctx, RouteProtocol, mover, topic, sub, d)
	}
	if t.Fresh && t.Exists && t.MarkDeleteKnown && t.Consumers == 0 && !d.Create {
		// Decide compared the update with the known position already.
		if err := admin.Reset(ctx, topic, sub, d.At); err != nil {
			return Result{Route: RouteAdmin, Outcome: Failed}, fmt.Errorf("resetting subscription %q on %s to %s: %w", sub, topic, d.At, err)
		}
		before := marker.Position{Ledger: d.At.Ledger, Entry: d.At.Entry - 1, Batch: -1}
		return Result{Route: RouteAdmin, Outcome: Applied, UpTo: before, Moved: true, MarkDelete: before, MarkDeleteKnown: true}, nil
	}
	st, err := admin.State(ctx, topic, sub)
	if err != nil {
		return Result{Route: RouteAdmin, Outcome: Failed}, fmt.Errorf("reading subscription %q on %s: %w", sub, topic, err)
	}
	if st.Type == TypeUnknown && st.Exists {
		st.Type, st.Mode, st.AllowOutOfOrder = t.Type, t.Mode, t.AllowOutOfOrder // the last known
	}
	fresh := Target{State: st, MarkDeleteKnown: st.Exists, Protocol: t.Protocol}
	d = Decide(fresh, to)
	res := Result{Route: d.Route, Read: &st, MarkDelete: st.MarkDelete, MarkDeleteKnown: st.Exists}
	switch {
	case d.Route == RouteNone:
		res.Outcome = d.Outcome
		return res, nil
	case d.Route == RouteProtocol:
		r, err := move(ctx, RouteProtocol, mover, topic, sub, d)
		r.Read = &st
		return r, err
	case d.Create:
		if err := admin.Create(ctx, topic, sub, d.At); err != nil {
			res.Outcome = Failed
			return res, fmt.Errorf("creating subscription %q on %s at %s: %w", sub, topic, d.At, err)
		}
		res.Outcome = Created
	default:
		if err := admin.Reset(ctx, topic, sub, d.At); err != nil {
			res.Outcome = Failed
			return res, fmt.Errorf("resetting subscription %q on %s to %s: %w", sub, topic, d.At, err)
		}
		res.Outcome = Applied
	}
	before := marker.Position{Ledger: d.At.Ledger, Entry: d.At.Entry - 1, Batch: -1}
	res.UpTo, res.Moved = before, true
	res.MarkDelete, res.MarkDeleteKnown = before, true
	return res, nil
}

// move takes the protocol route, or the servlet's (route).
func move(ctx context.Context, route Route, mover Mover, topic, sub string, d Decision) (Result, error) {
	res := Result{Route: route}
	by := "over the protocol"
	if route == RouteServlet {
		by = "by the positions servlet"
	}
	mv, err := mover.Move(ctx, topic, sub, d)
	switch {
	case errors.Is(err, ErrBusy):
		res.Outcome = RefusedType
		return res, nil
	case err != nil:
		res.Outcome = Failed
		return res, fmt.Errorf("moving subscription %q on %s to %s %s: %w", sub, topic, d.At, by, err)
	}
	after := entryOf(mv.After)
	res.MarkDelete, res.MarkDeleteKnown = after, true
	switch {
	case mv.HasBefore && entryOf(mv.Before).Compare(d.At) >= 0:
		res.Outcome = RefusedBackwards // there already: nothing of ours
	case after.Compare(d.At) >= 0:
		res.Outcome, res.UpTo, res.Moved = Applied, d.At, true
	case mv.HasBefore && after.Compare(entryOf(mv.Before)) > 0:
		res.Outcome, res.UpTo, res.Moved = Applied, after, true // as far as one move goes
	default:
		res.Outcome = Failed
		return res, fmt.Errorf("moving subscription %q on %s to %s %s: the mark-delete position is %s after the move", sub, topic, d.At, by, after)
	}
	return res, nil
}
