package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// drillConfig is a validated config: east <-> west on shop/orders, with
// the given subscription lines in each entry.
func drillConfig(t *testing.T, subs string) *config.Config {
	t.Helper()
	y := "sidecar: {marker_key_file: \"" + keyFile(t) + "\"}\n" +
		"clusters:\n" +
		"  - {name: east, service_url: pulsar://east:6650, admin_url: http://east:8080}\n" +
		"  - {name: west, service_url: pulsar://west:6650, admin_url: http://west:8080}\n" +
		"  - {name: north, service_url: pulsar://north:6650, admin_url: http://north:8080}\n" +
		"replication:\n" +
		"  - {source: east, namespace: shop/orders, topics: [orders, geo-sidecar-drill], targets: [west]" + subs + "}\n" +
		"  - {source: west, namespace: shop/orders, topics: [orders, geo-sidecar-drill], targets: [east]}\n"
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// keyFile writes a marker key, which keeping subscriptions in step needs.
func keyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "marker.key")
	if err := os.WriteFile(p, []byte("drill-test-key-0123456789abcdef0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubName(t *testing.T) {
	a, b := subName(""), subName("")
	if !strings.HasPrefix(a, Prefix) || len(a) != len(Prefix)+8 || a == b {
		t.Errorf("default names %q, %q: want %s<8 random characters>, different each time", a, b, Prefix)
	}
	if got := subName("rehearsal"); got != "rehearsal" {
		t.Errorf("subName(rehearsal) = %q", got)
	}
}

func TestCheckKeptInStep(t *testing.T) {
	def := subName("")
	tests := []struct {
		name, subs, topic, sub, from, to string
		want                             []string // in the error; none: no error
	}{
		{"pattern", `, subscription_patterns: ["geo-sidecar-drill-.*"]`, "shop/orders/geo-sidecar-drill", def, "east", "west", nil},
		{"listed", `, subscriptions: [rehearsal]`, "shop/orders/orders", "rehearsal", "east", "west", nil},
		{"not kept, default name", `, subscriptions: [billing]`, "shop/orders/geo-sidecar-drill", def, "east", "west",
			[]string{"not kept in step from east to west", "replication[0]", `add subscription_patterns: ["geo-sidecar-drill-.*"] to replication[0]`, "restart the sidecars"}},
		{"not kept, named", ``, "shop/orders/orders", "rehearsal", "east", "west",
			[]string{`"rehearsal" is not kept in step`, `add subscriptions: ["rehearsal"]`, `subscription_patterns: ["geo-sidecar-drill-.*"]`}},
		{"kept only the other way", `, subscription_patterns: ["geo-sidecar-drill-.*"]`, "shop/orders/orders", def, "west", "east",
			[]string{"not kept in step from west to east", "replication[1]"}},
		{"topic not replicated", `, subscription_patterns: ["geo-sidecar-drill-.*"]`, "shop/orders/payments", def, "east", "west",
			[]string{"does not replicate shop/orders/payments from east to west"}},
		{"no such pair", `, subscription_patterns: ["geo-sidecar-drill-.*"]`, "shop/orders/orders", def, "east", "north",
			[]string{"does not replicate"}},
		{"own cursor", `, subscription_patterns: [".*"]`, "shop/orders/orders", "geo-sidecar.repl.west", "east", "west",
			[]string{"geo-sidecar's own cursors"}},
		{"pulsar cursor", `, subscription_patterns: [".*"]`, "shop/orders/orders", "pulsar.repl.west", "east", "west",
			[]string{"Pulsar's own cursors"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkKeptInStep(drillConfig(t, tt.subs), path.Dir(tt.topic), path.Base(tt.topic), tt.sub, tt.from, tt.to)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// fakeAdmin is one cluster's subscriptions. recreate, when set, is called
// on each successful deletion: a sidecar creating the subscription again.
type fakeAdmin struct {
	mu       sync.Mutex
	subs     map[string][]string // topic -> subscriptions; a missing topic: errTopicNotFound
	listErr  error
	deleteOK int // deletions that fail before they succeed: -1 all fail
	deletes  []string
	creates  []string
	recreate func(sub string) bool // reports whether it recreated sub
}

func (f *fakeAdmin) Subscriptions(_ context.Context, topic string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	subs, ok := f.subs[topic]
	if !ok {
		return nil, errTopicNotFound
	}
	return slices.Clone(subs), nil
}

func (f *fakeAdmin) CreateAtEnd(_ context.Context, topic, sub string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, sub)
	if _, ok := f.subs[topic]; !ok {
		return errTopicNotFound
	}
	if slices.Contains(f.subs[topic], sub) {
		return errSubscriptionExists
	}
	f.subs[topic] = append(f.subs[topic], sub)
	return nil
}

func (f *fakeAdmin) Delete(_ context.Context, topic, sub string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, sub)
	if f.deleteOK != 0 {
		if f.deleteOK > 0 {
			f.deleteOK--
		}
		return errors.New("412 Subscription has active connected consumers")
	}
	f.subs[topic] = slices.DeleteFunc(f.subs[topic], func(s string) bool { return s == sub })
	if f.recreate != nil && f.recreate(sub) {
		f.subs[topic] = append(f.subs[topic], sub)
	}
	return nil
}

const testTopic = "persistent://shop/orders/geo-sidecar-drill"

func TestPreflight(t *testing.T) {
	cfg := drillConfig(t, `, subscription_patterns: ["geo-sidecar-drill-.*"]`)
	const sub = "geo-sidecar-drill-0123abcd"
	listFails := errors.New("503 unavailable")
	tests := []struct {
		name        string
		west, east  []string // nil: the topic does not exist there
		listErr     error
		allowOthers bool
		want        string // in the error; "": none
		leftovers   []string
	}{
		{name: "fresh topic", want: ""},
		{name: "only geo-sidecar's cursors", west: []string{"geo-sidecar.repl.east"}, east: []string{"geo-sidecar.repl.west"}},
		{name: "exists on the source", east: []string{sub}, want: `subscription "geo-sidecar-drill-0123abcd" exists on east: the drill runs only on a subscription it creates itself`},
		{name: "exists on the target only", west: []string{sub}, want: "exists on west"},
		{name: "exists, others allowed", east: []string{sub, "billing"}, allowOthers: true, want: "exists on east"},
		{name: "others subscribe", east: []string{"geo-sidecar.repl.west", "billing"}, west: []string{"billing", "audit"},
			want: "has other subscriptions: billing (on west), audit (on west), billing (on east); they would receive the drill's messages"},
		{name: "others suggest a topic of its own", east: []string{"billing"}, want: "e.g. persistent://shop/orders/geo-sidecar-drill"},
		{name: "others allowed", east: []string{"billing"}, allowOthers: true},
		{name: "leftovers of earlier drills", east: []string{"geo-sidecar-drill-old", "pulsar.dedup"}, west: []string{"geo-sidecar-drill-old"},
			leftovers: []string{"geo-sidecar-drill-old (on west)", "geo-sidecar-drill-old (on east)"}},
		{name: "admin fails", listErr: listFails, want: "list the subscriptions of persistent://shop/orders/geo-sidecar-drill on west: 503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mk := func(subs []string) *fakeAdmin {
				f := &fakeAdmin{subs: map[string][]string{}, listErr: tt.listErr}
				if subs != nil {
					f.subs[testTopic] = subs
				}
				return f
			}
			clusters := []cluster{{"west", mk(tt.west)}, {"east", mk(tt.east)}}
			left, err := preflight(t.Context(), cfg, clusters, testTopic, sub, tt.allowOthers)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
			if strings.Contains(tt.want, "exists on") && !errors.Is(err, errSubscriptionExists) {
				t.Errorf("error %v is not errSubscriptionExists", err)
			}
			if !slices.Equal(left, tt.leftovers) {
				t.Errorf("leftovers %q, want %q", left, tt.leftovers)
			}
			for _, c := range clusters {
				f := c.admin.(*fakeAdmin)
				if len(f.creates)+len(f.deletes) > 0 {
					t.Errorf("preflight changed %s: created %q, deleted %q", c.name, f.creates, f.deletes)
				}
			}
		})
	}
}

func TestRemoveSub(t *testing.T) {
	const sub = "geo-sidecar-drill-0123abcd"
	tests := []struct {
		name       string
		setup      func(west, east *fakeAdmin)
		want       string // in the error; "": none
		westLeft   bool
		eastLeft   bool
		minDeletes int // on east
	}{
		{name: "deleted on both", setup: func(w, e *fakeAdmin) {}},
		{name: "never reached the target", setup: func(w, e *fakeAdmin) {
			w.subs[testTopic] = []string{"geo-sidecar.repl.east"}
		}},
		{name: "target topic missing", setup: func(w, e *fakeAdmin) { delete(w.subs, testTopic) }},
		{name: "a sidecar creates it again once", setup: func(w, e *fakeAdmin) {
			once := true
			e.recreate = func(string) bool { r := once; once = false; return r }
		}, minDeletes: 2},
		{name: "a consumer still attached for a while", setup: func(w, e *fakeAdmin) { e.deleteOK = 2 }, minDeletes: 3},
		{name: "cannot delete", setup: func(w, e *fakeAdmin) { e.deleteOK = -1 }, eastLeft: true,
			want: "subscription geo-sidecar-drill-0123abcd may be left on east, where it holds back the topic's retention: " +
				"delete it with pulsar-admin topics unsubscribe persistent://shop/orders/geo-sidecar-drill --subscription geo-sidecar-drill-0123abcd"},
		{name: "recreated for ever", setup: func(w, e *fakeAdmin) {
			w.recreate = func(string) bool { return true }
			e.recreate = func(string) bool { return true }
		}, westLeft: true, eastLeft: true, want: "may be left on west and east"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				west := &fakeAdmin{subs: map[string][]string{testTopic: {"geo-sidecar.repl.east", sub}}}
				east := &fakeAdmin{subs: map[string][]string{testTopic: {"geo-sidecar.repl.west", "billing", sub}}}
				tt.setup(west, east)
				err := removeSub(t.Context(), []cluster{{"west", west}, {"east", east}}, testTopic, sub)
				switch {
				case tt.want == "" && err != nil:
					t.Fatalf("unexpected error: %v", err)
				case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
					t.Fatalf("error %v, want one with %q", err, tt.want)
				}
				for _, c := range []struct {
					f    *fakeAdmin
					left bool
				}{{west, tt.westLeft}, {east, tt.eastLeft}} {
					if got := slices.Contains(c.f.subs[testTopic], sub); got != c.left {
						t.Errorf("left: %v, want %v (%q)", got, c.left, c.f.subs[testTopic])
					}
					for _, d := range c.f.deletes {
						if d != sub {
							t.Errorf("deleted %q, not the drill's subscription", d)
						}
					}
				}
				if !slices.Contains(east.subs[testTopic], "billing") {
					t.Errorf("billing is gone: %q", east.subs[testTopic])
				}
				if len(east.deletes) < tt.minDeletes {
					t.Errorf("%d deletions on east, want at least %d", len(east.deletes), tt.minDeletes)
				}
				if n := len(east.deletes); n > cleanupRounds {
					t.Errorf("%d deletions on east, more than %d rounds", n, cleanupRounds)
				}
			})
		})
	}
}

// TestRemoveSubOrder: the failover target is deleted first, so the
// source's sidecar, which has seen it there, does not create it again.
func TestRemoveSubOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sub = "geo-sidecar-drill-0123abcd"
		var order []string
		var mu sync.Mutex
		mk := func(name string) *fakeAdmin {
			return &fakeAdmin{subs: map[string][]string{testTopic: {sub}}, recreate: func(string) bool {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return false
			}}
		}
		if err := removeSub(t.Context(), []cluster{{"west", mk("west")}, {"east", mk("east")}}, testTopic, sub); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(order, []string{"west", "east"}) {
			t.Errorf("deleted in the order %q, want west (the target), then east", order)
		}
	})
}

func TestAdminError(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{rest.Error{Code: 404, Reason: "Topic not found"}, errTopicNotFound},
		{rest.Error{Code: 409, Reason: "Subscription already exists for topic"}, errSubscriptionExists},
		{fmt.Errorf("create: %w", rest.Error{Code: 409}), errSubscriptionExists},
		{rest.Error{Code: 412, Reason: "Subscription has active connected consumers"}, nil},
		{errors.New("connection refused"), nil},
	}
	for _, tt := range tests {
		got := adminError(tt.err)
		if tt.want != nil && !errors.Is(got, tt.want) || tt.want == nil && (errors.Is(got, errTopicNotFound) || errors.Is(got, errSubscriptionExists)) {
			t.Errorf("adminError(%v) = %v, want %v", tt.err, got, tt.want)
		}
		if !errors.Is(got, tt.err) {
			t.Errorf("adminError(%v) = %v does not wrap it", tt.err, got)
		}
	}
	if adminError(nil) != nil {
		t.Error("adminError(nil) != nil")
	}
}
