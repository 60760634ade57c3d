package cluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
)

// Security events. Each is logged once when a condition starts and once
// when it ends, whatever the retry rate of the code that runs into it, by
// the logger named "security" with a "cluster" field, and told at the
// same moment to the SecurityEvents given to Dial (the metrics of
// cmd/geo-sidecar are kept from those, not from the log lines).
const (
	// EventPermissionDenied: fields permission (one of the Permission*
	// values), operation, resource, role.
	EventPermissionDenied = "permission denied"
	// EventPermissionGranted: the same fields; the denied operation
	// succeeded.
	EventPermissionGranted = "permission granted"
	// EventTokenLoaded: a new token was read; field expires_at (Unix
	// seconds, 0: no expiry).
	EventTokenLoaded = "auth token loaded"
	// EventTokenExpired: the token in use has expired and no new one has
	// replaced it; field expired_at.
	EventTokenExpired = "auth token expired"
	// EventAuthRefused: the cluster refused our credentials (not a
	// missing permission: a bad, expired or unknown token or certificate).
	EventAuthRefused = "authentication refused"
	// EventAuthAccepted: the cluster accepted our credentials again.
	EventAuthAccepted = "authentication accepted"
	// EventTLSRefused: the cluster's certificate was not accepted; field
	// reason says whether the CA or the host name is wrong.
	EventTLSRefused = "TLS certificate refused"
)

// SecurityEvents are told about the security events above, for metrics,
// each at the moment it is logged, so that the log line and the metric
// cannot disagree; like wire.Events, they are a second audience of the
// same detection, not a second detection. cluster is the cluster's name
// (from the config), permission one of the Permission* values. Each may
// be nil. They are called from the clients' goroutines, some under the
// cluster's credential lock, and must not block or call the clients.
type SecurityEvents struct {
	// PermissionDenied: EventPermissionDenied, once per refused
	// (permission, operation, resource) until it is granted.
	PermissionDenied func(cluster, permission string)
	// PermissionGranted: EventPermissionGranted, once for each denial
	// that PermissionDenied reported and a success ended.
	PermissionGranted func(cluster, permission string)
	// TokenLoaded: EventTokenLoaded; expiresAt in Unix seconds, 0 when
	// the token does not expire.
	TokenLoaded func(cluster string, expiresAt int64)
	// TokenExpired: EventTokenExpired.
	TokenExpired func(cluster string)
	// AuthRefused: EventAuthRefused.
	AuthRefused func(cluster string)
	// AuthAccepted: EventAuthAccepted (only after an AuthRefused).
	AuthAccepted func(cluster string)
	// TLSRefused: EventTLSRefused, once per reason until it changes.
	TLSRefused func(cluster string)
}

// Values of the permission field of EventPermissionDenied: what to grant.
const (
	PermissionProduce     = "produce"      // namespace grant-permission --actions produce
	PermissionConsume     = "consume"      // namespace grant-permission --actions consume
	PermissionTenantAdmin = "tenant-admin" // tenants update --admin-roles (create or grow topics)
	PermissionUnknown     = "unknown"
)

// authWatch is one cluster's credentials and what the cluster said about
// them. It supplies the token to both clients (so a replaced token file
// is read at the next connection, re-authentication or admin call) and
// turns refusals into the events above. Safe for concurrent use.
type authWatch struct {
	cluster string
	auth    config.Auth
	log     *zap.Logger
	ev      SecurityEvents
	now     func() time.Time

	mu         sync.Mutex
	token      string    // the last token read
	role       string    // its subject, for messages
	expires    time.Time // its expiry; zero: none
	expiredLog bool      // EventTokenExpired logged for this token
	readErr    string    // the last read error logged
	refused    bool      // EventAuthRefused logged, not yet accepted
	tlsReason  string    // the last EventTLSRefused reason logged
	denied     map[denial]bool
}

type denial struct{ permission, operation, resource string }

func newAuthWatch(c config.Cluster, log *zap.Logger, ev SecurityEvents) *authWatch {
	return &authWatch{
		cluster: c.Name,
		auth:    c.Auth,
		log:     log.Named("security").With(zap.String("cluster", c.Name)),
		ev:      ev,
		now:     time.Now,
		denied:  map[denial]bool{},
	}
}

// Token reads the token (config.Auth.Token reads the file or variable
// every time) and notes a new one, an expired one, or a read error, each
// once.
func (w *authWatch) Token() (string, error) {
	tok, err := w.auth.Token()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != w.readErr {
			w.readErr = msg
			w.log.Error("auth token unreadable", zap.String("token_source", w.auth.TokenSource()), zap.Error(err))
		}
		return "", err
	}
	w.readErr = ""
	if tok != w.token {
		w.token = tok
		w.role, w.expires = jwtClaims(tok)
		w.expiredLog = false
		var exp int64
		if !w.expires.IsZero() {
			exp = w.expires.Unix()
		}
		w.log.Info(EventTokenLoaded, zap.String("token_source", w.auth.TokenSource()),
			zap.String("role", w.role), zap.Int64("expires_at", exp))
		if w.ev.TokenLoaded != nil {
			w.ev.TokenLoaded(w.cluster, exp)
		}
	}
	if !w.expires.IsZero() && !w.now().Before(w.expires) && !w.expiredLog {
		w.expiredLog = true
		w.logExpiredLocked()
	}
	return tok, nil
}

func (w *authWatch) logExpired() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logExpiredLocked()
}

func (w *authWatch) logExpiredLocked() {
	w.log.Error(EventTokenExpired, zap.String("token_source", w.auth.TokenSource()),
		zap.String("role", w.role), zap.Int64("expired_at", w.expires.Unix()),
		zap.String("hint", "replace the token; it is read again without a restart"))
	if w.ev.TokenExpired != nil {
		w.ev.TokenExpired(w.cluster)
	}
}

// currentRole is the role the cluster sees, as far as we know it: the
// token's subject or the client certificate's common name.
func (w *authWatch) currentRole() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.role != "" {
		return w.role
	}
	if w.auth.TLSCertFile != "" {
		if c, err := tls.LoadX509KeyPair(w.auth.TLSCertFile, w.auth.TLSKeyFile); err == nil && len(c.Certificate) > 0 {
			if x, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
				return x.Subject.CommonName
			}
		}
	}
	return ""
}

// jwtClaims returns a JWT's subject and expiry without verifying it (the
// broker does that); both are empty when the token is not a JWT.
func jwtClaims(tok string) (string, time.Time) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", time.Time{}
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", time.Time{}
	}
	var c struct {
		Sub string   `json:"sub"`
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil {
		return "", time.Time{}
	}
	if c.Exp == nil {
		return c.Sub, time.Time{}
	}
	return c.Sub, time.Unix(int64(*c.Exp), 0)
}

func (w *authWatch) deny(d denial) {
	w.mu.Lock()
	seen := w.denied[d]
	w.denied[d] = true
	w.mu.Unlock()
	if seen {
		return
	}
	role := w.currentRole()
	w.log.Error(EventPermissionDenied, zap.String("permission", d.permission),
		zap.String("operation", d.operation), zap.String("resource", d.resource),
		zap.String("role", role), zap.String("hint", grantHint(d, role)))
	if w.ev.PermissionDenied != nil {
		w.ev.PermissionDenied(w.cluster, d.permission)
	}
}

// grant ends every denial of the operation on the resource.
func (w *authWatch) grant(operation, resource string) {
	w.mu.Lock()
	var ended []denial
	for d := range w.denied {
		if d.operation == operation && d.resource == resource {
			ended = append(ended, d)
			delete(w.denied, d)
		}
	}
	w.mu.Unlock()
	for _, d := range ended {
		w.log.Info(EventPermissionGranted, zap.String("permission", d.permission),
			zap.String("operation", d.operation), zap.String("resource", d.resource))
		if w.ev.PermissionGranted != nil {
			w.ev.PermissionGranted(w.cluster, d.permission)
		}
	}
}

func grantHint(d denial, role string) string {
	if role == "" {
		role = "ROLE"
	}
	ns := namespaceOf(d.resource)
	switch d.permission {
	case PermissionProduce, PermissionConsume:
		return fmt.Sprintf("pulsar-admin namespaces grant-permission --role %s --actions %s %s", role, d.permission, ns)
	case PermissionTenantAdmin:
		tenant, _, _ := strings.Cut(ns, "/")
		return fmt.Sprintf("pulsar-admin tenants update --admin-roles <existing roles>,%s %s (or create the topic on this cluster beforehand)", role, tenant)
	}
	return ""
}

// namespaceOf returns tenant/namespace of a topic or namespace name.
func namespaceOf(resource string) string {
	r := resource
	if _, rest, ok := strings.Cut(r, "://"); ok {
		r = rest
	}
	parts := strings.SplitN(r, "/", 3)
	if len(parts) < 2 {
		return resource
	}
	return parts[0] + "/" + parts[1]
}

func (w *authWatch) authRefused(err string) {
	w.mu.Lock()
	was := w.refused
	w.refused = true
	if !w.expires.IsZero() && !w.now().Before(w.expires) {
		// The refusal is the expiry: one line, the expiry's (the
		// refusal can arrive before the next read of the token notices).
		logged := w.expiredLog
		w.expiredLog = true
		w.mu.Unlock()
		if !logged {
			w.logExpired()
		}
		return
	}
	w.mu.Unlock()
	if !was {
		w.log.Error(EventAuthRefused, zap.String("role", w.currentRole()),
			zap.String("token_source", w.auth.TokenSource()), zap.String("error", err))
		if w.ev.AuthRefused != nil {
			w.ev.AuthRefused(w.cluster)
		}
	}
}

func (w *authWatch) authAccepted() {
	w.mu.Lock()
	was := w.refused
	w.refused = false
	w.tlsReason = ""
	w.mu.Unlock()
	if was {
		w.log.Info(EventAuthAccepted)
		if w.ev.AuthAccepted != nil {
			w.ev.AuthAccepted(w.cluster)
		}
	}
}

// tlsRefused logs err's TLS reason once until it changes; it returns the
// reason, or "" when err is not about the server's certificate.
func (w *authWatch) tlsRefused(err error) string {
	reason := tlsReason(err, w.auth.TLSTrustCertsFile)
	if reason == "" {
		return ""
	}
	w.mu.Lock()
	seen := w.tlsReason == reason
	w.tlsReason = reason
	w.mu.Unlock()
	if !seen {
		w.log.Error(EventTLSRefused, zap.String("reason", reason))
		if w.ev.TLSRefused != nil {
			w.ev.TLSRefused(w.cluster)
		}
	}
	return reason
}

// tlsReason says, in words an operator can act on, why the server's
// certificate was refused, or "" when err is something else.
func tlsReason(err error, trust string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var inv x509.CertificateInvalidError
	var verr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &host):
		return fmt.Sprintf("host name mismatch: the server's certificate is not valid for %q (it names %s); connect by a name the certificate holds",
			host.Host, certNames(host.Certificate))
	case errors.As(err, &unknown):
		if trust == "" {
			return "unknown CA: the server's certificate is not signed by a CA the system trusts; set auth.tls_trust_certs_file"
		}
		return fmt.Sprintf("unknown CA: the server's certificate is not signed by a CA in auth.tls_trust_certs_file %q", trust)
	case errors.As(err, &inv):
		return "invalid server certificate: " + inv.Error()
	case errors.As(err, &verr):
		return "server certificate refused: " + verr.Err.Error()
	}
	// pulsar-client-go flattens some errors to strings.
	s := err.Error()
	switch {
	case strings.Contains(s, "certificate is valid for") || strings.Contains(s, "doesn't contain any IP SANs"):
		return "host name mismatch: " + s
	case strings.Contains(s, "certificate signed by unknown authority"):
		return fmt.Sprintf("unknown CA: the server's certificate is not signed by a CA in auth.tls_trust_certs_file %q", trust)
	}
	return ""
}

func certNames(c *x509.Certificate) string {
	if c == nil {
		return "no names"
	}
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "only the common name " + strconv.Quote(c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}

// TLSError is a connection refused because of the server's certificate; its
// message says whether the CA or the host name is wrong.
type TLSError struct {
	Cluster string
	Reason  string
	Err     error
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("cluster %s: TLS: %s", e.Cluster, e.Reason)
}
func (e *TLSError) Unwrap() error { return e.Err }

// adminTransport is the admin client's transport: it sets the current
// token on each request and watches the answers for refusals. It
// implements pulsaradmin's auth.Provider.
type adminTransport struct {
	base http.RoundTripper
	w    *authWatch
	// requests counts the calls by kind (admin_requests_total, curried
	// with the cluster); nil: not counted.
	requests *prometheus.CounterVec
}

func (t *adminTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.requests != nil {
		t.requests.WithLabelValues(AdminKind(req.Method, req.URL.Path)).Inc()
	}
	if t.w.auth.HasToken() {
		tok, err := t.w.Token()
		if err != nil {
			return nil, fmt.Errorf("cluster %s: auth token: %w", t.w.cluster, err)
		}
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		if reason := t.w.tlsRefused(err); reason != "" {
			return nil, &TLSError{Cluster: t.w.cluster, Reason: reason, Err: err}
		}
		return nil, err
	}
	t.observe(req, resp)
	return resp, nil
}

func (t *adminTransport) Transport() http.RoundTripper { return t.base }
func (t *adminTransport) WithTransport(rt http.RoundTripper) {
	t.base = rt
}

// reOperation finds the operation in Pulsar's authorization refusals:
// `Unauthorized to validateTopicOperation for operation [PEEK_MESSAGES] on topic [...]`.
var reOperation = regexp.MustCompile(`operation \[([A-Z_]+)\]`)

// observe turns the answer to an admin call into events. Pulsar answers
// a missing permission with 401 or 403 and a JSON reason starting with
// "Unauthorized"; refused credentials with 401 "Authentication required".
func (t *adminTransport) observe(req *http.Request, resp *http.Response) {
	op, resource := adminOperation(req.Method, req.URL.Path)
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
	default:
		if resp.StatusCode < 300 {
			t.w.authAccepted()
			t.w.grant(op, resource)
		}
		return
	}
	// Read the (small) reason and put it back for the caller.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode == http.StatusUnauthorized && !bytes.Contains(body, []byte("Unauthorized")) {
		t.w.authRefused(fmt.Sprintf("%d from the admin API", resp.StatusCode))
		return
	}
	t.w.authAccepted()
	if m := reOperation.FindSubmatch(body); m != nil && op == "" {
		op = string(m[1])
	}
	t.w.deny(denial{permission: adminPermission(req.Method, req.URL.Path, body), operation: op, resource: resource})
}

// AdminKind names the kind of an admin call for the admin_requests_total
// label: one of a fixed set (the calls geo-sidecar makes, "other" for
// the rest), so the label stays bounded whatever the path holds.
func AdminKind(method, path string) string {
	p := strings.TrimPrefix(path, "/admin/v2/")
	for _, domain := range []string{"persistent/", "non-persistent/"} {
		if !strings.HasPrefix(p, domain) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(p, domain), "/")
		if len(parts) <= 3 {
			return "list-topics"
		}
		rest := strings.Join(parts[3:], "/")
		switch {
		case rest == "partitions" && method == http.MethodPut:
			return "create-topic"
		case rest == "partitions" && method == http.MethodPost:
			return "grow-topic"
		case rest == "partitions":
			return "topic-metadata"
		case rest == "partitioned-stats":
			return "partitioned-stats"
		case rest == "stats":
			return "stats"
		case rest == "internalStats":
			return "internal-stats"
		case strings.HasPrefix(rest, "subscription/") && strings.Contains(rest, "/resetcursor"):
			return "reset-cursor"
		case strings.HasPrefix(rest, "subscription/") && method == http.MethodPut:
			return "create-subscription"
		case rest == "subscriptions":
			return "list-subscriptions"
		case rest == "lastMessageId":
			return "last-message-id"
		case strings.HasPrefix(rest, "ledger/"):
			return "read-message"
		}
		return "other"
	}
	if strings.HasPrefix(p, "namespaces/") {
		return "namespace"
	}
	switch {
	case p == "brokers" && method == http.MethodGet:
		return "brokers"
	case path == positions.Path:
		return "positions"
	case path == positions.AckPath:
		return "positions-acknowledge"
	case path == positions.BacklogsPath:
		return "positions-backlogs"
	}
	return "other"
}

// adminOperation names an admin call of the kinds geo-sidecar makes, and
// the topic or namespace it is about.
func adminOperation(method, path string) (op, resource string) {
	p := strings.TrimPrefix(path, "/admin/v2/")
	for _, domain := range []string{"persistent/", "non-persistent/"} {
		if !strings.HasPrefix(p, domain) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(p, domain), "/")
		if len(parts) <= 3 {
			ns := strings.Join(parts[:min(2, len(parts))], "/")
			return "list topics", ns
		}
		topic := domain[:len(domain)-1] + "://" + strings.Join(parts[:3], "/")
		rest := strings.Join(parts[3:], "/")
		switch {
		case rest == "partitions" && method == http.MethodPut:
			return "create topic", topic
		case rest == "partitions" && method == http.MethodPost:
			return "grow topic partitions", topic
		case rest == "partitions":
			return "read topic metadata", topic
		case strings.HasPrefix(rest, "subscription/") && strings.HasSuffix(rest, "/resetcursor"):
			return "move subscription", topic
		case strings.HasPrefix(rest, "subscription/") && method == http.MethodPut:
			return "create subscription", topic
		case rest == "lastMessageId":
			return "read last message id", topic
		case strings.HasPrefix(rest, "ledger/"):
			return "read message by id", topic
		case rest == "subscriptions":
			return "list subscriptions", topic
		default:
			return "read topic stats", topic
		}
	}
	return method + " " + path, ""
}

// adminPermission is what to grant for a refused admin call: creating or
// growing topics is a tenant administrator's operation in Pulsar; every
// other call geo-sidecar makes needs consume on the namespace (lookups and
// topic lists take produce or consume).
func adminPermission(method, path string, body []byte) string {
	if strings.HasSuffix(path, "/partitions") && (method == http.MethodPut || method == http.MethodPost) {
		return PermissionTenantAdmin
	}
	if bytes.Contains(body, []byte("[PRODUCE]")) {
		return PermissionProduce
	}
	return PermissionConsume
}

// newAdminBase is the admin client's TLS transport: the trusted CAs from
// tls_trust_certs_file, host names verified, and the client certificate
// (when configured) read at each handshake so a renewed one is used.
//
// It also keeps admin calls from hanging on a half-open link (a NAT or
// firewall that lost the connection's state: no close ever arrives, and
// pulsaradmin's own timeout is five minutes): a connection idle for
// keep_alive is not reused, since the link may have dropped it meanwhile
// without a word, and an answer that does not start within twice
// keep_alive (at least 30 s) fails the call.
func newAdminBase(a config.Auth, keepAlive time.Duration) (http.RoundTripper, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 10
	if keepAlive > 0 {
		t.IdleConnTimeout = keepAlive
		t.ResponseHeaderTimeout = max(2*keepAlive, 30*time.Second)
	}
	cfg, err := clientTLS(a)
	if err != nil {
		return nil, err
	}
	t.TLSClientConfig = cfg
	return t, nil
}

// clientTLS is the TLS configuration of every connection to a cluster
// (admin API and the entry pipe's binary protocol): the trusted CAs, and
// the client certificate, read again at each handshake.
func clientTLS(a config.Auth) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.TLSTrustCertsFile != "" {
		pem, err := os.ReadFile(a.TLSTrustCertsFile)
		if err != nil {
			return nil, fmt.Errorf("auth.tls_trust_certs_file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth.tls_trust_certs_file %q holds no PEM certificate", a.TLSTrustCertsFile)
		}
	}
	if a.TLSCertFile != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(a.TLSCertFile, a.TLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("auth.tls_cert_file: %w", err)
			}
			return &c, nil
		}
	}
	return cfg, nil
}

// clientEvent classifies what pulsar-client-go logs about a producer,
// consumer or connection: a success ends refusals, a refusal is reported
// once. It reports whether msg was a refusal.
func (w *authWatch) clientEvent(msg string, err error, topic string) bool {
	switch msg {
	case "Created producer":
		w.authAccepted()
		w.grant("create producer", topic)
		return false
	case "Created consumer", "Connected consumer", "Reconnected consumer to broker":
		w.authAccepted()
		w.grant("subscribe", topic)
		return false
	}
	s := msg
	if err != nil {
		if w.tlsRefused(err) != "" {
			return true
		}
		s += ": " + err.Error()
	}
	switch {
	case strings.Contains(s, "Failed to authenticate") || strings.Contains(s, "AuthenticationError"):
		w.authRefused(s)
		return true
	case strings.Contains(s, "AuthorizationError") && strings.Contains(msg, "producer"):
		w.deny(denial{permission: PermissionProduce, operation: "create producer", resource: topic})
		return true
	case strings.Contains(s, "AuthorizationError") && strings.Contains(msg, "consumer"):
		w.deny(denial{permission: PermissionConsume, operation: "subscribe", resource: topic})
		return true
	case strings.Contains(s, "certificate"):
		// pulsar-client-go sometimes flattens the handshake error.
		return w.tlsRefused(errors.New(s)) != ""
	}
	return false
}
