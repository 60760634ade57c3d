package positions

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

func at(l, e int64) marker.Position { return marker.Position{Ledger: l, Entry: e, Batch: -1} }

var twoAcks = []Ack{
	{Topic: "persistent://t/ns/a-partition-0", Subscription: "my app", At: at(10, 5)},
	{Topic: "persistent://t/ns/b", Subscription: "app", At: at(3, -1)},
}

func TestAckBody(t *testing.T) {
	b, err := ackBody(twoAcks)
	if err != nil {
		t.Fatal(err)
	}
	want := "persistent%3A%2F%2Ft%2Fns%2Fa-partition-0 my+app 10 5\npersistent%3A%2F%2Ft%2Fns%2Fb app 3 -1\n"
	if string(b) != want {
		t.Fatalf("body %q, want %q", b, want)
	}
	for name, acks := range map[string][]Ack{
		"none":           nil,
		"not persistent": {{Topic: "non-persistent://t/ns/a", Subscription: "s", At: at(1, 1)}},
		"no name":        {{Topic: "persistent://t/ns/a", At: at(1, 1)}},
		"batch":          {{Topic: "persistent://t/ns/a", Subscription: "s", At: marker.Position{Ledger: 1, Entry: 1, Batch: 0}}},
		"entry -2":       {{Topic: "persistent://t/ns/a", Subscription: "s", At: at(1, -2)}},
		"twice":          {twoAcks[0], twoAcks[0]},
	} {
		if _, err := ackBody(acks); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDecodeAcknowledged(t *testing.T) {
	good := `{"v":1,"results":[{"topic":"persistent://t/ns/a-partition-0","subscription":"my app","outcome":"moved","markDelete":[10,7]},` +
		`{"topic":"persistent://t/ns/b","subscription":"app","outcome":"not-here"}]}`
	res, err := DecodeAcknowledged([]byte(good), twoAcks)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != (AckResult{Outcome: Moved, MarkDelete: at(10, 7), HasMarkDelete: true}) || res[1] != (AckResult{Outcome: NotHere}) {
		t.Fatalf("results %+v", res)
	}
	first := `{"topic":"persistent://t/ns/a-partition-0","subscription":"my app",`
	second := `,{"topic":"persistent://t/ns/b","subscription":"app","outcome":"not-here"}]}`
	for name, body := range map[string]string{
		"version":                strings.Replace(good, `"v":1`, `"v":2`, 1),
		"unknown field":          strings.Replace(good, `"v":1`, `"v":1,"x":1`, 1),
		"trailing":               good + `{}`,
		"one result short":       `{"v":1,"results":[` + first + `"outcome":"moved","markDelete":[10,7]}]}`,
		"another subscription":   strings.Replace(good, `"my app"`, `"other"`, 1),
		"another topic":          strings.Replace(good, `a-partition-0`, `a-partition-1`, 1),
		"order swapped":          `{"v":1,"results":[{"topic":"persistent://t/ns/b","subscription":"app","outcome":"not-here"},` + first + `"outcome":"moved","markDelete":[10,7]}]}`,
		"unknown outcome":        `{"v":1,"results":[` + first + `"outcome":"skipped","markDelete":[10,7]}` + second,
		"moved short of target":  `{"v":1,"results":[` + first + `"outcome":"moved","markDelete":[10,4]}` + second,
		"moved without position": `{"v":1,"results":[` + first + `"outcome":"moved"}` + second,
		"pending at target":      `{"v":1,"results":[` + first + `"outcome":"pending","markDelete":[10,5]}` + second,
		"not-here with position": `{"v":1,"results":[{"topic":"persistent://t/ns/a-partition-0","subscription":"my app","outcome":"moved","markDelete":[10,5]},{"topic":"persistent://t/ns/b","subscription":"app","outcome":"not-here","markDelete":[3,1]}]}`,
		"bad position":           `{"v":1,"results":[` + first + `"outcome":"moved","markDelete":[-1,7]}` + second,
		"beyond-end at target":   `{"v":1,"results":[` + first + `"outcome":"beyond-end","markDelete":[10,5]}` + second,
		"null results":           `{"v":1,"results":null}`,
		"not-forward before":     `{"v":1,"results":[` + first + `"outcome":"not-forward","markDelete":[9,100]}` + second,
	} {
		if _, err := DecodeAcknowledged([]byte(body), twoAcks); err == nil {
			t.Errorf("%s: accepted %s", name, body)
		}
	}
}

func TestAcknowledge(t *testing.T) {
	var got string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != AckPath {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(status)
		io.WriteString(w, `{"v":1,"results":[{"topic":"persistent://t/ns/a-partition-0","subscription":"my app","outcome":"moved","markDelete":[10,5]},{"topic":"persistent://t/ns/b","subscription":"app","outcome":"no-subscription"}]}`)
	}))
	defer srv.Close()
	c := New(srv.Client())
	res, err := c.Acknowledge(context.Background(), srv.URL, twoAcks)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != Moved || res[1].Outcome != NoSubscription || !strings.Contains(got, "my+app 10 5") {
		t.Fatalf("results %+v, body %q", res, got)
	}
	status = http.StatusForbidden
	if _, err := c.Acknowledge(context.Background(), srv.URL, twoAcks); !errors.Is(err, ErrRefused) {
		t.Fatalf("403: %v, want ErrRefused", err)
	}
	srv404 := httptest.NewServer(http.NotFoundHandler())
	defer srv404.Close()
	if _, err := c.Acknowledge(context.Background(), srv404.URL, twoAcks); !errors.Is(err, ErrNoServlet) {
		t.Fatalf("404: %v, want ErrNoServlet", err)
	}
}

// FuzzDecodeAcknowledged: whatever DecodeAcknowledged accepts has one
// result per move, each with a known outcome and a mark-delete position
// that agrees with it.
func FuzzDecodeAcknowledged(f *testing.F) {
	f.Add(`{"v":1,"results":[{"topic":"persistent://t/ns/a-partition-0","subscription":"my app","outcome":"moved","markDelete":[10,7]},{"topic":"persistent://t/ns/b","subscription":"app","outcome":"not-here"}]}`)
	f.Add(`{"v":1,"results":[{"topic":"persistent://t/ns/a-partition-0","subscription":"my app","outcome":"pending","markDelete":[10,2]},{"topic":"persistent://t/ns/b","subscription":"app","outcome":"beyond-end","markDelete":[2,9]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		res, err := DecodeAcknowledged([]byte(body), twoAcks)
		if err != nil {
			return
		}
		if len(res) != len(twoAcks) {
			t.Fatalf("%d results for %d moves", len(res), len(twoAcks))
		}
		for i, r := range res {
			if !outcomes[r.Outcome] {
				t.Fatalf("outcome %q", r.Outcome)
			}
			forward := r.HasMarkDelete && r.MarkDelete.Compare(twoAcks[i].At) >= 0
			if (r.Outcome == Moved || r.Outcome == NotForward) && !forward {
				t.Fatalf("%s with %v", r.Outcome, r.MarkDelete)
			}
			if r.HasMarkDelete && (r.MarkDelete.Ledger < 0 || r.MarkDelete.Entry < -1 || r.MarkDelete.Batch != -1) {
				t.Fatalf("position %v", r.MarkDelete)
			}
		}
	})
}

func TestDecodeBacklogs(t *testing.T) {
	q := Query{Namespaces: []string{"t/ns"}, Subscriptions: []string{"app", "cur"}}
	good := `{"v":1,"backlogs":[{"topic":"persistent://t/ns/a-partition-0","subscription":"app","entries":12},{"topic":"persistent://t/ns/a-partition-0","subscription":"cur","entries":0}]}`
	got, err := DecodeBacklogs([]byte(good), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[Key{Topic: "persistent://t/ns/a-partition-0", Subscription: "app"}] != 12 {
		t.Fatalf("backlogs %v", got)
	}
	for name, body := range map[string]string{
		"version":         strings.Replace(good, `"v":1`, `"v":2`, 1),
		"unknown field":   strings.Replace(good, `"entries":12`, `"entries":12,"x":1`, 1),
		"negative":        strings.Replace(good, `"entries":12`, `"entries":-1`, 1),
		"not asked sub":   strings.Replace(good, `"app"`, `"other"`, 1),
		"other namespace": strings.Replace(good, `t/ns/a-partition-0","subscription":"app"`, `t/other/a","subscription":"app"`, 1),
		"not persistent":  strings.Replace(good, `persistent://t/ns/a-partition-0","subscription":"app"`, `non-persistent://t/ns/a","subscription":"app"`, 1),
		"twice":           strings.Replace(good, `"cur"`, `"app"`, 1),
		"missing entries": strings.Replace(good, `,"entries":12`, ``, 1),
		"null":            `{"v":1,"backlogs":null}`,
		"trailing":        good + " 1",
	} {
		if _, err := DecodeBacklogs([]byte(body), q); err == nil {
			t.Errorf("%s: accepted %s", name, body)
		}
	}
}

// FuzzDecodeBacklogs: what DecodeBacklogs accepts names only asked
// namespaces and subscriptions, with backlogs not below zero.
func FuzzDecodeBacklogs(f *testing.F) {
	f.Add(`{"v":1,"backlogs":[{"topic":"persistent://t/ns/a-partition-0","subscription":"app","entries":12}]}`)
	f.Add(`{"v":1,"backlogs":[]}`)
	f.Fuzz(func(t *testing.T, body string) {
		q := Query{Namespaces: []string{"t/ns"}, Subscriptions: []string{"app"}}
		got, err := DecodeBacklogs([]byte(body), q)
		if err != nil {
			return
		}
		for k, n := range got {
			rest, ok := strings.CutPrefix(k.Topic, "persistent://t/ns/")
			if !ok || rest == "" || strings.Contains(rest, "/") || k.Subscription != "app" || n < 0 {
				t.Fatalf("accepted %v = %d", k, n)
			}
		}
	})
}
