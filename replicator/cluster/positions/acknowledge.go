package positions

// Moving subscriptions through the servlet: POST /geo-sidecar/acknowledge
// (deploy/positions, Acknowledger.java) acknowledges each subscription
// cumulatively up to a position, as Pulsar's own replicated subscriptions
// apply an update from another cluster: whatever the subscription's type,
// with its consumers attached or not, never backwards. Many moves cost one
// request per broker, where the admin API's reset-cursor costs one per
// move (and disconnects consumers, so it is never used with any attached).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// AckPath is where the servlet takes moves, below a broker's web service
// URL.
const AckPath = "/geo-sidecar/acknowledge"

// MaxAcks is the most moves one request carries (Acknowledger.MAX_ACKS).
const MaxAcks = 1000

// maxAckBody bounds an answer to MaxAcks moves (about 300 bytes each with
// long names).
const maxAckBody = 4 << 20

// Ack is one move: acknowledge Subscription on Topic (a full persistent
// topic partition name) cumulatively up to and including At, a whole entry
// (entry -1: nothing of that ledger).
type Ack struct {
	Topic        string
	Subscription string
	At           marker.Position
}

// Outcome is what the servlet did with one Ack; the values are the
// servlet's and bounded.
type Outcome string

const (
	// Moved: acknowledged; the mark-delete position is at or after At.
	Moved Outcome = "moved"
	// NotForward: the mark-delete position was at or after At already;
	// nothing done.
	NotForward Outcome = "not-forward"
	// BeyondEnd: At is after the topic's last entry; nothing done.
	BeyondEnd Outcome = "beyond-end"
	// NoSubscription: the topic is on this broker, the subscription is not.
	NoSubscription Outcome = "no-subscription"
	// NotHere: this broker has not loaded the topic (it may be owned by
	// another).
	NotHere Outcome = "not-here"
	// Pending: acknowledged, but the mark-delete position read after it is
	// still before At.
	Pending Outcome = "pending"
	// AckFailed: the broker's acknowledgement threw.
	AckFailed Outcome = "failed"
)

var outcomes = map[Outcome]bool{Moved: true, NotForward: true, BeyondEnd: true, NoSubscription: true, NotHere: true, Pending: true, AckFailed: true}

// AckResult is the servlet's answer for one Ack: the outcome, and the
// mark-delete position read after it (HasMarkDelete: read; always for
// Moved, NotForward, BeyondEnd and Pending).
type AckResult struct {
	Outcome       Outcome
	MarkDelete    marker.Position
	HasMarkDelete bool
}

// Acknowledge asks the broker whose web service URL is broker to move
// each of acks (1 to MaxAcks, no topic and subscription twice); the
// results are in acks' order. ErrNoServlet: the broker has no servlet, or
// one without this endpoint (an older NAR); ErrRefused: the caller may not
// reset the cursor of some subscription named (nothing was moved).
func (c *Client) Acknowledge(ctx context.Context, broker string, acks []Ack) ([]AckResult, error) {
	body, err := ackBody(acks)
	if err != nil {
		return nil, err
	}
	answer, host, err := c.roundTrip(ctx, http.MethodPost, broker, AckPath, nil, body, maxAckBody)
	if err != nil {
		return nil, err
	}
	res, err := DecodeAcknowledged(answer, acks)
	if err != nil {
		return nil, fmt.Errorf("positions: the answer of %s: %w", host, err)
	}
	return res, nil
}

// ackBody is acks as the servlet reads them: one line per move, topic and
// subscription URL-encoded.
func ackBody(acks []Ack) ([]byte, error) {
	if len(acks) == 0 || len(acks) > MaxAcks {
		return nil, fmt.Errorf("positions: %d moves, want 1 to %d", len(acks), MaxAcks)
	}
	seen := make(map[[2]string]bool, len(acks))
	var b bytes.Buffer
	for i, a := range acks {
		switch {
		case !strings.HasPrefix(a.Topic, "persistent://"):
			return nil, fmt.Errorf("positions: move %d: topic %q is not persistent://", i, a.Topic)
		case a.Subscription == "":
			return nil, fmt.Errorf("positions: move %d: empty subscription", i)
		case a.At.Ledger < 0 || a.At.Entry < -1 || a.At.Batch >= 0:
			return nil, fmt.Errorf("positions: move %d: %s is not a whole entry", i, a.At)
		case seen[[2]string{a.Topic, a.Subscription}]:
			return nil, fmt.Errorf("positions: move %d: %s %s twice", i, a.Topic, a.Subscription)
		}
		seen[[2]string{a.Topic, a.Subscription}] = true
		b.WriteString(url.QueryEscape(a.Topic))
		b.WriteByte(' ')
		b.WriteString(url.QueryEscape(a.Subscription))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(a.At.Ledger, 10))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(a.At.Entry, 10))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

type ackWire struct {
	V       *int           `json:"v"`
	Results *[]ackWireItem `json:"results"`
}

type ackWireItem struct {
	Topic        *string `json:"topic"`
	Subscription *string `json:"subscription"`
	Outcome      *string `json:"outcome"`
	MarkDelete   []int64 `json:"markDelete"`
}

// DecodeAcknowledged reads the answer to acks strictly: exactly the
// servlet's fields, version 1, one result per move in the same order,
// each naming that move's topic and subscription, with a known outcome
// and, where the outcome has one, a mark-delete position that agrees with
// it (Moved: at or after the move's target; NotForward: at or after it;
// Pending and BeyondEnd: before it). A result cannot speak for a
// subscription it was not asked about.
func DecodeAcknowledged(body []byte, acks []Ack) ([]AckResult, error) {
	var w ackWire
	if err := decodeStrict(body, maxAckBody, &w); err != nil {
		return nil, err
	}
	switch {
	case w.V == nil || w.Results == nil:
		return nil, errors.New("missing v or results")
	case *w.V != 1:
		return nil, fmt.Errorf("version %d, want 1", *w.V)
	case len(*w.Results) != len(acks):
		return nil, fmt.Errorf("%d results for %d moves", len(*w.Results), len(acks))
	}
	out := make([]AckResult, len(acks))
	for i, it := range *w.Results {
		a := acks[i]
		if it.Topic == nil || it.Subscription == nil || it.Outcome == nil {
			return nil, fmt.Errorf("results[%d]: missing topic, subscription or outcome", i)
		}
		if *it.Topic != a.Topic || *it.Subscription != a.Subscription {
			return nil, fmt.Errorf("results[%d]: names %s %s, the move was for %s %s", i, *it.Topic, *it.Subscription, a.Topic, a.Subscription)
		}
		o := Outcome(*it.Outcome)
		if !outcomes[o] {
			return nil, fmt.Errorf("results[%d]: unknown outcome %q", i, *it.Outcome)
		}
		r := AckResult{Outcome: o}
		if it.MarkDelete != nil {
			md, err := entry(it.MarkDelete)
			if err != nil {
				return nil, fmt.Errorf("results[%d]: markDelete: %w", i, err)
			}
			r.MarkDelete, r.HasMarkDelete = md, true
		}
		at := marker.Position{Ledger: a.At.Ledger, Entry: a.At.Entry, Batch: -1}
		switch o {
		case Moved, NotForward:
			if !r.HasMarkDelete || r.MarkDelete.Compare(at) < 0 {
				return nil, fmt.Errorf("results[%d]: %s with the mark-delete position before the target", i, o)
			}
		case Pending:
			if !r.HasMarkDelete || r.MarkDelete.Compare(at) >= 0 {
				return nil, fmt.Errorf("results[%d]: %s with no mark-delete position before the target", i, o)
			}
		case BeyondEnd:
			if r.HasMarkDelete && r.MarkDelete.Compare(at) >= 0 {
				return nil, fmt.Errorf("results[%d]: %s with the mark-delete position at the target", i, o)
			}
		case NoSubscription, NotHere:
			if r.HasMarkDelete {
				return nil, fmt.Errorf("results[%d]: %s with a mark-delete position", i, o)
			}
		}
		out[i] = r
	}
	return out, nil
}
