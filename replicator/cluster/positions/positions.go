// Package positions reads many subscriptions' positions from a broker in
// one request, from geo-sidecar's positions servlet (deploy/positions), a
// broker plugin of Pulsar's "additional servlet" type.
//
// Without the plugin the sidecar learns where a local subscription is from
// the admin API, one stats or internal-stats request per topic partition
// under a request budget, so following N busy topics takes N/budget
// seconds a round. The servlet answers, for the namespaces and
// subscription names asked, the mark-delete position and the individually
// acknowledged ranges of every such subscription on the topics that broker
// owns, and with Since only those whose state changed since the caller's
// last answer: one request per broker a round, bytes in proportion to the
// changes (docs/design/subscription-follow.md, §12).
//
// The servlet compares states, not events, so a reset-cursor (rewind), a
// skip, a clear-backlog and a message expiry show up like an
// acknowledgement does.
//
// An answer is outside input: Decode refuses anything but exactly the
// format, and binds every state to what was asked (a topic of an asked
// namespace, an asked subscription name) and to what it says (the topic
// partition, the subscription, ledger:entry), see Decode.
package positions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Path is where the servlet answers, below a broker's web service URL.
const Path = "/geo-sidecar/positions"

// The servlet's limits per request (PositionsServlet.MAX_NAMESPACES,
// MAX_SUBSCRIPTIONS); a Query beyond them is refused before it is sent.
const (
	MaxNamespaces    = 100
	MaxSubscriptions = 1000
)

// maxBody bounds an answer: 10,000 partitions with a few ranges each take
// about 1.5 MB; a subscription with 10,000 ranges (the most the servlet
// lists) about 400 KB.
const maxBody = 64 << 20

// ErrNoServlet is returned by Get when the broker does not run the servlet
// (404): the caller keeps to the admin API for that broker.
var ErrNoServlet = errors.New("positions: the broker has no positions servlet")

// ErrRefused is returned by Get when the broker refused the caller (401 or
// 403: its authentication or authorization).
var ErrRefused = errors.New("positions: the broker refused the request")

// Query is what one request asks: every subscription named Subscriptions
// on the topics of Namespaces that the broker owns. Since and Epoch are the
// Seq and Epoch of the caller's last answer from this broker (zero values:
// none), so the broker answers only what changed since.
type Query struct {
	Namespaces    []string // "tenant/namespace"
	Subscriptions []string
	Since         int64
	Epoch         string
}

// Range is a run of individually acknowledged entries: those after From,
// up to and including To (the broker's open-closed form). Both are whole
// entries (Batch -1). It is marker's: the continuous follow carries such
// runs to the remote in a signed marker (marker.KindAcked).
type Range = marker.Range

// State is one subscription on one topic partition as the broker's poll
// read it.
type State struct {
	// Topic is the full name of the topic partition
	// ("persistent://tenant/ns/name-partition-3", or the topic's own name
	// when it has no partitions).
	Topic        string
	Subscription string
	// Seq numbers this state among the broker's answers (see Answer.Seq).
	Seq int64
	// Gone: the subscription is no longer on this broker (deleted, or its
	// topic unloaded or moved to another broker). MarkDelete and Acked are
	// then zero.
	Gone bool
	// MarkDelete is the subscription's mark-delete position: every entry up
	// to and including it was acknowledged. A whole entry (Batch -1); entry
	// -1 is before the ledger's first entry.
	MarkDelete marker.Position
	// Acked are the individually acknowledged runs after MarkDelete, in
	// order, not overlapping.
	Acked []Range
	// Truncated: the subscription had more runs than the answer lists (the
	// first ones are listed). MarkDelete stands.
	Truncated bool
}

// Answer is one broker's answer.
type Answer struct {
	// Epoch names the broker's numbering (new at each broker start).
	Epoch string
	// Seq is the newest number given: the Since of the next Query.
	Seq int64
	// Full: States holds every subscription in scope, and one the caller
	// knew from this broker that is not listed is gone. Otherwise States
	// holds those whose state changed after the Query's Since, gone ones
	// included.
	Full   bool
	States []State
}

// Doer sends a request: an *http.Client whose transport sets the
// cluster's admin credentials and TLS settings (cluster.Clients').
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client asks brokers for positions. Safe for concurrent use.
type Client struct {
	http Doer
}

// New is a client sending over h.
func New(h Doer) *Client { return &Client{http: h} }

// Get asks the broker whose web service URL is broker (scheme, host and
// port: "https://broker-1:8443") for q.
func (c *Client) Get(ctx context.Context, broker string, q Query) (Answer, error) {
	if err := q.check(); err != nil {
		return Answer{}, err
	}
	v := url.Values{"namespace": q.Namespaces, "subscription": q.Subscriptions}
	if q.Since > 0 {
		v.Set("since", strconv.FormatInt(q.Since, 10))
	}
	if q.Epoch != "" {
		v.Set("epoch", q.Epoch)
	}
	body, host, err := c.roundTrip(ctx, http.MethodGet, broker, Path, v, nil, maxBody)
	if err != nil {
		return Answer{}, err
	}
	a, err := Decode(body, q)
	if err != nil {
		return Answer{}, fmt.Errorf("positions: the answer of %s: %w", host, err)
	}
	return a, nil
}

func (q Query) check() error {
	if len(q.Namespaces) == 0 || len(q.Namespaces) > MaxNamespaces {
		return fmt.Errorf("positions: %d namespaces asked, want 1 to %d", len(q.Namespaces), MaxNamespaces)
	}
	if len(q.Subscriptions) == 0 || len(q.Subscriptions) > MaxSubscriptions {
		return fmt.Errorf("positions: %d subscriptions asked, want 1 to %d", len(q.Subscriptions), MaxSubscriptions)
	}
	for _, ns := range q.Namespaces {
		t, n, ok := strings.Cut(ns, "/")
		if !ok || t == "" || n == "" || strings.Contains(n, "/") {
			return fmt.Errorf("positions: namespace %q is not tenant/namespace", ns)
		}
	}
	for _, s := range q.Subscriptions {
		if s == "" {
			return errors.New("positions: an empty subscription name")
		}
	}
	if q.Since < 0 {
		return fmt.Errorf("positions: since %d is negative", q.Since)
	}
	return nil
}

// wire is the answer's JSON form (deploy/positions Json.java).
type wire struct {
	V             *int        `json:"v"`
	Epoch         *string     `json:"epoch"`
	Seq           *int64      `json:"seq"`
	Full          *bool       `json:"full"`
	Subscriptions *[]wireItem `json:"subscriptions"`
}

type wireItem struct {
	Topic        *string   `json:"topic"`
	Subscription *string   `json:"subscription"`
	Seq          *int64    `json:"seq"`
	Gone         *bool     `json:"gone"`
	MarkDelete   []int64   `json:"markDelete"`
	Acked        [][]int64 `json:"acked"`
	Truncated    *bool     `json:"truncated"`
}

// Decode reads an answer to q strictly. It refuses, with an error naming
// the first fault: anything but one JSON object of exactly the servlet's
// fields (unknown fields, missing ones, nulls, numbers that are not
// integers, trailing data); a version other than 1; an empty or over-long
// epoch; a state for a topic outside q's namespaces or not persistent, or
// for a subscription q did not name, or twice for the same topic and
// subscription; a state numbered above the answer's Seq, or (not Full, same
// epoch) not above q.Since; a gone state with a position, a present one
// without; a negative ledger or an entry below -1; a run that is empty,
// not after the mark-delete, or out of order with the one before.
func Decode(body []byte, q Query) (Answer, error) {
	var w wire
	if err := decodeStrict(body, maxBody, &w); err != nil {
		return Answer{}, err
	}
	switch {
	case w.V == nil || w.Epoch == nil || w.Seq == nil || w.Full == nil || w.Subscriptions == nil:
		return Answer{}, errors.New("missing v, epoch, seq, full or subscriptions")
	case *w.V != 1:
		return Answer{}, fmt.Errorf("version %d, want 1", *w.V)
	case *w.Epoch == "" || len(*w.Epoch) > 64:
		return Answer{}, fmt.Errorf("epoch %q is empty or over 64 bytes", *w.Epoch)
	case *w.Seq < 0:
		return Answer{}, fmt.Errorf("seq %d is negative", *w.Seq)
	}
	a := Answer{Epoch: *w.Epoch, Seq: *w.Seq, Full: *w.Full}
	if !a.Full && (q.Epoch != a.Epoch || q.Since <= 0) {
		return Answer{}, fmt.Errorf("a partial answer to a query of epoch %q since %d, answered with epoch %q", q.Epoch, q.Since, a.Epoch)
	}
	if !a.Full && a.Seq < q.Since {
		return Answer{}, fmt.Errorf("seq %d went back from %d", a.Seq, q.Since)
	}
	namespaces := set(q.Namespaces)
	subs := set(q.Subscriptions)
	seen := make(map[[2]string]bool, len(*w.Subscriptions))
	a.States = make([]State, 0, len(*w.Subscriptions))
	for i, it := range *w.Subscriptions {
		s, err := decodeItem(it, namespaces, subs)
		if err != nil {
			return Answer{}, fmt.Errorf("subscriptions[%d]: %w", i, err)
		}
		if s.Seq > a.Seq || (!a.Full && s.Seq <= q.Since) {
			return Answer{}, fmt.Errorf("subscriptions[%d]: seq %d outside (%d, %d]", i, s.Seq, q.Since, a.Seq)
		}
		if a.Full && s.Gone {
			return Answer{}, fmt.Errorf("subscriptions[%d]: a gone state in a full answer", i)
		}
		k := [2]string{s.Topic, s.Subscription}
		if seen[k] {
			return Answer{}, fmt.Errorf("subscriptions[%d]: %s %s listed twice", i, s.Topic, s.Subscription)
		}
		seen[k] = true
		a.States = append(a.States, s)
	}
	return a, nil
}

func decodeItem(it wireItem, namespaces, subs map[string]bool) (State, error) {
	if it.Topic == nil || it.Subscription == nil || it.Seq == nil {
		return State{}, errors.New("missing topic, subscription or seq")
	}
	s := State{Topic: *it.Topic, Subscription: *it.Subscription, Seq: *it.Seq}
	rest, ok := strings.CutPrefix(s.Topic, "persistent://")
	if !ok {
		return State{}, fmt.Errorf("topic %q is not persistent://", s.Topic)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 || !namespaces[rest[:i]] || rest[i+1:] == "" {
		return State{}, fmt.Errorf("topic %q is not in a namespace asked", s.Topic)
	}
	if !subs[s.Subscription] {
		return State{}, fmt.Errorf("subscription %q was not asked", s.Subscription)
	}
	if s.Seq < 1 {
		return State{}, fmt.Errorf("seq %d is not positive", s.Seq)
	}
	if it.Gone != nil {
		if !*it.Gone || it.MarkDelete != nil || it.Acked != nil || it.Truncated != nil {
			return State{}, errors.New(`"gone" must be true and alone`)
		}
		s.Gone = true
		return s, nil
	}
	if it.MarkDelete == nil || it.Acked == nil {
		return State{}, errors.New("missing markDelete or acked")
	}
	md, err := entry(it.MarkDelete)
	if err != nil {
		return State{}, fmt.Errorf("markDelete: %w", err)
	}
	s.MarkDelete = md
	prev := md
	for j, r := range it.Acked {
		if len(r) != 4 {
			return State{}, fmt.Errorf("acked[%d]: %d numbers, want 4", j, len(r))
		}
		from, err := entry(r[:2])
		if err != nil {
			return State{}, fmt.Errorf("acked[%d]: %w", j, err)
		}
		to, err := entry(r[2:])
		if err != nil {
			return State{}, fmt.Errorf("acked[%d]: %w", j, err)
		}
		if to.Compare(from) <= 0 {
			return State{}, fmt.Errorf("acked[%d]: (%d:%d, %d:%d] is empty", j, from.Ledger, from.Entry, to.Ledger, to.Entry)
		}
		if from.Compare(prev) < 0 {
			return State{}, fmt.Errorf("acked[%d]: starts before the mark-delete or the run before it", j)
		}
		s.Acked = append(s.Acked, Range{From: from, To: to})
		prev = to
	}
	if it.Truncated != nil {
		if !*it.Truncated {
			return State{}, errors.New(`"truncated" must be true or absent`)
		}
		s.Truncated = true
	}
	return s, nil
}

// entry reads [ledger, entry] as a whole-entry position.
func entry(p []int64) (marker.Position, error) {
	if len(p) != 2 {
		return marker.Position{}, fmt.Errorf("%d numbers, want [ledger, entry]", len(p))
	}
	if p[0] < 0 || p[1] < -1 {
		return marker.Position{}, fmt.Errorf("%d:%d is not a position", p[0], p[1])
	}
	return marker.Position{Ledger: p[0], Entry: p[1], Batch: -1}, nil
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
