package positions

// Backlogs from the servlet: GET /geo-sidecar/backlogs answers, for the
// namespaces and subscription names asked, every such subscription's
// backlog in entries on the topics the broker has loaded, as the admin
// API's stats count it (msgBacklog). The subscription lag gauges take
// both clusters' backlogs from it: one request per broker, where the
// stats reading is one per topic partition.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// BacklogsPath is where the servlet answers backlogs, below a broker's web
// service URL.
const BacklogsPath = "/geo-sidecar/backlogs"

// Backlogs asks the broker whose web service URL is broker for the
// backlogs of q's subscriptions (q's Since and Epoch are not used), by
// topic partition and subscription. ErrNoServlet: the broker has no
// servlet, or one without this endpoint (an older NAR).
func (c *Client) Backlogs(ctx context.Context, broker string, q Query) (map[Key]int64, error) {
	q.Since, q.Epoch = 0, ""
	if err := q.check(); err != nil {
		return nil, err
	}
	v := url.Values{"namespace": q.Namespaces, "subscription": q.Subscriptions}
	body, host, err := c.roundTrip(ctx, http.MethodGet, broker, BacklogsPath, v, nil, maxBody)
	if err != nil {
		return nil, err
	}
	out, err := DecodeBacklogs(body, q)
	if err != nil {
		return nil, fmt.Errorf("positions: the backlogs of %s: %w", host, err)
	}
	return out, nil
}

type backlogsWire struct {
	V        *int               `json:"v"`
	Backlogs *[]backlogWireItem `json:"backlogs"`
}

type backlogWireItem struct {
	Topic        *string `json:"topic"`
	Subscription *string `json:"subscription"`
	Entries      *int64  `json:"entries"`
}

// DecodeBacklogs reads an answer to q strictly: exactly the servlet's
// fields, version 1, each backlog for a persistent topic of a namespace q
// asked and a subscription q named, once, and not negative.
func DecodeBacklogs(body []byte, q Query) (map[Key]int64, error) {
	var w backlogsWire
	if err := decodeStrict(body, maxBody, &w); err != nil {
		return nil, err
	}
	switch {
	case w.V == nil || w.Backlogs == nil:
		return nil, errors.New("missing v or backlogs")
	case *w.V != 1:
		return nil, fmt.Errorf("version %d, want 1", *w.V)
	}
	namespaces, subs := set(q.Namespaces), set(q.Subscriptions)
	out := make(map[Key]int64, len(*w.Backlogs))
	for i, it := range *w.Backlogs {
		if it.Topic == nil || it.Subscription == nil || it.Entries == nil {
			return nil, fmt.Errorf("backlogs[%d]: missing topic, subscription or entries", i)
		}
		rest, ok := strings.CutPrefix(*it.Topic, "persistent://")
		j := strings.LastIndexByte(rest, '/')
		if !ok || j < 0 || !namespaces[rest[:j]] || rest[j+1:] == "" {
			return nil, fmt.Errorf("backlogs[%d]: topic %q is not a persistent topic of a namespace asked", i, *it.Topic)
		}
		if !subs[*it.Subscription] {
			return nil, fmt.Errorf("backlogs[%d]: subscription %q was not asked", i, *it.Subscription)
		}
		if *it.Entries < 0 {
			return nil, fmt.Errorf("backlogs[%d]: %d entries", i, *it.Entries)
		}
		k := Key{Topic: *it.Topic, Subscription: *it.Subscription}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("backlogs[%d]: %s %s listed twice", i, k.Topic, k.Subscription)
		}
		out[k] = *it.Entries
	}
	return out, nil
}
