package verify

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestJSONUnproven: --json says what of the source lies past
// verified-through (null when nothing does), as the text report does.
func TestJSONUnproven(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    Unproven
		want string
	}{
		{"all proven", Unproven{}, `"unproven":null`},
		{"three entries past", Unproven{Entries: 3, Messages: 30, FirstPublishTime: 1_700_000_000_000, LastPublishTime: 1_700_000_002_500},
			`"unproven":{"entries":3,"messages":30,"first_publish_time":"2023-11-14T22:13:20Z","last_publish_time":"2023-11-14T22:13:22.5Z","seconds":2.5}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Report{Topic: "t", Partitions: []PartitionReport{{Partition: "p", Result: Result{Unproven: tc.u}}}}
			b, err := json.Marshal(JSON(r))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.want) {
				t.Errorf("got %s\nwant it to hold %s", b, tc.want)
			}
		})
	}
}
