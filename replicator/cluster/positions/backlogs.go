package positions

// Backlogs from the servlet: GET /geo-sidecar/backlogs answers, for the
// namespaces and subscription names asked, every such subscription's
// backlog in entries on the topics the broker has loaded, as the admin
// API's stats count it (msgBacklog). The subscription lag gauges take
// both clusters' backlogs from it: one request per broker, where the
// stats reading is one per topic partition.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	u, err := url.Parse(strings.TrimRight(broker, "/") + BacklogsPath)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("positions: broker URL %q is not http(s)://host:port", broker)
	}
	u.RawQuery = url.Values{"namespace": q.Namespaces, "subscription": q.Subscriptions}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("positions: request to %s: %w", u.Host, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("positions: ask %s for backlogs: %w", u.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("positions: read the answer of %s: %w", u.Host, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w (%s answered 404 to %s)", ErrNoServlet, u.Host, BacklogsPath)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("%w (%s answered %d)", ErrRefused, u.Host, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("positions: %s answered %d to %s", u.Host, resp.StatusCode, BacklogsPath)
	}
	out, err := DecodeBacklogs(body, q)
	if err != nil {
		return nil, fmt.Errorf("positions: the backlogs of %s: %w", u.Host, err)
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
	if len(body) > maxBody {
		return nil, fmt.Errorf("answer over %d bytes", maxBody)
	}
	var w backlogsWire
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the answer")
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
