package cluster

import (
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/config"
)

func testJWT(claims string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + enc.EncodeToString([]byte(claims)) + ".sig"
}

func TestJWTClaims(t *testing.T) {
	tests := []struct {
		name, tok, sub string
		exp            int64
	}{
		{"sub and exp", testJWT(`{"sub":"geo","exp":1700000000}`), "geo", 1700000000},
		{"no exp", testJWT(`{"sub":"geo"}`), "geo", 0},
		{"not a jwt", "opaque-token", "", 0},
		{"bad base64", "a.!!!.c", "", 0},
		{"bad json", testJWT(`{"sub":`), "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, exp := jwtClaims(tt.tok)
			var got int64
			if !exp.IsZero() {
				got = exp.Unix()
			}
			if sub != tt.sub || got != tt.exp {
				t.Fatalf("jwtClaims = %q, %d; want %q, %d", sub, got, tt.sub, tt.exp)
			}
		})
	}
}

func TestAdminOperation(t *testing.T) {
	tests := []struct {
		method, path     string
		op, resource     string
		permission, body string
	}{
		{"GET", "/admin/v2/persistent/t/ns", "list topics", "t/ns", "consume", ""},
		{"GET", "/admin/v2/persistent/t/ns/partitioned", "list topics", "t/ns", "consume", ""},
		{"PUT", "/admin/v2/persistent/t/ns/orders/partitions", "create topic", "persistent://t/ns/orders", "tenant-admin", ""},
		{"POST", "/admin/v2/persistent/t/ns/orders/partitions", "grow topic partitions", "persistent://t/ns/orders", "tenant-admin", ""},
		{"GET", "/admin/v2/persistent/t/ns/orders/partitions", "read topic metadata", "persistent://t/ns/orders", "consume", ""},
		{"GET", "/admin/v2/persistent/t/ns/orders-partition-0/lastMessageId", "read last message id", "persistent://t/ns/orders-partition-0", "consume", ""},
		{"GET", "/admin/v2/persistent/t/ns/o/ledger/1/entry/2", "read message by id", "persistent://t/ns/o", "consume", ""},
		{"PUT", "/admin/v2/persistent/t/ns/o/subscription/billing", "create subscription", "persistent://t/ns/o", "consume", ""},
		{"POST", "/admin/v2/persistent/t/ns/o/subscription/billing/resetcursor", "move subscription", "persistent://t/ns/o", "consume", ""},
		{"GET", "/admin/v2/persistent/t/ns/o/internalStats", "read topic stats", "persistent://t/ns/o", "consume", ""},
		{"GET", "/admin/v2/persistent/t/ns/o/stats", "read topic stats", "persistent://t/ns/o", "produce", `{"reason":"... operation [PRODUCE] ..."}`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			op, res := adminOperation(tt.method, tt.path)
			if op != tt.op || res != tt.resource {
				t.Errorf("adminOperation = %q, %q; want %q, %q", op, res, tt.op, tt.resource)
			}
			if p := adminPermission(tt.method, tt.path, []byte(tt.body)); p != tt.permission {
				t.Errorf("adminPermission = %q, want %q", p, tt.permission)
			}
		})
	}
}

func TestTLSReason(t *testing.T) {
	cert := &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	tests := []struct {
		name  string
		err   error
		trust string
		want  string
	}{
		{"host", fmt.Errorf("dial: %w", x509.HostnameError{Certificate: cert, Host: "localhost"}), "/ca.pem",
			`host name mismatch: the server's certificate is not valid for "localhost" (it names 127.0.0.1)`},
		{"unknown CA", fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), "/ca.pem",
			`unknown CA: the server's certificate is not signed by a CA in auth.tls_trust_certs_file "/ca.pem"`},
		{"unknown CA, system roots", x509.UnknownAuthorityError{}, "", "set auth.tls_trust_certs_file"},
		{"flattened", errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), "/ca.pem", "unknown CA"},
		{"other", errors.New("connection refused"), "/ca.pem", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tlsReason(tt.err, tt.trust)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Fatalf("tlsReason = %q, want …%q…", got, tt.want)
			}
		})
	}
}

// watched is an authWatch over a token file, logging to an observer.
func watchedToken(t *testing.T) (*authWatch, string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	file := filepath.Join(t.TempDir(), "token")
	w := newAuthWatch(config.Cluster{Name: "south", Auth: config.Auth{TokenFile: file}}, zap.New(core), SecurityEvents{})
	return w, file, logs
}

func writeTokenFile(t *testing.T, file, tok string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func countMsg(logs *observer.ObservedLogs, msg string) int { return logs.FilterMessage(msg).Len() }

// TestAuthWatchToken: each token is announced once, an expired one is
// reported once however often it is read, and a replacement is read at the
// next call.
func TestAuthWatchToken(t *testing.T) {
	w, file, logs := watchedToken(t)
	now := time.Unix(1_700_000_000, 0)
	w.now = func() time.Time { return now }
	old := testJWT(`{"sub":"geo","exp":1700000010}`)
	writeTokenFile(t, file, old)
	for range 3 {
		if tok, err := w.Token(); err != nil || tok != old {
			t.Fatalf("Token() = %q, %v", tok, err)
		}
	}
	now = now.Add(20 * time.Second)
	w.authRefused("401 from the admin API") // before any read notices the expiry
	for range 5 {
		_, _ = w.Token()
	}
	if n := countMsg(logs, EventAuthRefused); n != 0 {
		t.Errorf("%d %q lines for an expired token, want the expiry's line only", n, EventAuthRefused)
	}
	fresh := testJWT(`{"sub":"geo","exp":1700003600}`)
	writeTokenFile(t, file, fresh)
	if tok, _ := w.Token(); tok != fresh {
		t.Fatalf("Token() after the file changed = %q, want the new token", tok)
	}
	if n := countMsg(logs, EventTokenLoaded); n != 2 {
		t.Errorf("%d %q lines, want 2", n, EventTokenLoaded)
	}
	if n := countMsg(logs, EventTokenExpired); n != 1 {
		t.Errorf("%d %q lines, want 1", n, EventTokenExpired)
	}
	os.Remove(file)
	for range 3 {
		if _, err := w.Token(); err == nil {
			t.Fatal("Token() without a file: no error")
		}
	}
	if n := countMsg(logs, "auth token unreadable"); n != 1 {
		t.Errorf("%d unreadable lines, want 1", n)
	}
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, "sig") && strings.Contains(f.String, ".") && strings.Count(f.String, ".") == 2 {
				t.Errorf("a token was logged: %s=%s", f.Key, f.String)
			}
		}
	}
}

// TestAdminTransport: the current token goes with every request; a missing
// permission and refused credentials are each reported once and ended by
// the next success.
func TestAdminTransport(t *testing.T) {
	w, file, logs := watchedToken(t)
	var status int
	var body, gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		rw.WriteHeader(status)
		_, _ = rw.Write([]byte(body))
	}))
	defer srv.Close()
	client := &http.Client{Transport: &adminTransport{base: http.DefaultTransport, w: w}}
	get := func(method, path string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	writeTokenFile(t, file, "tok-1")
	status, body = 200, "[]"
	get("GET", "/admin/v2/persistent/t/ns")
	if gotAuth != "Bearer tok-1" {
		t.Fatalf("Authorization = %q", gotAuth)
	}
	writeTokenFile(t, file, "tok-2")
	status, body = 403, `{"reason":"Unauthorized to validateNamespaceOperation for operation [CREATE_TOPIC]"}`
	for range 3 {
		get("PUT", "/admin/v2/persistent/t/ns/orders/partitions")
	}
	if gotAuth != "Bearer tok-2" {
		t.Fatalf("Authorization after the file changed = %q", gotAuth)
	}
	status, body = 401, "<html>Authentication required</html>"
	for range 3 {
		get("GET", "/admin/v2/persistent/t/ns")
	}
	status, body = 204, ""
	get("PUT", "/admin/v2/persistent/t/ns/orders/partitions")

	denied := logs.FilterMessage(EventPermissionDenied).All()
	if len(denied) != 1 || denied[0].ContextMap()["permission"] != PermissionTenantAdmin {
		t.Errorf("permission denied lines: %v", denied)
	}
	for msg, want := range map[string]int{EventPermissionGranted: 1, EventAuthRefused: 1, EventAuthAccepted: 1} {
		if n := countMsg(logs, msg); n != want {
			t.Errorf("%d %q lines, want %d", n, msg, want)
		}
	}
}

// TestZapLoggerDropsMessageContents: what pulsar-client-go logs with a
// failed send (the message's properties) never reaches the log.
func TestZapLoggerDropsMessageContents(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	var l pulsarlog.Logger = zapLogger{s: zap.New(core).Sugar()}
	l = l.SubLogger(pulsarlog.Fields{"topic": "persistent://t/ns/o", "producer_name": "p"})
	l.WithError(errors.New("send timeout")).
		WithField("size", 10).
		WithField("properties", map[string]string{"email": "alice@example.com"}).
		WithFields(pulsarlog.Fields{"payload": []byte("secret"), "key": "customer-42"}).
		Error("unable to add message to batch")
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d entries, want 1", len(all))
	}
	ctx := all[0].ContextMap()
	for _, k := range []string{"properties", "payload", "key"} {
		if _, ok := ctx[k]; ok {
			t.Errorf("field %q was logged: %v", k, ctx[k])
		}
	}
	for _, k := range []string{"topic", "producer_name", "size", "error"} {
		if _, ok := ctx[k]; !ok {
			t.Errorf("field %q was dropped", k)
		}
	}
}

// TestClientEvents: the client's refusals become one event each; its own
// repeated line goes to Debug.
func TestClientEvents(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	w := newAuthWatch(config.Cluster{Name: "south"}, zap.New(core), SecurityEvents{})
	var l pulsarlog.Logger = zapLogger{s: zap.New(core).Sugar(), w: w}
	l = l.SubLogger(pulsarlog.Fields{"topic": "persistent://t/ns/o-partition-0"})
	for range 3 {
		l.WithError(errors.New("server error: AuthorizationError: not authorized")).Error("Failed to create producer at newPartitionProducer")
		l.Warnf("Failed to establish connection with broker: '%s'", "Failed to authenticate")
	}
	l.Info("Created producer")
	denied := logs.FilterMessage(EventPermissionDenied).All()
	if len(denied) != 1 || denied[0].ContextMap()["permission"] != PermissionProduce ||
		denied[0].ContextMap()["resource"] != "persistent://t/ns/o-partition-0" {
		t.Errorf("permission denied lines: %v", denied)
	}
	for msg, want := range map[string]int{EventPermissionGranted: 1, EventAuthRefused: 1, EventAuthAccepted: 1} {
		if n := countMsg(logs, msg); n != want {
			t.Errorf("%d %q lines, want %d", n, msg, want)
		}
	}
	for _, e := range logs.FilterLoggerName("").All() {
		if e.Level > zapcore.DebugLevel && !strings.HasPrefix(e.Message, "Created") {
			t.Errorf("the client's line %q was logged at %s, want Debug once reported", e.Message, e.Level)
		}
	}
}

// TestNoteOpen: the entry pipe's open results become the same events as
// pulsar-client-go's.
func TestNoteOpen(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	c := &Clients{Name: "south", watch: newAuthWatch(config.Cluster{Name: "south"}, zap.New(core), SecurityEvents{})}
	refused := errors.New("wire: create producer on persistent://t/ns/o-partition-0: broker error AuthorizationError: Client is not authorized to Produce")
	for range 3 {
		c.NoteOpen("producer", "persistent://t/ns/o-partition-0", refused)
	}
	c.NoteOpen("consumer", "persistent://t/ns/o-partition-0", errors.New("broker error AuthorizationError: not authorized to consume"))
	c.NoteOpen("producer", "persistent://t/ns/o-partition-0", nil)
	var perms []string
	for _, e := range logs.FilterMessage(EventPermissionDenied).All() {
		perms = append(perms, e.ContextMap()["permission"].(string))
	}
	if strings.Join(perms, ",") != "produce,consume" {
		t.Errorf("permissions denied: %v, want produce then consume", perms)
	}
	if n := countMsg(logs, EventPermissionGranted); n != 1 {
		t.Errorf("%d granted lines, want 1 (the producer)", n)
	}
	var nilConn *Clients
	nilConn.NoteOpen("producer", "t", refused) // no watch: no panic
}

// FuzzJWTClaims: a token file holds whatever an agent wrote; reading its
// claims must never panic.
func FuzzJWTClaims(f *testing.F) {
	f.Add(testJWT(`{"sub":"geo","exp":1700000000}`))
	f.Add("a.b.c")
	f.Add("..")
	f.Add(testJWT(`{"exp":1e300}`))
	f.Fuzz(func(t *testing.T, tok string) {
		_, _ = jwtClaims(tok)
	})
}

// FuzzAdminOperation: any request path classifies without panicking.
func FuzzAdminOperation(f *testing.F) {
	f.Add("PUT", "/admin/v2/persistent/t/ns/o/partitions")
	f.Add("GET", "/admin/v2/persistent/")
	f.Add("GET", "/admin/v2/non-persistent/t")
	f.Fuzz(func(t *testing.T, method, path string) {
		_, _ = adminOperation(method, path)
		_ = adminPermission(method, path, []byte(path))
		_ = namespaceOf(path)
	})
}
