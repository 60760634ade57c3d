package cluster

import (
	"net/http"
	"testing"
)

// TestAdminKind: every admin path geo-sidecar calls maps to its kind, and
// anything else to a fixed label, so admin_requests_total stays bounded.
func TestAdminKind(t *testing.T) {
	for _, tt := range []struct {
		method, path, want string
	}{
		{http.MethodGet, "/admin/v2/persistent/t/ns", "list-topics"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/partitioned", "list-topics"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders/partitions", "topic-metadata"},
		{http.MethodPut, "/admin/v2/persistent/t/ns/orders/partitions", "create-topic"},
		{http.MethodPost, "/admin/v2/persistent/t/ns/orders/partitions", "grow-topic"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders/partitioned-stats", "partitioned-stats"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders-partition-3/stats", "stats"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders-partition-3/internalStats", "internal-stats"},
		{http.MethodPost, "/admin/v2/persistent/t/ns/orders/subscription/app/resetcursor", "reset-cursor"},
		{http.MethodPost, "/admin/v2/persistent/t/ns/orders/subscription/app/resetcursor/123", "reset-cursor"},
		{http.MethodPut, "/admin/v2/persistent/t/ns/orders/subscription/app", "create-subscription"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders/subscriptions", "list-subscriptions"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders/lastMessageId", "last-message-id"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders/ledger/1/entry/2", "read-message"},
		{http.MethodGet, "/admin/v2/non-persistent/t/ns/orders/stats", "stats"},
		{http.MethodGet, "/admin/v2/namespaces/t/ns/retention", "namespace"},
		{http.MethodGet, "/admin/v2/persistent/t/ns/orders/whatever/else", "other"},
		{http.MethodGet, "/admin/v2/brokers/health", "other"},
		{http.MethodGet, "/admin/v2/brokers", "brokers"},
		{http.MethodGet, "/geo-sidecar/positions", "positions"},
		{http.MethodPost, "/geo-sidecar/acknowledge", "positions-acknowledge"},
		{http.MethodGet, "/geo-sidecar/backlogs", "positions-backlogs"},
		{http.MethodGet, "/", "other"},
	} {
		if got := AdminKind(tt.method, tt.path); got != tt.want {
			t.Errorf("AdminKind(%s %s) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}
