package cluster

import (
	"net/http"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// TestAdminTransportOnAHalfOpenLink: admin connections idle for the
// cluster's keep_alive are not reused (a half-open link may have dropped
// them without a word), and an answer that does not start within twice
// keep_alive, at least 30 s, fails the call instead of waiting for
// pulsaradmin's five minutes.
func TestAdminTransportOnAHalfOpenLink(t *testing.T) {
	tests := []struct {
		keepAlive         time.Duration
		idle, headerLimit time.Duration
	}{
		{30 * time.Second, 30 * time.Second, time.Minute},
		{5 * time.Second, 5 * time.Second, 30 * time.Second},
		{2 * time.Minute, 2 * time.Minute, 4 * time.Minute},
		// Built in code without a keep-alive: Go's defaults.
		{0, 90 * time.Second, 0},
	}
	for _, tt := range tests {
		rt, err := newAdminBase(config.Auth{}, tt.keepAlive)
		if err != nil {
			t.Fatal(err)
		}
		tr := rt.(*http.Transport)
		if tr.IdleConnTimeout != tt.idle || tr.ResponseHeaderTimeout != tt.headerLimit {
			t.Errorf("keep_alive %s: idle timeout %s, response header timeout %s; want %s, %s",
				tt.keepAlive, tr.IdleConnTimeout, tr.ResponseHeaderTimeout, tt.idle, tt.headerLimit)
		}
	}
}
