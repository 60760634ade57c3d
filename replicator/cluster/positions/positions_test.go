package positions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

var q0 = Query{Namespaces: []string{"t/ns"}, Subscriptions: []string{"app", "app2"}}

func pos(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }

// encode writes a as the servlet does (deploy/positions Json.java).
func encode(a Answer) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"v":1,"epoch":%s,"seq":%d,"full":%t,"subscriptions":[`, jstr(a.Epoch), a.Seq, a.Full)
	for i, s := range a.States {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"topic":%s,"subscription":%s,"seq":%d`, jstr(s.Topic), jstr(s.Subscription), s.Seq)
		if s.Gone {
			b.WriteString(`,"gone":true}`)
			continue
		}
		fmt.Fprintf(&b, `,"markDelete":[%d,%d],"acked":[`, s.MarkDelete.Ledger, s.MarkDelete.Entry)
		for j, r := range s.Acked {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "[%d,%d,%d,%d]", r.From.Ledger, r.From.Entry, r.To.Ledger, r.To.Entry)
		}
		b.WriteByte(']')
		if s.Truncated {
			b.WriteString(`,"truncated":true`)
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.String()
}

func jstr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestDecodeGood(t *testing.T) {
	since := Query{Namespaces: q0.Namespaces, Subscriptions: q0.Subscriptions, Since: 5, Epoch: "e1"}
	tests := []struct {
		name string
		q    Query
		body string
		want Answer
	}{
		{"empty full", q0, `{"v":1,"epoch":"e1","seq":0,"full":true,"subscriptions":[]}`, Answer{Epoch: "e1", Full: true, States: []State{}}},
		{"present with ranges", q0,
			`{"v":1,"epoch":"e1","seq":7,"full":true,"subscriptions":[{"topic":"persistent://t/ns/a-partition-0","subscription":"app","seq":7,"markDelete":[10,5],"acked":[[10,6,10,7],[10,8,10,9],[11,-1,11,3]]}]}`,
			Answer{Epoch: "e1", Seq: 7, Full: true, States: []State{{Topic: "persistent://t/ns/a-partition-0", Subscription: "app", Seq: 7, MarkDelete: pos(10, 5),
				Acked: []Range{{From: pos(10, 6), To: pos(10, 7)}, {From: pos(10, 8), To: pos(10, 9)}, {From: pos(11, -1), To: pos(11, 3)}}}}}},
		{"entry -1 and truncated", q0,
			`{"v":1,"epoch":"e1","seq":3,"full":true,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app2","seq":2,"markDelete":[10,-1],"acked":[[10,0,10,1]],"truncated":true}]}`,
			Answer{Epoch: "e1", Seq: 3, Full: true, States: []State{{Topic: "persistent://t/ns/a", Subscription: "app2", Seq: 2, MarkDelete: pos(10, -1), Acked: []Range{{From: pos(10, 0), To: pos(10, 1)}}, Truncated: true}}}},
		{"partial with gone", since,
			`{"v":1,"epoch":"e1","seq":9,"full":false,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app","seq":6,"gone":true},{"topic":"persistent://t/ns/b","subscription":"app","seq":9,"markDelete":[3,4],"acked":[]}]}`,
			Answer{Epoch: "e1", Seq: 9, States: []State{{Topic: "persistent://t/ns/a", Subscription: "app", Seq: 6, Gone: true}, {Topic: "persistent://t/ns/b", Subscription: "app", Seq: 9, MarkDelete: pos(3, 4)}}}},
		{"new epoch is full", since, `{"v":1,"epoch":"e2","seq":1,"full":true,"subscriptions":[]}`, Answer{Epoch: "e2", Seq: 1, Full: true, States: []State{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.body), tt.q)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Decode = %+v\nwant %+v", got, tt.want)
			}
			if again, err := Decode([]byte(encode(got)), tt.q); err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip: %+v, %v", again, err)
			}
		})
	}
}

func TestDecodeBad(t *testing.T) {
	since := Query{Namespaces: q0.Namespaces, Subscriptions: q0.Subscriptions, Since: 5, Epoch: "e1"}
	item := func(s string) string {
		return `{"v":1,"epoch":"e1","seq":9,"full":true,"subscriptions":[{` + s + `}]}`
	}
	ok := `"topic":"persistent://t/ns/a","subscription":"app","seq":3`
	tests := []struct {
		name string
		q    Query
		body string
		want string
	}{
		{"not json", q0, `nope`, "decode"},
		{"trailing", q0, `{"v":1,"epoch":"e","seq":0,"full":true,"subscriptions":[]} {}`, "trailing"},
		{"unknown field", q0, `{"v":1,"epoch":"e","seq":0,"full":true,"subscriptions":[],"x":1}`, "unknown field"},
		{"missing field", q0, `{"v":1,"epoch":"e","seq":0,"subscriptions":[]}`, "missing"},
		{"null subscriptions", q0, `{"v":1,"epoch":"e","seq":0,"full":true,"subscriptions":null}`, "missing"},
		{"version", q0, `{"v":2,"epoch":"e","seq":0,"full":true,"subscriptions":[]}`, "version"},
		{"empty epoch", q0, `{"v":1,"epoch":"","seq":0,"full":true,"subscriptions":[]}`, "epoch"},
		{"negative seq", q0, `{"v":1,"epoch":"e","seq":-1,"full":true,"subscriptions":[]}`, "negative"},
		{"float", q0, `{"v":1,"epoch":"e","seq":1.5,"full":true,"subscriptions":[]}`, "decode"},
		{"partial to a first query", q0, `{"v":1,"epoch":"e1","seq":9,"full":false,"subscriptions":[]}`, "partial"},
		{"partial of another epoch", since, `{"v":1,"epoch":"e2","seq":9,"full":false,"subscriptions":[]}`, "partial"},
		{"seq went back", since, `{"v":1,"epoch":"e1","seq":4,"full":false,"subscriptions":[]}`, "went back"},
		{"other namespace", q0, item(`"topic":"persistent://t/other/a","subscription":"app","seq":3,"markDelete":[1,1],"acked":[]`), "namespace"},
		{"sub-namespace trick", q0, item(`"topic":"persistent://t/ns/x/a","subscription":"app","seq":3,"markDelete":[1,1],"acked":[]`), "namespace"},
		{"non-persistent", q0, item(`"topic":"non-persistent://t/ns/a","subscription":"app","seq":3,"markDelete":[1,1],"acked":[]`), "persistent"},
		{"empty local name", q0, item(`"topic":"persistent://t/ns/","subscription":"app","seq":3,"markDelete":[1,1],"acked":[]`), "namespace"},
		{"subscription not asked", q0, item(`"topic":"persistent://t/ns/a","subscription":"other","seq":3,"markDelete":[1,1],"acked":[]`), "not asked"},
		{"seq above answer", q0, item(`"topic":"persistent://t/ns/a","subscription":"app","seq":10,"markDelete":[1,1],"acked":[]`), "outside"},
		{"seq not after since", since, `{"v":1,"epoch":"e1","seq":9,"full":false,"subscriptions":[{` + `"topic":"persistent://t/ns/a","subscription":"app","seq":5,"markDelete":[1,1],"acked":[]}]}`, "outside"},
		{"zero seq", q0, item(`"topic":"persistent://t/ns/a","subscription":"app","seq":0,"markDelete":[1,1],"acked":[]`), "not positive"},
		{"twice", q0, `{"v":1,"epoch":"e1","seq":9,"full":true,"subscriptions":[{` + ok + `,"markDelete":[1,1],"acked":[]},{` + ok + `,"markDelete":[1,2],"acked":[]}]}`, "twice"},
		{"gone in full", q0, item(ok + `,"gone":true`), "full answer"},
		{"gone false", since, `{"v":1,"epoch":"e1","seq":9,"full":false,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app","seq":7,"gone":false}]}`, "gone"},
		{"gone with position", since, `{"v":1,"epoch":"e1","seq":9,"full":false,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app","seq":7,"gone":true,"markDelete":[1,1]}]}`, "gone"},
		{"no position", q0, item(ok), "missing markDelete"},
		{"null acked", q0, item(ok + `,"markDelete":[1,1],"acked":null`), "missing markDelete"},
		{"short position", q0, item(ok + `,"markDelete":[1],"acked":[]`), "want [ledger, entry]"},
		{"long position", q0, item(ok + `,"markDelete":[1,2,3],"acked":[]`), "want [ledger, entry]"},
		{"negative ledger", q0, item(ok + `,"markDelete":[-1,2],"acked":[]`), "not a position"},
		{"entry below -1", q0, item(ok + `,"markDelete":[1,-2],"acked":[]`), "not a position"},
		{"range of 3", q0, item(ok + `,"markDelete":[1,1],"acked":[[1,2,1]]`), "want 4"},
		{"empty range", q0, item(ok + `,"markDelete":[1,1],"acked":[[1,3,1,3]]`), "empty"},
		{"range before md", q0, item(ok + `,"markDelete":[1,5],"acked":[[1,3,1,7]]`), "before"},
		{"ranges out of order", q0, item(ok + `,"markDelete":[1,1],"acked":[[1,5,1,7],[1,2,1,3]]`), "before"},
		{"overlapping", q0, item(ok + `,"markDelete":[1,1],"acked":[[1,2,1,5],[1,4,1,7]]`), "before"},
		{"truncated false", q0, item(ok + `,"markDelete":[1,1],"acked":[],"truncated":false`), "truncated"},
		{"string number", q0, item(ok + `,"markDelete":["1",1],"acked":[]`), "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.body), tt.q)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// fakeBroker answers like the servlet from a list of canned bodies, and
// records the queries.
type fakeBroker struct {
	mu      sync.Mutex
	status  int
	answers []string
	queries []string
}

func (f *fakeBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	f.queries = append(f.queries, r.URL.RawQuery)
	if f.status != 0 {
		w.WriteHeader(f.status)
		return
	}
	body := f.answers[0]
	if len(f.answers) > 1 {
		f.answers = f.answers[1:]
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

func TestGet(t *testing.T) {
	f := &fakeBroker{answers: []string{`{"v":1,"epoch":"e1","seq":1,"full":true,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app","seq":1,"markDelete":[3,4],"acked":[]}]}`}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := New(srv.Client())
	a, err := c.Get(context.Background(), srv.URL+"/", Query{Namespaces: []string{"t/ns"}, Subscriptions: []string{"app", "a&b"}, Since: 3, Epoch: "e0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.States) != 1 || a.States[0].MarkDelete != pos(3, 4) {
		t.Fatalf("Get = %+v", a)
	}
	if want := "epoch=e0&namespace=t%2Fns&since=3&subscription=app&subscription=a%26b"; f.queries[0] != want {
		t.Fatalf("query %q, want %q", f.queries[0], want)
	}

	for _, tt := range []struct {
		status int
		want   error
	}{{404, ErrNoServlet}, {401, ErrRefused}, {403, ErrRefused}, {500, nil}} {
		f.status = tt.status
		_, err := c.Get(context.Background(), srv.URL, q0)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("status %d: err %v, want %v", tt.status, err, tt.want)
		}
	}
	f.status = 0
	for _, bad := range []Query{
		{Subscriptions: []string{"app"}},
		{Namespaces: []string{"t/ns"}},
		{Namespaces: []string{"t"}, Subscriptions: []string{"app"}},
		{Namespaces: []string{"t/ns/x"}, Subscriptions: []string{"app"}},
		{Namespaces: []string{"t/ns"}, Subscriptions: []string{""}},
		{Namespaces: []string{"t/ns"}, Subscriptions: []string{"a"}, Since: -1},
	} {
		if _, err := c.Get(context.Background(), srv.URL, bad); err == nil {
			t.Errorf("Get(%+v) = nil error", bad)
		}
	}
	if _, err := c.Get(context.Background(), "ftp://x", q0); err == nil {
		t.Error("ftp broker URL accepted")
	}
}

func TestView(t *testing.T) {
	st := func(topic string, seq, l, e int64) string {
		return fmt.Sprintf(`{"topic":"persistent://t/ns/%s","subscription":"app","seq":%d,"markDelete":[%d,%d],"acked":[]}`, topic, seq, l, e)
	}
	ans := func(epoch string, seq int64, full bool, items ...string) string {
		return fmt.Sprintf(`{"v":1,"epoch":%q,"seq":%d,"full":%t,"subscriptions":[%s]}`, epoch, seq, full, strings.Join(items, ","))
	}
	f := &fakeBroker{answers: []string{
		ans("e1", 2, true, st("a", 1, 1, 5), st("b", 2, 1, 7)),
		ans("e1", 2, false),
		ans("e1", 4, false, st("a", 3, 1, 2), `{"topic":"persistent://t/ns/b","subscription":"app","seq":4,"gone":true}`),
		// The broker restarted: a full answer of a new epoch, where a is
		// where it was (not a change) and c is new.
		ans("e2", 2, true, st("a", 1, 1, 2), st("c", 2, 2, 0)),
		ans("e2", 3, true, st("c", 3, 2, 1)),
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, v := New(srv.Client()), NewView([]string{"t/ns"}, []string{"app"})
	type got struct {
		topic string
		gone  bool
		md    marker.Position
	}
	poll := func() []got {
		t.Helper()
		a, err := c.Get(context.Background(), srv.URL, v.Query())
		if err != nil {
			t.Fatal(err)
		}
		ss := v.Apply(a)
		var out []got
		for _, s := range ss {
			out = append(out, got{strings.TrimPrefix(s.Topic, "persistent://t/ns/"), s.Gone, s.MarkDelete})
		}
		return out
	}
	steps := [][]got{
		{{"a", false, pos(1, 5)}, {"b", false, pos(1, 7)}},
		nil,
		{{"a", false, pos(1, 2)}, {"b", true, marker.Position{}}},
		{{"c", false, pos(2, 0)}},
		{{"c", false, pos(2, 1)}, {"a", true, marker.Position{}}},
	}
	for i, want := range steps {
		if g := poll(); !reflect.DeepEqual(g, want) {
			t.Fatalf("poll %d = %+v, want %+v", i, g, want)
		}
	}
	wantQ := [][2]string{{"", ""}, {"e1", "2"}, {"e1", "2"}, {"e1", "4"}, {"e2", "2"}}
	for i, w := range wantQ {
		q, _ := url.ParseQuery(f.queries[i])
		if q.Get("epoch") != w[0] || q.Get("since") != w[1] {
			t.Errorf("query %d = %q, want epoch %q since %q", i, f.queries[i], w[0], w[1])
		}
	}
	if _, ok := v.Known(Key{"persistent://t/ns/a", "app"}); ok {
		t.Error("a still known after a full answer without it")
	}
}
