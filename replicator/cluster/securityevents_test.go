package cluster

import (
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// eventLog records what SecurityEvents are told, one line per event in
// the form of the security logger's ("message permission" or "message"),
// so that the two can be compared.
type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (r *eventLog) add(cluster, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, cluster+": "+line)
}

func (r *eventLog) events() SecurityEvents {
	return SecurityEvents{
		PermissionDenied:  func(c, p string) { r.add(c, EventPermissionDenied+" "+p) },
		PermissionGranted: func(c, p string) { r.add(c, EventPermissionGranted+" "+p) },
		TokenLoaded: func(c string, exp int64) {
			r.add(c, EventTokenLoaded+" "+time.Unix(exp, 0).UTC().Format(time.RFC3339))
		},
		TokenExpired: func(c string) { r.add(c, EventTokenExpired) },
		AuthRefused:  func(c string) { r.add(c, EventAuthRefused) },
		AuthAccepted: func(c string) { r.add(c, EventAuthAccepted) },
		TLSRefused:   func(c string) { r.add(c, EventTLSRefused) },
	}
}

// logged are the security logger's lines in eventLog's form.
func logged(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.FilterLoggerName("security").All() {
		f := e.ContextMap()
		line, _ := f["cluster"].(string)
		line += ": " + e.Message
		if p, ok := f["permission"].(string); ok {
			line += " " + p
		}
		if exp, ok := f["expires_at"].(int64); ok {
			line += " " + time.Unix(exp, 0).UTC().Format(time.RFC3339)
		}
		if e.Message == "auth token unreadable" {
			continue // not an event: no metric follows it
		}
		out = append(out, line)
	}
	return out
}

// TestSecurityEvents: every security event the watch logs is told to its
// SecurityEvents at the same moment, with the same cluster and permission
// (the metrics are kept from those), and nothing else is.
func TestSecurityEvents(t *testing.T) {
	refusedAdmin := func(w *authWatch, status int, body, method, path string) {
		req, _ := http.NewRequest(method, "http://south:8080"+path, nil)
		resp := &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body))}
		(&adminTransport{w: w}).observe(req, resp)
	}
	const topic = "persistent://t/ns/o-partition-0"
	tests := []struct {
		name string
		run  func(t *testing.T, w *authWatch, file string, now *time.Time)
		want []string
	}{
		{"a token loaded, expired, replaced", func(t *testing.T, w *authWatch, file string, now *time.Time) {
			writeTokenFile(t, file, testJWT(`{"sub":"geo","exp":1700000010}`))
			for range 3 {
				_, _ = w.Token()
			}
			*now = now.Add(time.Minute)
			for range 3 {
				_, _ = w.Token()
			}
			writeTokenFile(t, file, testJWT(`{"sub":"geo"}`))
			_, _ = w.Token()
		}, []string{
			"south: auth token loaded 2023-11-14T22:13:30Z",
			"south: auth token expired",
			"south: auth token loaded 1970-01-01T00:00:00Z",
		}},
		{"the cluster refuses an expired token", func(t *testing.T, w *authWatch, file string, now *time.Time) {
			writeTokenFile(t, file, testJWT(`{"sub":"geo","exp":1700000010}`))
			_, _ = w.Token()
			*now = now.Add(time.Minute)
			w.authRefused("401 from the admin API")
			_, _ = w.Token()
		}, []string{
			"south: auth token loaded 2023-11-14T22:13:30Z",
			"south: auth token expired",
		}},
		{"a producer and a cursor refused, the producer granted", func(t *testing.T, w *authWatch, _ string, _ *time.Time) {
			for range 3 {
				w.clientEvent("Failed to create producer", errors.New("AuthorizationError: not authorized"), topic)
				w.clientEvent("Failed to create consumer", errors.New("AuthorizationError: not authorized"), topic)
			}
			w.clientEvent("Created producer", nil, topic)
		}, []string{
			"south: permission denied produce",
			"south: permission denied consume",
			"south: permission granted produce",
		}},
		{"admin calls refused for two permissions, then granted", func(t *testing.T, w *authWatch, _ string, _ *time.Time) {
			for range 2 {
				refusedAdmin(w, http.StatusForbidden, `{"reason":"Unauthorized to validateNamespaceOperation for operation [CREATE_TOPIC]"}`,
					http.MethodPut, "/admin/v2/persistent/t/ns/o/partitions")
				refusedAdmin(w, http.StatusUnauthorized, `{"reason":"Unauthorized to validateTopicOperation for operation [GET_STATS]"}`,
					http.MethodGet, "/admin/v2/persistent/t/ns/o/stats")
			}
			refusedAdmin(w, http.StatusNoContent, "", http.MethodPut, "/admin/v2/persistent/t/ns/o/partitions")
			refusedAdmin(w, http.StatusOK, "{}", http.MethodGet, "/admin/v2/persistent/t/ns/o/stats")
		}, []string{
			"south: permission denied tenant-admin",
			"south: permission denied consume",
			"south: permission granted tenant-admin",
			"south: permission granted consume",
		}},
		{"credentials refused, then accepted", func(t *testing.T, w *authWatch, _ string, _ *time.Time) {
			for range 3 {
				refusedAdmin(w, http.StatusUnauthorized, "Authentication required", http.MethodGet, "/admin/v2/persistent/t/ns")
				w.clientEvent("Failed to establish connection with broker: Failed to authenticate", nil, "")
			}
			w.clientEvent("Created consumer", nil, topic)
			w.authAccepted()
		}, []string{
			"south: authentication refused",
			"south: authentication accepted",
		}},
		{"a certificate refused for two reasons in turn", func(t *testing.T, w *authWatch, _ string, _ *time.Time) {
			for range 3 {
				w.tlsRefused(x509.UnknownAuthorityError{})
			}
			w.tlsRefused(x509.HostnameError{Host: "south"})
			w.tlsRefused(errors.New("connection refused")) // not a certificate's
		}, []string{
			"south: TLS certificate refused",
			"south: TLS certificate refused",
		}},
		{"an unreadable token file is no event", func(t *testing.T, w *authWatch, _ string, _ *time.Time) {
			_, _ = w.Token()
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			var told eventLog
			file := filepath.Join(t.TempDir(), "token")
			w := newAuthWatch(config.Cluster{Name: "south", Auth: config.Auth{TokenFile: file}}, zap.New(core), told.events())
			now := time.Unix(1_700_000_000, 0)
			w.now = func() time.Time { return now }
			tt.run(t, w, file, &now)
			if !slices.Equal(told.lines, tt.want) {
				t.Errorf("events told:\n  %s\nwant:\n  %s", strings.Join(told.lines, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if got := logged(logs); !slices.Equal(got, told.lines) {
				t.Errorf("security log lines:\n  %s\nevents told:\n  %s", strings.Join(got, "\n  "), strings.Join(told.lines, "\n  "))
			}
		})
	}
}

// TestSecurityEventsNil: a watch with no events (the zero SecurityEvents,
// as verify and drill dial) logs them all the same.
func TestSecurityEventsNil(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	w := newAuthWatch(config.Cluster{Name: "south"}, zap.New(core), SecurityEvents{})
	w.deny(denial{permission: PermissionProduce, operation: "create producer", resource: "t"})
	w.grant("create producer", "t")
	w.authRefused("x")
	w.authAccepted()
	w.tlsRefused(x509.UnknownAuthorityError{})
	w.logExpired()
	if n := len(logged(logs)); n != 6 {
		t.Errorf("%d security lines, want 6", n)
	}
}
