package subsynctest

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// Topic is the partition the admin fakes answer for: any other topic is
// an error, so a sync asking about the wrong partition fails its test.
const Topic = "persistent://shop/orders/orders-partition-0"

// SyncAdmin is a subsync.Admin with settable answers, for Topic. Safe for
// concurrent use; a test that reads or sets its fields while a sync runs
// holds Mu.
type SyncAdmin struct {
	Mu         sync.Mutex
	MD         map[string]marker.Position
	Backlog    map[string]int64
	MDErr      error
	BacklogErr error
	// MDCalls and LagCalls count the calls of MarkDeletes and Backlogs.
	MDCalls  int
	LagCalls int
}

func (a *SyncAdmin) MarkDeletes(_ context.Context, topic string) (map[string]marker.Position, error) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.MDCalls++
	if topic != Topic {
		return nil, fmt.Errorf("unexpected topic %q", topic)
	}
	if a.MDErr != nil {
		return nil, a.MDErr
	}
	return maps.Clone(a.MD), nil
}

func (a *SyncAdmin) Backlogs(_ context.Context, topic string) (map[string]int64, error) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.LagCalls++
	if topic != Topic {
		return nil, fmt.Errorf("unexpected topic %q", topic)
	}
	if a.BacklogErr != nil {
		return nil, a.BacklogErr
	}
	return maps.Clone(a.Backlog), nil
}

// SetMD sets sub's mark-delete position.
func (a *SyncAdmin) SetMD(sub string, p marker.Position) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if a.MD == nil {
		a.MD = map[string]marker.Position{}
	}
	a.MD[sub] = p
}

// SubAdmin is a subscription.Admin over an in-memory set of subscriptions
// of Topic. Reset and Create put the subscription's mark-delete position
// just before `at`, as Pulsar does. Safe for concurrent use.
type SubAdmin struct {
	Mu       sync.Mutex
	Subs     map[string]subscription.State
	StateErr error
	ResetErr error
	Calls    []string // "reset billing 1:20:-1", "create audit 3:4:-1"
	States   int      // State calls
}

func (a *SubAdmin) State(_ context.Context, topic, sub string) (subscription.State, error) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.States++
	if topic != Topic {
		return subscription.State{}, fmt.Errorf("unexpected topic %q", topic)
	}
	if a.StateErr != nil {
		return subscription.State{}, a.StateErr
	}
	return a.Subs[sub], nil
}

func (a *SubAdmin) Create(_ context.Context, topic, sub string, at marker.Position) error {
	return a.move("create", topic, sub, at)
}

func (a *SubAdmin) Reset(_ context.Context, topic, sub string, at marker.Position) error {
	return a.move("reset", topic, sub, at)
}

func (a *SubAdmin) move(op, topic, sub string, at marker.Position) error {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if topic != Topic {
		return fmt.Errorf("unexpected topic %q", topic)
	}
	a.Calls = append(a.Calls, fmt.Sprintf("%s %s %s", op, sub, at))
	if op == "reset" && a.ResetErr != nil {
		return a.ResetErr
	}
	if a.Subs == nil {
		a.Subs = map[string]subscription.State{}
	}
	st := a.Subs[sub]
	st.Exists = true
	st.MarkDelete = Pos(at.Ledger, at.Entry-1)
	a.Subs[sub] = st
	return nil
}

// Set sets sub's state.
func (a *SubAdmin) Set(sub string, st subscription.State) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if a.Subs == nil {
		a.Subs = map[string]subscription.State{}
	}
	a.Subs[sub] = st
}

// StateReads counts the calls of State.
func (a *SubAdmin) StateReads() int {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return a.States
}

// TakeCalls returns the resets and creations since the last call.
func (a *SubAdmin) TakeCalls() []string {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	out := a.Calls
	a.Calls = nil
	return out
}

// Entry is one entry a History reader returns; it has the fields of
// subsync.HistoryEntry, in its order, so that a test converts it
// (subsync.HistoryEntry(e)): this package cannot name subsync's types,
// since subsync's own tests import it.
type Entry struct {
	Pos     marker.Position
	Kind    marker.Kind
	Marker  bool
	Payload []byte // markers only
}

// History is a start-up history source over a fixed list of messages;
// a test wraps it to return subsync.HistoryReader. Safe for concurrent
// use.
type History struct {
	Mu      sync.Mutex
	Msgs    []pulsar.Message
	OpenErr error
	NextErr error // after the messages, Next fails with it (nil: the end)
	Opened  int
	Closed  int
	Read    int
	Froms   []marker.Position // where each reader started
}

// Open opens a reader at from (its first message at or after from; from
// all when from.Ledger < 0).
func (h *History) Open(ctx context.Context, from marker.Position) (*HistoryReader, error) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	h.Opened++
	h.Froms = append(h.Froms, from)
	if h.OpenErr != nil {
		return nil, h.OpenErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	i := 0
	if from.Ledger >= 0 {
		for i < len(h.Msgs) && PositionOf(h.Msgs[i].ID()).Compare(from) < 0 {
			i++
		}
	}
	return &HistoryReader{h: h, i: i}, nil
}

// Opens counts the calls of Open.
func (h *History) Opens() int {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Opened
}

// HistoryReader reads a History from where it was opened.
type HistoryReader struct {
	h *History
	i int
}

// Next returns the next entry (ok false at the end, or with NextErr).
func (r *HistoryReader) Next(ctx context.Context) (Entry, bool, error) {
	r.h.Mu.Lock()
	defer r.h.Mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Entry{}, false, err
	}
	if r.i >= len(r.h.Msgs) {
		return Entry{}, false, r.h.NextErr
	}
	m := r.h.Msgs[r.i]
	r.i++
	r.h.Read++
	e := Entry{Pos: PositionOf(m.ID())}
	if e.Kind, e.Marker = marker.KindOf(m.Properties()); e.Marker {
		e.Payload = m.Payload()
	}
	return e, true, nil
}

func (r *HistoryReader) Close() {
	r.h.Mu.Lock()
	defer r.h.Mu.Unlock()
	r.h.Closed++
}
