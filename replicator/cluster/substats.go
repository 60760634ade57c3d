package cluster

// A topic's subscriptions read from its stats with what pulsaradmin's
// types leave out: the Key_Shared mode.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// AdminClient is the admin client a Conn holds (Conn.Admin): pulsaradmin's,
// and the reads its types cannot make (SubscriptionStats), over the same
// transport (credentials, TLS, admin_requests_total). Safe for concurrent
// use.
type AdminClient struct {
	pulsaradmin.Client
	web  *http.Client
	base string // the admin service URL, without a trailing slash
}

// NewAdminClient is a, with SubscriptionStats made over web (whose
// transport sets the credentials) against the admin API at base.
func NewAdminClient(a pulsaradmin.Client, web *http.Client, base string) *AdminClient {
	return &AdminClient{Client: a, web: web, base: strings.TrimRight(base, "/")}
}

// SubscriptionStats is what subscription sync reads of one subscription
// in a topic's stats.
type SubscriptionStats struct {
	// Type is the subscription's type as the broker names it:
	// "Exclusive", "Failover", "Shared", "Key_Shared" ("None": nobody
	// attached since the topic was loaded).
	Type string `json:"type"`
	// KeySharedMode is a Key_Shared subscription's mode as the broker
	// names it: "AUTO_SPLIT" or "STICKY" (broker 4.0.7 writes it for
	// Key_Shared only, and keeps it while the dispatcher lives, consumers
	// attached or not). Anything else, a value that is not a JSON string
	// included, reads as "": the reading of the rest stands.
	KeySharedMode string `json:"-"`
	// AllowOutOfOrderDelivery: Key_Shared's allowOutOfOrderDelivery.
	AllowOutOfOrderDelivery bool `json:"allowOutOfOrderDelivery"`
	// Consumers are the consumers attached, by name.
	Consumers []ConsumerStats `json:"consumers"`
}

// ConsumerStats is what subscription sync reads of one consumer.
type ConsumerStats struct {
	ConsumerName string `json:"consumerName"`
}

// UnmarshalJSON reads a subscription's stats, its keySharedMode leniently
// (see SubscriptionStats.KeySharedMode): a field the broker added for
// display is outside input, and a value of the wrong kind must not cost
// the reading of the type and the consumers.
func (s *SubscriptionStats) UnmarshalJSON(b []byte) error {
	type plain SubscriptionStats // without this method
	var v struct {
		plain
		Mode json.RawMessage `json:"keySharedMode"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = SubscriptionStats(v.plain)
	var mode string
	if json.Unmarshal(v.Mode, &mode) == nil {
		s.KeySharedMode = mode
	}
	return nil
}

// maxStatsBody bounds what a topic's stats answer may hold (about 1 KB a
// consumer with publishers left out).
const maxStatsBody = 64 << 20

// SubscriptionStats reads the subscriptions of one topic (a partition or
// a non-partitioned topic) from its stats: the same request, with the
// same options, as pulsaradmin's Topics().GetStatsWithOption with
// ExcludePublishers (GET /admin/v2/{persistent}/{tenant}/{ns}/{topic}/stats),
// decoded into SubscriptionStats, which keeps keySharedMode. One request;
// refusals are rest.Error, as pulsaradmin's are.
func (a *AdminClient) SubscriptionStats(ctx context.Context, topic string) (map[string]SubscriptionStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	path := "/admin/v2/" + escapeNamespace(tn.GetRestPath()) + "/stats"
	q := url.Values{
		"getPreciseBacklog":        {"false"},
		"subscriptionBacklogSize":  {"false"},
		"getEarliestTimeInBacklog": {"false"},
		"excludePublishers":        {"true"},
		"excludeConsumers":         {"false"},
	}
	body, err := adminGet(ctx, a.web, a.base, path, q, maxStatsBody)
	if err != nil {
		return nil, err
	}
	subs, err := DecodeSubscriptionStats(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	return subs, nil
}

// DecodeSubscriptionStats decodes a topic's stats answer (a JSON object
// whose "subscriptions" maps names to SubscriptionStats) into its
// subscriptions; an answer without any is an empty map. Outside input:
// fuzzed (subsync's FuzzSubscriptionStates).
func DecodeSubscriptionStats(body []byte) (map[string]SubscriptionStats, error) {
	var st struct {
		Subscriptions map[string]SubscriptionStats `json:"subscriptions"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, err
	}
	if st.Subscriptions == nil {
		st.Subscriptions = map[string]SubscriptionStats{}
	}
	return st.Subscriptions, nil
}
