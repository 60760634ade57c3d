package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"
)

// South is the test bed's secure cluster (e2e/pulsar/cluster.sh): TLS only,
// token and client-certificate authentication, authorization on, "admin"
// the super-user. Its URLs use 127.0.0.1, the only name in its
// certificate.
var South = Cluster{Name: "south", ServiceURL: "pulsar+ssl://" + Loopback(6681), AdminURL: "https://" + Loopback(8111)}

// SouthMisnamed are south's URLs by a name its certificate does not hold.
var SouthMisnamed = Cluster{Name: "south",
	ServiceURL: "pulsar+ssl://localhost" + strings.TrimPrefix(Loopback(6681), "127.0.0.1"),
	AdminURL:   "https://localhost" + strings.TrimPrefix(Loopback(8111), "127.0.0.1")}

var southUp struct {
	once sync.Once
	err  error
}

// UpSouth starts the secure cluster unless it is up (once per test
// binary): the suite's TestMain starts only the ordinary clusters, and
// only the security tests need south.
func UpSouth(t testing.TB) {
	t.Helper()
	southUp.once.Do(func() { southUp.err = Up("south") })
	if southUp.err != nil {
		t.Fatalf("secure cluster south did not start: %v", southUp.err)
	}
}

// TestbedDir is cluster.sh's state directory.
func TestbedDir() string {
	if d := os.Getenv("GEO_TESTBED_DIR"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "geo-sidecar", "testbed")
}

// SouthFile is a file of south's state directory, e.g. "tls/ca.pem".
func SouthFile(name string) string { return filepath.Join(TestbedDir(), "south", name) }

// MintToken makes an HS256 JWT for role with south's secret key, as
// Pulsar's token tool does; ttl 0 means no expiry.
func MintToken(t testing.TB, role string, ttl time.Duration) string {
	t.Helper()
	key, err := os.ReadFile(SouthFile("secret.key"))
	if err != nil {
		t.Fatalf("south's secret key: %v", err)
	}
	claims := map[string]any{"sub": role}
	if ttl != 0 {
		claims["exp"] = time.Now().Add(ttl).Unix()
	}
	payload, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + enc.EncodeToString(payload)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// AdminToken is south's super-user token.
func AdminToken(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(SouthFile("tokens/admin.token"))
	if err != nil {
		t.Fatalf("south's admin token: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// SouthAdmin is an admin client for south as the super-user.
func SouthAdmin(t testing.TB) pulsaradmin.Client {
	t.Helper()
	a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: South.AdminURL, Token: AdminToken(t),
		TLSTrustCertsFilePath: SouthFile("tls/ca.pem")})
	if err != nil {
		t.Fatalf("admin client for south: %v", err)
	}
	return a
}

// SouthClient is a pulsar client for south with token, closed when t ends.
func SouthClient(t testing.TB, token string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:                   South.ServiceURL,
		TLSTrustCertsFilePath: SouthFile("tls/ca.pem"),
		TLSValidateHostname:   true,
		Authentication:        pulsar.NewAuthenticationToken(token),
		OperationTimeout:      30 * time.Second,
		ConnectionTimeout:     5 * time.Second,
		Logger:                pulsarlog.DefaultNopLogger(),
	})
	if err != nil {
		t.Fatalf("pulsar client for south: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewSecureNamespace creates a fresh tenant and namespace on the ordinary
// cluster plain and on south (tenant with no admin roles: only the
// super-user administers it) and returns "tenant/ns".
func NewSecureNamespace(t testing.TB, plain string) string {
	t.Helper()
	id := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	tenant := "s" + id
	ns := tenant + "/ns"
	a := Admin(t, plain)
	if err := a.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{plain}}); err != nil {
		t.Fatalf("create tenant %s on %s: %v", tenant, plain, err)
	}
	if err := a.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatalf("create namespace %s on %s: %v", ns, plain, err)
	}
	s := SouthAdmin(t)
	if err := s.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{"south"}}); err != nil {
		t.Fatalf("create tenant %s on south: %v", tenant, err)
	}
	if err := s.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatalf("create namespace %s on south: %v", ns, err)
	}
	return ns
}

// Grant gives role the actions ("produce", "consume") on namespace ns of
// south, as `pulsar-admin namespaces grant-permission` does.
func Grant(t testing.TB, ns, role string, actions ...string) {
	t.Helper()
	name, err := utils.GetNamespaceName(ns)
	if err != nil {
		t.Fatal(err)
	}
	var acts []utils.AuthAction
	for _, a := range actions {
		acts = append(acts, utils.AuthAction(a))
	}
	if err := SouthAdmin(t).Namespaces().GrantNamespacePermission(*name, role, acts); err != nil {
		t.Fatalf("grant %v to %s on south's %s: %v", actions, role, ns, err)
	}
}

// SecureAuth is the auth block of a cluster in a sidecar config.
type SecureAuth struct {
	TokenFile, TrustCerts, CertFile, KeyFile string
}

func (a SecureAuth) yaml() string {
	var b strings.Builder
	b.WriteString("    auth:\n")
	for _, kv := range [][2]string{{"token_file", a.TokenFile}, {"tls_trust_certs_file", a.TrustCerts},
		{"tls_cert_file", a.CertFile}, {"tls_key_file", a.KeyFile}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "      %s: %s\n", kv[0], kv[1])
		}
	}
	return b.String()
}

// SecureConfig is the YAML of a sidecar config with the ordinary cluster
// plain and the secure cluster sc with auth; replication as for Config.
func SecureConfig(listen, plain string, sc Cluster, auth SecureAuth, replication string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\n  discovery_interval: 1s\n  marker_key_file: %s\nclusters:\n", listen, MarkerKeyFile)
	p := Get(plain)
	fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", p.Name, p.ServiceURL, p.AdminURL)
	fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", sc.Name, sc.ServiceURL, sc.AdminURL)
	b.WriteString(auth.yaml())
	b.WriteString("replication:\n")
	b.WriteString(replication)
	return b.String()
}

// WriteFileAtomic replaces path with data the way a credentials agent
// should: write a temporary file beside it, then rename over it, so a
// reader never sees half a token.
func WriteFileAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
