package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
)

// TestTopicLister: a namespace's persistent topics in two requests (the
// non-persistent lists are never asked for); refusals come back as
// rest.Error with the HTTP status and the broker's reason, as
// pulsaradmin's do (checkTarget tells a missing namespace by its 404).
func TestTopicLister(t *testing.T) {
	const ns = "shop/orders"
	for _, tt := range []struct {
		name        string
		partitioned func(w http.ResponseWriter)
		plain       func(w http.ResponseWriter)
		wantPart    []string
		wantPlain   []string
		wantCode    int // 0: no rest.Error
		wantReason  string
		wantErr     bool
	}{
		{name: "both lists",
			partitioned: answer(200, `["persistent://shop/orders/a"]`),
			plain:       answer(200, `["persistent://shop/orders/a-partition-0","persistent://shop/orders/b"]`),
			wantPart:    []string{"persistent://shop/orders/a"},
			wantPlain:   []string{"persistent://shop/orders/a-partition-0", "persistent://shop/orders/b"}},
		{name: "empty namespace", partitioned: answer(200, `[]`), plain: answer(200, `[]`),
			wantPart: []string{}, wantPlain: []string{}},
		{name: "namespace missing", partitioned: answer(404, `{"reason":"Namespace does not exist"}`),
			plain: answer(404, `{"reason":"Namespace does not exist"}`), wantErr: true, wantCode: 404, wantReason: "Namespace does not exist"},
		{name: "refused on one list only", partitioned: answer(403, `{"reason":"Don't have permission"}`),
			plain: answer(200, `[]`), wantErr: true, wantCode: 403, wantReason: "Don't have permission"},
		{name: "an error page that is not JSON", partitioned: answer(200, `[]`),
			plain: answer(502, `<html>bad gateway</html>`), wantErr: true, wantCode: 502, wantReason: "<html>bad gateway</html>"},
		{name: "a list that is not JSON", partitioned: answer(200, `[]`), plain: answer(200, `{"topics":`), wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				paths = append(paths, r.URL.Path)
				mu.Unlock()
				if r.Header.Get("Accept") != "application/json" {
					t.Errorf("Accept %q", r.Header.Get("Accept"))
				}
				switch r.URL.Path {
				case "/admin/v2/persistent/shop/orders/partitioned":
					tt.partitioned(w)
				case "/admin/v2/persistent/shop/orders":
					tt.plain(w)
				default:
					w.WriteHeader(500)
				}
			}))
			defer srv.Close()
			l := topicLister{web: srv.Client(), base: srv.URL}
			part, plain, err := l.list(context.Background(), ns)
			slices.Sort(paths)
			if want := []string{"/admin/v2/persistent/shop/orders", "/admin/v2/persistent/shop/orders/partitioned"}; !slices.Equal(paths, want) {
				t.Errorf("requests %v, want %v", paths, want)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tt.wantErr)
			}
			var re rest.Error
			switch {
			case tt.wantCode == 0 && errors.As(err, &re):
				t.Errorf("a rest.Error %v for a bad answer", re)
			case tt.wantCode != 0 && (!errors.As(err, &re) || re.Code != tt.wantCode || re.Reason != tt.wantReason):
				t.Errorf("err %#v, want rest.Error code %d reason %q", err, tt.wantCode, tt.wantReason)
			}
			if err == nil && (!slices.Equal(part, tt.wantPart) || !slices.Equal(plain, tt.wantPlain)) {
				t.Errorf("lists %q, %q; want %q, %q", part, plain, tt.wantPart, tt.wantPlain)
			}
		})
	}
}

func answer(code int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}
