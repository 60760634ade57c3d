package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
)

// TestPositionsServlet: north's broker runs geo-sidecar's positions servlet
// (deploy/positions, loaded by cluster.sh). One request per broker answers
// every tracked subscription's mark-delete and acknowledged ranges; later
// requests answer only what changed. Each way a cursor moves shows up with
// exactly the position the admin API's internal stats read: a plain
// acknowledgement (with ranges), a rewind (reset-cursor), a skip, an
// expiry by the namespace's message TTL (north checks TTLs every minute),
// and a deleted subscription shows up as gone. The subscriptions that did
// not move are not in the answers.
//
// North only: the test bed starts the servlet there (and the e2e lanes
// start north in one lane, .ci/e2e.sh).
func TestPositionsServlet(t *testing.T) {
	if err := Up("north"); err != nil {
		t.Fatal(err)
	}
	ns := NewNamespace(t, "north")
	admin := Admin(t, "north")
	c := Client(t, "north")
	a, b := Topic(ns, "a"), Topic(ns, "b")
	CreatePartitioned(t, b, 2, "north")
	var consumers []pulsar.Consumer
	for _, topic := range []string{a, b} {
		// AckWithResponse: an Ack returns once the broker took it.
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "app", Type: pulsar.Shared, AckWithResponse: true})
		if err != nil {
			t.Fatalf("subscribe %s: %v", topic, err)
		}
		consumers = append(consumers, cons)
	}
	unbatched := func(topic string, n int) {
		msgs := make([]*pulsar.ProducerMessage, n)
		for i := range msgs {
			msgs[i] = &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i))}
		}
		ProduceWith(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true}, msgs...)
	}
	unbatched(a, 20)
	unbatched(b, 20)

	pc, v := positions.New(http.DefaultClient), positions.NewView([]string{ns}, []string{"app"})
	parts := []string{a, b + "-partition-0", b + "-partition-1"}
	// latest is what the view's polls said last, by topic; moved, which
	// topics any poll since the last reset reported.
	latest := map[string]positions.State{}
	moved := map[string]bool{}
	poll := func() error {
		a, err := pc.Get(context.Background(), Get("north").AdminURL, v.Query())
		if err != nil {
			if strings.Contains(err.Error(), "404") {
				t.Fatalf("north has no positions servlet (restart it with this cluster.sh: cluster.sh down north; cluster.sh up north): %v", err)
			}
			return err
		}
		for _, s := range v.Apply(a) {
			if s.Subscription != "app" {
				t.Fatalf("a state of subscription %q", s.Subscription)
			}
			latest[s.Topic] = s
			moved[s.Topic] = true
		}
		return nil
	}
	// internal reads what the admin API says of topic's "app".
	internal := func(topic string) (md string, ranges string) {
		t.Helper()
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			t.Fatal(err)
		}
		st, err := admin.Topics().GetInternalStats(*tn)
		if err != nil {
			t.Fatalf("internal stats of %s: %v", topic, err)
		}
		cur, ok := st.Cursors["app"]
		if !ok {
			return "", ""
		}
		return cur.MarkDeletePosition, cur.IndividuallyDeletedMessages
	}
	// format writes a state as the admin API does.
	format := func(s positions.State) (string, string) {
		var r []string
		for _, x := range s.Acked {
			r = append(r, fmt.Sprintf("(%d:%d..%d:%d]", x.From.Ledger, x.From.Entry, x.To.Ledger, x.To.Entry))
		}
		return fmt.Sprintf("%d:%d", s.MarkDelete.Ledger, s.MarkDelete.Entry), "[" + strings.Join(r, ",") + "]"
	}
	// agree waits until the view's state of every topic is what internal
	// stats read now, and checks that only the topics in want moved.
	agree := func(step string, want ...string) {
		t.Helper()
		Eventually(t, 30*time.Second, func() error {
			if err := poll(); err != nil {
				return err
			}
			for _, topic := range parts {
				md, ranges := internal(topic)
				s, ok := latest[topic]
				if !ok {
					return fmt.Errorf("%s: no state of %s yet", step, topic)
				}
				if gmd, granges := format(s); gmd != md || granges != ranges {
					return fmt.Errorf("%s: %s: servlet %s %s, internal stats %s %s", step, topic, gmd, granges, md, ranges)
				}
			}
			return nil
		})
		for _, topic := range parts {
			if moved[topic] != slices.Contains(want, topic) {
				t.Errorf("%s: %s reported moved: %t, want %t", step, topic, moved[topic], slices.Contains(want, topic))
			}
		}
		clear(moved)
		t.Logf("%s: %s at %v", step, a, latest[a].MarkDelete)
	}

	agree("first answer", parts...)
	first := latest[a].MarkDelete
	if err := poll(); err != nil {
		t.Fatal(err)
	}
	if len(moved) != 0 {
		t.Fatalf("nothing moved, yet the answer held %v", moved)
	}

	// A plain acknowledgement: the first five, then the seventh and ninth
	// (two acknowledged ranges after the mark-delete).
	var got []pulsar.Message
	for len(got) < 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := consumers[0].Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, m)
	}
	for _, i := range []int{0, 1, 2, 3, 4, 6, 8} {
		if err := consumers[0].Ack(got[i]); err != nil {
			t.Fatal(err)
		}
	}
	agree("acknowledged", a)
	acked := latest[a]
	if acked.MarkDelete.Compare(first) <= 0 || len(acked.Acked) != 2 {
		t.Fatalf("after the acknowledgements: %+v, want past %v with two ranges", acked, first)
	}
	for _, cons := range consumers {
		cons.Close()
	}

	tn, _ := utils.GetTopicName(a)
	// A rewind: reset-cursor to the start.
	if err := admin.Subscriptions().ResetCursorToTimestamp(*tn, "app", 0); err != nil {
		t.Fatalf("reset-cursor: %v", err)
	}
	agree("rewound", a)
	if s := latest[a]; s.MarkDelete.Compare(acked.MarkDelete) >= 0 || len(s.Acked) != 0 {
		t.Fatalf("after the rewind: %+v, want before %v, no ranges", s, acked.MarkDelete)
	}
	rewound := latest[a].MarkDelete

	// A skip of three messages.
	if err := admin.Subscriptions().SkipMessages(*tn, "app", 3); err != nil {
		t.Fatalf("skip: %v", err)
	}
	agree("skipped", a)
	if s := latest[a]; s.MarkDelete.Compare(rewound) <= 0 {
		t.Fatalf("after the skip: %v, want past %v", s.MarkDelete, rewound)
	}
	skipped := latest[a].MarkDelete

	// An expiry by the namespace's message TTL: every message is older than
	// a second; north checks TTLs every minute (cluster.sh).
	if err := admin.Namespaces().SetNamespaceMessageTTL(ns, 1); err != nil {
		t.Fatalf("set message TTL: %v", err)
	}
	Eventually(t, 3*time.Minute, func() error {
		if err := poll(); err != nil {
			return err
		}
		if !moved[a] || latest[a].MarkDelete.Compare(skipped) <= 0 {
			return fmt.Errorf("%s still at %v", a, latest[a].MarkDelete)
		}
		return nil
	})
	agree("expired", parts...)
	mdText, _ := internal(a)
	if md, ok := cluster.ParseEntry(mdText); !ok || latest[a].MarkDelete != md {
		t.Fatalf("after the expiry the servlet says %v, internal stats %q", latest[a].MarkDelete, mdText)
	}

	// A deleted subscription is gone.
	if err := admin.Subscriptions().Delete(*tn, "app"); err != nil {
		t.Fatalf("delete subscription: %v", err)
	}
	Eventually(t, 30*time.Second, func() error {
		if err := poll(); err != nil {
			return err
		}
		if !latest[a].Gone {
			return fmt.Errorf("%s not gone: %+v", a, latest[a])
		}
		return nil
	})
}

// bearer sets a token on every request (none when token is "").
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// TestPositionsServletAuthorization: on south (TLS, token authentication,
// authorization) the positions servlet answers only a caller who may read
// the stats of every topic it names: no token is refused (401), a role
// without permission on the namespace is refused (403) and learns nothing,
// a role granted consume on it and the super-user get the subscription.
func TestPositionsServletAuthorization(t *testing.T) {
	UpSouth(t)
	s := SouthAdmin(t)
	tenant := "t" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	ns := tenant + "/ns"
	if err := s.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{"south"}}); err != nil {
		t.Fatalf("create tenant %s on south: %v", tenant, err)
	}
	if err := s.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatalf("create namespace %s on south: %v", ns, err)
	}
	topic := Topic(ns, "a")
	cons, err := SouthClient(t, AdminToken(t)).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "app"})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	Grant(t, ns, "positions-reader", "consume")

	pool := x509.NewCertPool()
	ca, err := os.ReadFile(SouthFile("tls/ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("south's CA: %v", err)
	}
	tlsTransport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	q := positions.Query{Namespaces: []string{ns}, Subscriptions: []string{"app"}}
	ask := func(token string) (positions.Answer, error) {
		c := positions.New(&http.Client{Transport: bearer{token, tlsTransport}, Timeout: 30 * time.Second})
		return c.Get(context.Background(), South.AdminURL, q)
	}
	for _, tt := range []struct {
		who   string
		token string
	}{
		{"no token", ""},
		{"a role without permission", MintToken(t, "positions-stranger", time.Hour)},
	} {
		a, err := ask(tt.token)
		if !errors.Is(err, positions.ErrRefused) {
			t.Errorf("%s: answer %+v, error %v; want refused", tt.who, a, err)
		}
	}
	for _, tt := range []struct {
		who   string
		token string
	}{
		{"a role granted consume", MintToken(t, "positions-reader", time.Hour)},
		{"the super-user", AdminToken(t)},
	} {
		Eventually(t, 30*time.Second, func() error {
			a, err := ask(tt.token)
			if errors.Is(err, positions.ErrNoServlet) {
				t.Fatalf("south has no positions servlet (restart it with this cluster.sh: cluster.sh down south; cluster.sh up south): %v", err)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", tt.who, err)
			}
			if len(a.States) != 1 || a.States[0].Topic != topic || a.States[0].Gone {
				return fmt.Errorf("%s: answer %+v, want the state of %s", tt.who, a, topic)
			}
			return nil
		})
	}

	// Moves (POST /geo-sidecar/acknowledge) need reset-cursor on the
	// subscription: refused without a token, to a role without
	// permission, and to a role granted produce only; a role granted
	// consume, and the super-user, have their move applied (not-forward
	// here: the subscription is at its start, and the move asks for its
	// own position, which changes nothing).
	st, err := s.Topics().GetInternalStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	var md marker.Position
	if _, err := fmt.Sscanf(st.Cursors["app"].MarkDeletePosition, "%d:%d", &md.Ledger, &md.Entry); err != nil {
		t.Fatalf("app's mark-delete position %q: %v", st.Cursors["app"].MarkDeletePosition, err)
	}
	md.Batch = -1
	Grant(t, ns, "positions-producer", "produce")
	move := func(token string) ([]positions.AckResult, error) {
		c := positions.New(&http.Client{Transport: bearer{token, tlsTransport}, Timeout: 30 * time.Second})
		return c.Acknowledge(context.Background(), South.AdminURL, []positions.Ack{{Topic: topic, Subscription: "app", At: md}})
	}
	for _, tt := range []struct {
		who   string
		token string
	}{
		{"no token", ""},
		{"a role without permission", MintToken(t, "positions-stranger", time.Hour)},
		{"a role granted produce", MintToken(t, "positions-producer", time.Hour)},
	} {
		if res, err := move(tt.token); !errors.Is(err, positions.ErrRefused) {
			t.Errorf("move by %s: %+v, error %v; want refused", tt.who, res, err)
		}
	}
	for _, tt := range []struct {
		who   string
		token string
	}{
		{"a role granted consume", MintToken(t, "positions-reader", time.Hour)},
		{"the super-user", AdminToken(t)},
	} {
		Eventually(t, 30*time.Second, func() error {
			res, err := move(tt.token)
			if err != nil {
				return fmt.Errorf("move by %s: %w", tt.who, err)
			}
			if res[0].Outcome != positions.NotForward {
				t.Fatalf("move by %s: %+v, want not-forward", tt.who, res[0])
			}
			return nil
		})
	}
}
