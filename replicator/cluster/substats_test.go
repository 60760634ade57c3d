package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// statsAnswer is broker 4.0.7's stats of a topic with a Key_Shared
// AUTO_SPLIT subscription, a STICKY one and a Shared one (trimmed from a
// probe of the test bed: the fields that are read, and a few beside
// them).
const statsAnswer = `{"msgRateIn":0.0,"subscriptions":{
"auto":{"msgBacklog":0,"type":"Key_Shared","consumers":[{"consumerName":"qvknz","availablePermits":1000,
  "drainingHashes":[],"keyHashRangeArrays":[[1,65535]],"metadata":{}}],"allowOutOfOrderDelivery":false,"keySharedMode":"AUTO_SPLIT"},
"sticky":{"type":"Key_Shared","consumers":[{"consumerName":"cseom","keyHashRangeArrays":[[0,65535]]}],
  "allowOutOfOrderDelivery":true,"keySharedMode":"STICKY"},
"shared":{"type":"Shared","consumers":[],"allowOutOfOrderDelivery":false}},
"replication":{},"deduplicationStatus":"Disabled"}`

// TestAdminClientSubscriptionStats: Dial's admin client reads a topic's
// subscriptions in the request pulsaradmin's stats read makes (same path,
// same query), with the cluster's credentials, and keeps keySharedMode,
// which pulsaradmin's types drop; refusals are rest.Error.
func TestAdminClientSubscriptionStats(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	jwt := testJWT(`{"sub":"geo"}`)
	if err := os.WriteFile(tok, []byte(jwt), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		reqs []*http.Request
		code = http.StatusOK
		body = statsAnswer
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, r)
		c, b := code, body
		mu.Unlock()
		if got := r.Header.Get("Authorization"); got != "Bearer "+jwt {
			t.Errorf("Authorization %q, want the cluster's token", got)
		}
		w.WriteHeader(c)
		_, _ = w.Write([]byte(b))
	}))
	defer srv.Close()
	c, err := Dial(config.Cluster{Name: "east", ServiceURL: "pulsar://127.0.0.1:1", AdminURL: srv.URL + "/",
		Auth: config.Auth{TokenFile: tok}, KeepAlive: config.Duration{Duration: 30 * time.Second}}, zap.NewNop(), SecurityEvents{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, ok := c.Admin.(*AdminClient)
	if !ok {
		t.Fatalf("Dial's Admin is a %T, want *AdminClient", c.Admin)
	}
	const topic = "persistent://shop/orders/a b-partition-0"
	got, err := a.SubscriptionStats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]SubscriptionStats{
		"auto": {Type: "Key_Shared", KeySharedMode: "AUTO_SPLIT", Consumers: []ConsumerStats{{ConsumerName: "qvknz"}}},
		"sticky": {Type: "Key_Shared", KeySharedMode: "STICKY", AllowOutOfOrderDelivery: true,
			Consumers: []ConsumerStats{{ConsumerName: "cseom"}}},
		"shared": {Type: "Shared", Consumers: []ConsumerStats{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SubscriptionStats = %+v, want %+v", got, want)
	}

	// The same request as pulsaradmin's (one request, counted as a
	// stats read).
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.Topics().GetStatsWithOptionWithContext(context.Background(), *tn, utils.GetStatsOptions{ExcludePublishers: true}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	ours, theirs := reqs[0], reqs[1]
	mu.Unlock()
	if ours.Method != theirs.Method || ours.URL.EscapedPath() != theirs.URL.EscapedPath() || !reflect.DeepEqual(ours.URL.Query(), theirs.URL.Query()) {
		t.Errorf("request %s %s?%s, pulsaradmin's %s %s?%s", ours.Method, ours.URL.EscapedPath(), ours.URL.RawQuery,
			theirs.Method, theirs.URL.EscapedPath(), theirs.URL.RawQuery)
	}
	if k := AdminKind(ours.Method, ours.URL.Path); k != "stats" {
		t.Errorf("counted as %q, want stats", k)
	}

	for _, tt := range []struct {
		name     string
		code     int
		body     string
		wantCode int // 0: no rest.Error
	}{
		{"topic missing", 404, `{"reason":"Topic not found"}`, 404},
		{"refused", 403, `{"reason":"Don't have permission"}`, 403},
		{"not JSON", 200, `{"subscriptions":`, 0},
		{"a subscription's type not a string", 200, `{"subscriptions":{"a":{"type":3}}}`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			code, body = tt.code, tt.body
			mu.Unlock()
			_, err := a.SubscriptionStats(context.Background(), topic)
			var re rest.Error
			switch {
			case err == nil:
				t.Fatal("no error")
			case tt.wantCode == 0 && errors.As(err, &re):
				t.Errorf("a rest.Error %v for a bad answer", re)
			case tt.wantCode != 0 && (!errors.As(err, &re) || re.Code != tt.wantCode):
				t.Errorf("err %#v, want rest.Error code %d", err, tt.wantCode)
			}
		})
	}
}

// TestDecodeSubscriptionStats: keySharedMode is read as the string it
// is, and a value of another kind reads as "" without costing the rest
// of the reading; an answer without subscriptions is an empty map.
func TestDecodeSubscriptionStats(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		want map[string]SubscriptionStats
	}{
		{"AUTO_SPLIT", `{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"AUTO_SPLIT"}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared", KeySharedMode: "AUTO_SPLIT"}}},
		{"STICKY", `{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"STICKY"}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared", KeySharedMode: "STICKY"}}},
		{"missing", `{"subscriptions":{"a":{"type":"Key_Shared","consumers":[{"consumerName":"c"}]}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared", Consumers: []ConsumerStats{{ConsumerName: "c"}}}}},
		{"null", `{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":null}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared"}}},
		{"a number", `{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":0,"consumers":[{"consumerName":"c"}]}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared", Consumers: []ConsumerStats{{ConsumerName: "c"}}}}},
		{"an object", `{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":{"mode":"AUTO_SPLIT"},"allowOutOfOrderDelivery":true}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared", AllowOutOfOrderDelivery: true}}},
		{"another spelling kept as written", `{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"auto_split"}}}`,
			map[string]SubscriptionStats{"a": {Type: "Key_Shared", KeySharedMode: "auto_split"}}},
		{"no subscriptions", `{"msgRateIn":0}`, map[string]SubscriptionStats{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeSubscriptionStats([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeSubscriptionStats = %+v, want %+v", got, tt.want)
			}
		})
	}
}
