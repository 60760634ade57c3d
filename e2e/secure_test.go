package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/subscription/drill"
)

// The security tests run the sidecar between east (ordinary) and south
// (TLS, tokens, authorization; see e2e/pulsar/cluster.sh) with a role that
// has only what the sidecar needs: produce and consume on the namespace
// on south. The topics exist on south beforehand, created by the
// super-user, because creating a topic is a tenant administrator's
// operation in Pulsar and the sidecar's role is not one.

// secureSetup is one test's namespace, topic and sidecar files.
type secureSetup struct {
	ns, topic, role string
	dir             string
	tokenFile       string
	app             pulsar.Client // south, as the applications' role
	east            pulsar.Client
	secrets         []string // must never show in logs, status or metrics
}

func newSecureSetup(t *testing.T, partitions int) *secureSetup {
	t.Helper()
	UpSouth(t)
	s := &secureSetup{dir: t.TempDir()}
	s.ns = NewSecureNamespace(t, "east")
	s.topic = Topic(s.ns, "orders")
	CreatePartitioned(t, s.topic, partitions, "east")
	tn := mustTopicName(t, s.topic)
	if err := SouthAdmin(t).Topics().Create(*tn, partitions); err != nil {
		t.Fatalf("create %s on south: %v", s.topic, err)
	}
	tenant := strings.Split(s.ns, "/")[0]
	s.role = "geo-sidecar-" + tenant
	s.tokenFile = filepath.Join(s.dir, "south.token")
	// The applications on south have a role of their own.
	app := "app-" + tenant
	Grant(t, s.ns, app, "produce", "consume")
	appToken := MintToken(t, app, time.Hour)
	s.app = SouthClient(t, appToken)
	s.east = Client(t, "east")
	s.secrets = []string{AdminToken(t), appToken}
	return s
}

// writeToken mints a token for the setup's role and puts it in the token
// file (atomically); the token joins the secrets checked for.
func (s *secureSetup) writeToken(t *testing.T, ttl time.Duration) string {
	t.Helper()
	tok := MintToken(t, s.role, ttl)
	WriteFileAtomic(t, s.tokenFile, []byte(tok+"\n"))
	s.secrets = append(s.secrets, tok, tok[strings.LastIndex(tok, ".")+1:])
	return tok
}

// config writes a sidecar config replicating the topic both ways between
// east and south (with the billing subscription kept in step) and returns
// its path and listen address.
func (s *secureSetup) config(t *testing.T, sc Cluster, auth SecureAuth, name string) (string, string) {
	return s.configSubs(t, sc, auth, name, "[billing]")
}

// configSubs is config with the given subscriptions list ("[]": none).
func (s *secureSetup) configSubs(t *testing.T, sc Cluster, auth SecureAuth, name, subs string) (string, string) {
	t.Helper()
	listen := FreeAddr(t)
	repl := fmt.Sprintf("  - {source: east, namespace: %s, topics: [orders], targets: [south], subscriptions: %s}\n"+
		"  - {source: south, namespace: %s, topics: [orders], targets: [east], subscriptions: %s}\n", s.ns, subs, s.ns, subs)
	path := filepath.Join(s.dir, name)
	if err := os.WriteFile(path, []byte(SecureConfig(listen, "east", sc, auth, repl)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, listen
}

func (s *secureSetup) tokenAuth() SecureAuth {
	return SecureAuth{TokenFile: s.tokenFile, TrustCerts: SouthFile("tls/ca.pem")}
}

// produce publishes n messages to the topic through c, each carrying a
// property and a payload that must never appear in the sidecar's logs.
func (s *secureSetup) produce(t *testing.T, c pulsar.Client, region string, from, n int) []string {
	t.Helper()
	msgs := make([]*pulsar.ProducerMessage, n)
	want := make([]string, n)
	for i := range msgs {
		want[i] = fmt.Sprintf("payload-%s-%s-%d", s.role, region, from+i)
		email := fmt.Sprintf("customer-%s-%d@example.com", s.role, from+i)
		msgs[i] = &pulsar.ProducerMessage{Payload: []byte(want[i]), Key: fmt.Sprintf("k%d", i%8),
			Properties: map[string]string{"customer-email": email}}
	}
	Produce(t, c, s.topic, msgs...)
	s.secrets = append(s.secrets, "payload-"+s.role, "customer-"+s.role)
	return want
}

// awaitAll consumes from the topic through c on subscription sub until
// every payload of want has arrived (others may come too) and returns what
// arrived.
func (s *secureSetup) awaitAll(t *testing.T, c pulsar.Client, sub string, want []string, timeout time.Duration) []string {
	t.Helper()
	var got []string
	missing := func() []string {
		var m []string
		for _, w := range want {
			if !slices.Contains(got, w) {
				m = append(m, w)
			}
		}
		return m
	}
	Eventually(t, timeout, func() error {
		got = append(got, Payloads(Consume(t, c, s.topic, sub, len(want), 2*time.Second))...)
		if m := missing(); len(m) > 0 {
			return fmt.Errorf("%d of %d messages missing on %s, e.g. %s", len(m), len(want), sub, m[0])
		}
		return nil
	})
	return got
}

// checkNoSecrets fails t if a token, a payload or a property value of this
// test shows in the sidecar's log, its /metrics or extra outputs.
func (s *secureSetup) checkNoSecrets(t *testing.T, sc *Sidecar, extra ...[]byte) {
	t.Helper()
	log, err := os.ReadFile(sc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + sc.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	outputs := map[string][]byte{"log": log, "/metrics": metrics}
	for i, e := range extra {
		outputs[fmt.Sprintf("output %d", i)] = e
	}
	for what, b := range outputs {
		for _, secret := range s.secrets {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s contains a secret, a payload or a property value (%.12s…)", what, secret)
			}
		}
	}
}

func run(t *testing.T, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command(Binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return o.Bytes(), e.Bytes(), code
}

// countLines counts log lines with every one of subs.
func countLines(t *testing.T, path string, subs ...string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
lines:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue lines
			}
		}
		n++
	}
	return n
}

// TestSecureReplicationBothWays: east <-> south with the least-privilege
// role, authenticated by a token and by a client certificate; then
// validate, status and a failover drill against the same config; no
// secret, payload or property in the log, status or /metrics.
func TestSecureReplicationBothWays(t *testing.T) {
	for _, mode := range []string{"token", "client-certificate"} {
		t.Run(mode, func(t *testing.T) {
			s := newSecureSetup(t, 2)
			var auth SecureAuth
			if mode == "token" {
				s.writeToken(t, time.Hour)
				auth = s.tokenAuth()
			} else {
				// cluster.sh made a client certificate with CN geo-sidecar-tls.
				s.role = "geo-sidecar-tls"
				auth = SecureAuth{TrustCerts: SouthFile("tls/ca.pem"),
					CertFile: SouthFile("tls/client-geo-sidecar-tls.pem"), KeyFile: SouthFile("tls/client-geo-sidecar-tls.key.pem")}
			}
			Grant(t, s.ns, s.role, "produce", "consume")
			cfg, listen := s.config(t, South, auth, "geo.yaml")

			out, errOut, code := run(t, "validate", "--config", cfg)
			if code != 0 || len(errOut) > 0 {
				t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
			}

			sc := StartSidecarFile(t, cfg, listen)
			fromEast := s.produce(t, s.east, "east", 0, 100)
			fromSouth := s.produce(t, s.app, "south", 0, 100)
			s.awaitAll(t, s.app, "check", fromEast, 60*time.Second)
			s.awaitAll(t, s.east, "check", fromSouth, 60*time.Second)

			status, errOut, code := run(t, "status", "--config", cfg)
			if code != 0 || !bytes.Contains(status, []byte("south")) || !bytes.Contains(status, []byte(s.ns+"/orders")) {
				t.Fatalf("status: exit %d\n%s%s", code, status, errOut)
			}

			// billing is listed in the config and does not exist: the drill
			// creates it, and deletes it. The test's "check" subscriptions
			// read the topic too.
			out, errOut, code = run(t, "drill", "--config", cfg, "--topic", s.ns+"/orders", "--subscription", "billing",
				"--from", "south", "--to", "east", "--messages", "200", "--publish-over", "1s", "--json", "--allow-other-subscriptions")
			var rep drill.Report
			if code != 0 || json.Unmarshal(out, &rep) != nil || rep.Lost != 0 || rep.Published != 200 {
				t.Fatalf("drill south -> east: exit %d\n%s%s", code, out, errOut)
			}
			s.checkNoSecrets(t, sc, status, errOut, out)
			if n := countLines(t, sc.LogPath, "permission denied"); n != 0 {
				t.Errorf("%d permission denied lines with every permission granted", n)
			}
		})
	}
}

// writeOtherCA writes a CA certificate that did not sign south's
// certificate.
func writeOtherCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "some other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSecureTLSRefused: a wrong CA and a host name the certificate does
// not hold are each refused with a message that says which; status fails
// with it, and run logs it once per cluster.
func TestSecureTLSRefused(t *testing.T) {
	s := newSecureSetup(t, 1)
	s.writeToken(t, time.Hour)
	Grant(t, s.ns, s.role, "produce", "consume")
	otherCA := filepath.Join(s.dir, "other-ca.pem")
	writeOtherCA(t, otherCA)
	tests := []struct {
		name string
		sc   Cluster
		ca   string
		want string
	}{
		{"wrong CA", South, otherCA, `TLS: unknown CA: the server's certificate is not signed by a CA in auth.tls_trust_certs_file "` + otherCA + `"`},
		{"wrong host name", SouthMisnamed, SouthFile("tls/ca.pem"), `TLS: host name mismatch: the server's certificate is not valid for "localhost"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth := s.tokenAuth()
			auth.TrustCerts = tt.ca
			cfg, listen := s.config(t, tt.sc, auth, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			out, errOut, code := run(t, "status", "--config", cfg)
			if code == 0 || !strings.Contains(string(errOut), tt.want) {
				t.Fatalf("status: exit %d, want 1 and an error with %q\nstdout:\n%s\nstderr:\n%s", code, tt.want, out, errOut)
			}
			t.Logf("status says: %s", strings.TrimSpace(string(errOut)))

			// run: the pair from east cannot discover south's topics,
			// so the sidecar is never ready; start it by hand.
			logPath := filepath.Join(t.TempDir(), "sidecar.log")
			logf, err := os.Create(logPath)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(Binary, "run", "--config", cfg)
			cmd.Stdout, cmd.Stderr = logf, logf
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() }()
			_ = listen
			Eventually(t, 30*time.Second, func() error {
				if n := countLines(t, logPath, "TLS certificate refused", `"cluster":"south"`); n != 1 {
					return fmt.Errorf("%d lines 'TLS certificate refused' for south, want 1", n)
				}
				return nil
			})
			b, _ := os.ReadFile(logPath)
			if !strings.Contains(string(b), strings.TrimPrefix(tt.want, "TLS: ")[:30]) {
				t.Errorf("run's log does not say %q:\n%s", tt.want, b)
			}
		})
	}
}

// TestSecureTokenRotation: the sidecar starts with a token that expires
// 16 s later; 8 s in, the file is replaced (atomically) by a new token.
// Messages produced on both sides all the while, and past the first
// token's expiry, all arrive: nothing lost, no restart, no error.
func TestSecureTokenRotation(t *testing.T) {
	start := time.Now()
	s := newSecureSetup(t, 1)
	Grant(t, s.ns, s.role, "produce", "consume")
	const life = 16 * time.Second
	s.writeToken(t, life)
	expA := time.Now().Add(life)
	cfg, listen := s.configSubs(t, South, s.tokenAuth(), "geo.yaml", "[]")
	sc := StartSidecarFile(t, cfg, listen)

	var fromEast, fromSouth []string
	rotated := false
	var expB time.Time
	// The broker checks credentials every 5 s (authenticationRefreshCheckSeconds
	// in cluster.sh): 11 s past the expiry, every connection opened with the
	// old token has been challenged at least twice.
	for i := 0; time.Now().Before(expA.Add(11 * time.Second)); i++ {
		if !rotated && time.Now().After(expA.Add(-life/2)) {
			s.writeToken(t, 10*time.Minute)
			expB = time.Now().Add(10 * time.Minute)
			rotated = true
		}
		fromEast = append(fromEast, s.produce(t, s.east, "east", i*5, 5)...)
		fromSouth = append(fromSouth, s.produce(t, s.app, "south", i*5, 5)...)
		time.Sleep(500 * time.Millisecond)
	}
	s.awaitAll(t, s.app, "check", fromEast, 60*time.Second)
	s.awaitAll(t, s.east, "check", fromSouth, 60*time.Second)
	t.Logf("%d + %d messages replicated across the rotation; the old token expired %.0fs before the last message; test took %.1fs",
		len(fromEast), len(fromSouth), time.Since(expA).Seconds(), time.Since(start).Seconds())

	// The broker did challenge the sidecar's connections, and the answer
	// (the new token) was accepted: no "authentication refused" below.
	if n := countLines(t, SouthFile("pulsar.log"), "Refreshing authentication credentials", "authRole "+s.role); n == 0 {
		t.Errorf("south's log shows no re-authentication of %s: the test did not exercise the challenge", s.role)
	}
	if n := countLines(t, sc.LogPath, `"auth token loaded"`, `"cluster":"south"`); n != 2 {
		t.Errorf("%d 'auth token loaded' lines, want 2 (the first token and its replacement)", n)
	}
	for _, bad := range []string{"auth token expired", "authentication refused", "permission denied"} {
		if n := countLines(t, sc.LogPath, bad); n != 0 {
			t.Errorf("%d %q lines across a timely rotation", n, bad)
		}
	}
	if v := sc.Metric("geo_sidecar_auth_token_expiry_timestamp_seconds", `cluster="south"`); v < float64(expB.Add(-time.Minute).Unix()) {
		t.Errorf("auth_token_expiry_timestamp_seconds = %v, want the new token's expiry (%d)", v, expB.Unix())
	}
	s.checkNoSecrets(t, sc)
}

// TestSecureExpiredToken: a token that expires and is not replaced gives
// one error line and the auth_token_expired metric, not a line per retry;
// replication waits, and when a new token is put in the file it resumes
// with nothing lost.
func TestSecureExpiredToken(t *testing.T) {
	s := newSecureSetup(t, 1)
	Grant(t, s.ns, s.role, "produce", "consume")
	s.writeToken(t, 6*time.Second)
	cfg, listen := s.configSubs(t, South, s.tokenAuth(), "geo.yaml", "[]")
	sc := StartSidecarFile(t, cfg, listen)
	before := s.produce(t, s.east, "east", 0, 20)
	s.awaitAll(t, s.app, "check", before, 30*time.Second)

	Eventually(t, 30*time.Second, func() error {
		if v := sc.Metric("geo_sidecar_auth_token_expired", `cluster="south"`); v != 1 {
			return fmt.Errorf("auth_token_expired{cluster=south} = %v", v)
		}
		return nil
	})
	linesAtExpiry := countLines(t, sc.LogPath)
	// The broker re-checks credentials every 5 s: after 6 s every
	// connection opened with the token is refused.
	time.Sleep(6 * time.Second)
	// Messages produced while south refuses the token wait in east.
	during := s.produce(t, s.east, "east", 20, 20)
	time.Sleep(4 * time.Second)
	if got := Payloads(Consume(t, s.app, s.topic, "peek", 40, 2*time.Second)); len(got) > 20 {
		t.Errorf("%d messages on south, want the 20 from before the expiry: the expired token was accepted", len(got))
	}
	grown := countLines(t, sc.LogPath) - linesAtExpiry
	if n := countLines(t, sc.LogPath, `"auth token expired"`); n != 1 {
		t.Errorf("%d 'auth token expired' lines, want 1", n)
	}
	if n := countLines(t, sc.LogPath, `"level":"error"`, `"logger":"security"`); n != 1 {
		t.Errorf("%d security error lines with an expired token, want 1 (the expiry)", n)
	}
	t.Logf("log lines in the 10 s after the expiry: %d", grown)
	if grown > 20 {
		t.Errorf("%d log lines in 10 s with an expired token: a flood", grown)
	}

	s.writeToken(t, 10*time.Minute)
	s.awaitAll(t, s.app, "check", during, 60*time.Second)
	Eventually(t, 30*time.Second, func() error {
		if v := sc.Metric("geo_sidecar_auth_token_expired", `cluster="south"`); v != 0 {
			return fmt.Errorf("auth_token_expired{cluster=south} = %v after a new token, want 0", v)
		}
		return nil
	})
	s.checkNoSecrets(t, sc)
}

// TestSecureMissingPermission: without produce on south, the east->south
// pair cannot write; the sidecar names the permission in one log line and
// the permission_denied metric while south->east keeps going, and resumes
// once the grant is made. A topic that does not exist on south yet needs
// a tenant administrator to be created: named the same way, and created
// once the role is made one. The producer that is refused is the entry
// pipe's own client's.
func TestSecureMissingPermission(t *testing.T) {
	s := newSecureSetup(t, 1)
	Grant(t, s.ns, s.role, "consume")
	s.writeToken(t, time.Hour)
	newTopic := Topic(s.ns, "invoices") // on east only
	CreatePartitioned(t, newTopic, 2, "east")
	listen := FreeAddr(t)
	repl := fmt.Sprintf("  - {source: east, namespace: %s, topics: [orders, invoices], targets: [south]}\n"+
		"  - {source: south, namespace: %s, topics: [orders], targets: [east]}\n", s.ns, s.ns)
	cfg := filepath.Join(s.dir, "geo.yaml")
	if err := os.WriteFile(cfg, []byte(SecureConfig(listen, "east", South, s.tokenAuth(), repl)), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := StartSidecarFile(t, cfg, listen)
	fromEast := s.produce(t, s.east, "east", 0, 50)
	fromSouth := s.produce(t, s.app, "south", 0, 50)
	s.awaitAll(t, s.east, "check", fromSouth, 60*time.Second)

	deadline := time.Now().Add(30 * time.Second)
	for {
		produce := sc.Metric("geo_sidecar_permission_denied", `cluster="south"`, `permission="produce"`)
		admin := sc.Metric("geo_sidecar_permission_denied", `cluster="south"`, `permission="tenant-admin"`)
		if produce == 1 && admin == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("permission_denied{cluster=south}: produce %v, tenant-admin %v; want 1 and 1", produce, admin)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(5 * time.Second) // retries happen meanwhile
	for _, perm := range []string{"produce", "tenant-admin"} {
		if n := countLines(t, sc.LogPath, `"permission denied"`, `"permission":"`+perm+`"`, `"cluster":"south"`); n != 1 {
			t.Errorf("%d 'permission denied' lines for %s on south, want 1", n, perm)
		}
	}
	b, _ := os.ReadFile(sc.LogPath)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"permission denied"`) {
			t.Logf("the sidecar says: %s", l)
		}
	}

	Grant(t, s.ns, s.role, "produce", "consume")
	s.awaitAll(t, s.app, "check", fromEast, 60*time.Second)
	tenant := strings.Split(s.ns, "/")[0]
	if err := SouthAdmin(t).Tenants().Update(utils.TenantData{Name: tenant, AllowedClusters: []string{"south"}, AdminRoles: []string{s.role}}); err != nil {
		t.Fatalf("make %s an admin of %s on south: %v", s.role, tenant, err)
	}
	Eventually(t, 30*time.Second, func() error {
		if v := sc.Metric("geo_sidecar_permission_denied", `cluster="south"`); v != 0 {
			return fmt.Errorf("permission_denied{cluster=south} = %v after the grants", v)
		}
		md, err := SouthAdmin(t).Topics().GetMetadata(*mustTopicName(t, newTopic))
		if err != nil || md.Partitions != 2 {
			return fmt.Errorf("%s on south: %+v, %v", newTopic, md, err)
		}
		return nil
	})
	for _, perm := range []string{"produce", "tenant-admin"} {
		if n := countLines(t, sc.LogPath, `"permission granted"`, `"permission":"`+perm+`"`); n != 1 {
			t.Errorf("%d 'permission granted' lines for %s, want 1", n, perm)
		}
	}
	s.checkNoSecrets(t, sc)
}

// TestSecureFailedSendLogsNoProperties: a message too large for south
// (maxMessageSize 2 MB there, 5 MB on east) cannot be sent; the sidecar
// logs the refusal naming the position and the reason, and neither the
// message's properties nor its payload may reach the sidecar's log. (The
// first data path's producer, pulsar-client-go's, logged such a failure
// with the message's properties.)
func TestSecureFailedSendLogsNoProperties(t *testing.T) {
	s := newSecureSetup(t, 1)
	Grant(t, s.ns, s.role, "produce", "consume")
	s.writeToken(t, time.Hour)
	listen := FreeAddr(t)
	repl := fmt.Sprintf("  - {source: east, namespace: %s, topics: [orders], targets: [south]}\n", s.ns)
	cfg := filepath.Join(s.dir, "geo.yaml")
	if err := os.WriteFile(cfg, []byte(SecureConfig(listen, "east", South, s.tokenAuth(), repl)), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := StartSidecarFile(t, cfg, listen)
	email := "customer-" + s.role + "-big@example.com"
	s.secrets = append(s.secrets, email)
	Produce(t, s.east, s.topic, &pulsar.ProducerMessage{Payload: bytes.Repeat([]byte("x"), 3<<20),
		Properties: map[string]string{"customer-email": email}})
	Eventually(t, 30*time.Second, func() error {
		if countLines(t, sc.LogPath, "refuses a message for good", `"reason":"rejected-too-large"`) == 0 {
			return fmt.Errorf("the sidecar has not logged the refused send yet")
		}
		return nil
	})
	s.checkNoSecrets(t, sc)
}
