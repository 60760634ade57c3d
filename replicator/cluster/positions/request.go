package positions

// What the servlet's three endpoints share: one request to one broker and
// its status codes (roundTrip), and the strictness of reading an answer
// (decodeStrict).

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

// roundTrip sends one request to path below broker's web service URL
// ("https://broker-1:8443") and returns the body of a 200 answer (at most
// limit bytes; a longer one is cut there and fails its decoding), with the
// broker's host:port for messages. A 404, or a 405 (a servlet of an older
// NAR without that endpoint), is ErrNoServlet; 401 and 403 are ErrRefused.
func (c *Client) roundTrip(ctx context.Context, method, broker, path string, query url.Values, body []byte, limit int64) ([]byte, string, error) {
	u, err := url.Parse(strings.TrimRight(broker, "/") + path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", fmt.Errorf("positions: broker URL %q is not http(s)://host:port", broker)
	}
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, u.Host, fmt.Errorf("positions: request to %s: %w", u.Host, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, u.Host, fmt.Errorf("positions: %s %s on %s: %w", method, path, u.Host, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, u.Host, fmt.Errorf("positions: read the answer of %s: %w", u.Host, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, u.Host, fmt.Errorf("%w (%s answered %d to %s)", ErrNoServlet, u.Host, resp.StatusCode, path)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, u.Host, fmt.Errorf("%w (%s answered %d)", ErrRefused, u.Host, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, u.Host, fmt.Errorf("positions: %s answered %d to %s", u.Host, resp.StatusCode, path)
	}
	return answer, u.Host, nil
}

// decodeStrict reads body into v: one JSON object of v's fields only,
// nothing after it, body at most limit bytes.
func decodeStrict(body []byte, limit int, v any) error {
	if len(body) > limit {
		return fmt.Errorf("answer over %d bytes", limit)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the answer")
	}
	return nil
}
