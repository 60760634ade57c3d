package subsync

// A fuzz target for a parser of outside input: a topic's stats answer
// (the admin API), as the subscription states read it. It checks a
// property of the result, not only that nothing panics. It runs for a
// few seconds in `make test` and longer in `make fuzz`; .ci/fuzz.sh finds
// it by name.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// FuzzSubscriptionStates checks the states read from a stats answer
// (cluster.DecodeSubscriptionStats, then stateOf) against the answer read
// as plain JSON:
//   - a Key_Shared mode is known only for a Key_Shared subscription, and
//     AUTO_SPLIT (or STICKY) only where the answer holds exactly that
//     string under keySharedMode (as encoding/json matches names: any
//     case); nothing else, and no missing field, reads as AUTO_SPLIT;
//   - a value of keySharedMode of any kind never fails the reading of the
//     type and the consumers;
//   - the consumers counted are those not named under the follow prefix.
func FuzzSubscriptionStates(f *testing.F) {
	for _, s := range []string{
		`{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"AUTO_SPLIT","consumers":[{"consumerName":"c"}]}}}`,
		`{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"STICKY","allowOutOfOrderDelivery":true}}}`,
		`{"subscriptions":{"a":{"type":"Key_Shared"}}}`,
		`{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":0}}}`,
		`{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":null,"KEYSHAREDMODE":"AUTO_SPLIT"}}}`,
		`{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"AUTO_SPLIT","keySharedMode":"STICKY"}}}`,
		`{"subscriptions":{"a":{"type":"Shared","keySharedMode":"AUTO_SPLIT"}}}`,
		`{"subscriptions":{"a":{"type":"Failover","consumers":[{"consumerName":"geo.follow-1"},{"consumerName":"app"}]}}}`,
		`{"subscriptions":{"a":{"type":"Key_Shared","keySharedMode":"auto_split"},"b":{"type":"None"}}}`,
		`{"subscriptions":null}`, `{}`, `[]`, `null`, ``, `{"subscriptions":{"a":{"type":3}}}`,
	} {
		f.Add([]byte(s))
	}
	const prefix = "geo.follow-"
	p := pulsarSubAdmin{followPrefix: prefix}
	f.Fuzz(func(t *testing.T, body []byte) {
		subs, err := cluster.DecodeSubscriptionStats(body)
		if err != nil {
			return
		}
		var raw struct {
			Subscriptions map[string]map[string]json.RawMessage `json:"subscriptions"`
		}
		if err := json.Unmarshal(body, &raw); err != nil {
			// Decoded, but its subscriptions are not all objects:
			// only null ones can be (they decode as zero stats).
			return
		}
		for name, ss := range subs {
			st := p.stateOf(ss)
			fields := raw.Subscriptions[name]
			if !st.Exists {
				t.Fatalf("%s: a subscription in the answer reads as missing", name)
			}
			if st.Mode != subscription.ModeUnknown && st.Type != subscription.KeyShared {
				t.Fatalf("%s: mode %v on a %v subscription", name, st.Mode, st.Type)
			}
			want := map[subscription.KeySharedMode]string{subscription.AutoSplit: "AUTO_SPLIT", subscription.Sticky: "STICKY"}
			if w, ok := want[st.Mode]; ok && !holdsString(fields, "keySharedMode", w) {
				t.Fatalf("%s: read as %s, but the answer has no keySharedMode %q: %s", name, w, w, body)
			}
			if st.Type == subscription.KeyShared && st.Mode == subscription.ModeUnknown &&
				(ss.KeySharedMode == "AUTO_SPLIT" || ss.KeySharedMode == "STICKY") {
				t.Fatalf("%s: keySharedMode %q read as unknown", name, ss.KeySharedMode)
			}
			apps := 0
			for _, c := range ss.Consumers {
				if !strings.HasPrefix(c.ConsumerName, prefix) {
					apps++
				}
			}
			if st.Consumers != apps {
				t.Fatalf("%s: %d consumers counted, want %d", name, st.Consumers, apps)
			}
		}
	})
}

// holdsString reports whether fields has a field named name (in any case,
// as encoding/json matches names) whose value is the JSON string want.
func holdsString(fields map[string]json.RawMessage, name, want string) bool {
	for k, v := range fields {
		var s string
		if strings.EqualFold(k, name) && json.Unmarshal(v, &s) == nil && s == want {
			return true
		}
	}
	return false
}
