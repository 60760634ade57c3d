package cluster

// Listing a namespace's persistent topics in two admin requests.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
)

// topicLister lists a namespace's persistent topics over the admin REST
// API: GET /admin/v2/persistent/{tenant}/{ns}/partitioned and
// GET /admin/v2/persistent/{tenant}/{ns}, at once.
//
// pulsaradmin's Topics().List asks four things, the non-persistent lists
// too, which discovery throws away (only persistent topics are
// replicated): half of the requests of every discovery round and of every
// target check (docs/benchmark.md, History). It also leaves its other requests' goroutines blocked
// for good when one fails (an unbuffered error channel nobody reads after
// the first error), and a target check of a missing namespace fails
// every round.
type topicLister struct {
	web  *http.Client // its transport sets the credentials and counts the calls
	base string       // the admin service URL, without a trailing slash
}

// list returns the partitioned topics and the others (partitions of
// partitioned topics included, as Pulsar lists them). A refusal is a
// rest.Error with the HTTP status, as pulsaradmin's are (a missing
// namespace: 404).
func (l topicLister) list(ctx context.Context, namespace string) (partitioned, plain []string, err error) {
	path := "/admin/v2/persistent/" + escapeNamespace(namespace)
	errc := make(chan error, 1)
	go func() { errc <- l.get(ctx, path+"/partitioned", &partitioned) }()
	err = l.get(ctx, path, &plain)
	if perr := <-errc; err == nil {
		err = perr
	}
	if err != nil {
		return nil, nil, err
	}
	return partitioned, plain, nil
}

// escapeNamespace escapes each part of tenant/namespace for a URL path.
func escapeNamespace(ns string) string {
	parts := strings.Split(ns, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// maxListBody bounds what a list answer may hold: about 60 bytes a topic
// name, a million names.
const maxListBody = 64 << 20

func (l topicLister) get(ctx context.Context, path string, out *[]string) error {
	body, err := adminGet(ctx, l.web, l.base, path, nil, maxListBody)
	if err != nil {
		return err
	}
	var names []string
	if err := json.Unmarshal(body, &names); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	*out = names
	return nil
}

// adminGet is a GET of path (with query) on the admin API at base, over
// web (whose transport sets the credentials and counts the call), for a
// JSON answer of at most limit bytes. A refusal is a rest.Error with the
// HTTP status and the broker's reason, as pulsaradmin's are.
func adminGet(ctx context.Context, web *http.Client, base, path string, query url.Values, limit int64) ([]byte, error) {
	u := base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := web.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := rest.Error{Code: resp.StatusCode, Reason: resp.Status}
		if json.Unmarshal(body, &e) != nil && len(body) > 0 {
			e.Reason = string(body[:min(len(body), 512)])
		}
		e.Code = resp.StatusCode
		return nil, e
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: the answer is over %d bytes", path, limit)
	}
	return body, nil
}
