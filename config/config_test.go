package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseGood checks that every file in testdata/good loads.
func TestParseGood(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := Load(f); err != nil {
				t.Fatalf("Load: %v", err)
			}
		})
	}
}

// TestParseBad checks every testdata/bad/X.yaml against X.want: the error
// must have exactly one line per line of X.want, in order, each line
// containing the wanted substring. Holding the count exact catches both a
// missing report and a spurious follow-on one.
func TestParseBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad fixtures: %v", err)
	}
	wants, _ := filepath.Glob("testdata/bad/*.want")
	if len(wants) != len(files) {
		t.Errorf("%d .yaml but %d .want files in testdata/bad; each needs the other", len(files), len(wants))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			wantData, err := os.ReadFile(strings.TrimSuffix(f, ".yaml") + ".want")
			if err != nil {
				t.Fatalf("expected errors: %v", err)
			}
			want := strings.Split(strings.TrimRight(string(wantData), "\n"), "\n")

			cfg, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse succeeded, want errors:\n%s", wantData)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config along with the error")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
			}
			for i := range want {
				if !strings.Contains(got[i], want[i]) {
					t.Errorf("error %d:\n got: %s\nwant: …%s…", i, got[i], want[i])
				}
			}
		})
	}
}

func TestParseFull(t *testing.T) {
	cfg, err := Load("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Sidecar: Sidecar{
			Listen:                "0.0.0.0:9751",
			DiscoveryInterval:     Duration{time.Minute},
			CursorPrefix:          "geo.repl",
			MarkerKeyFile:         "/etc/geo-sidecar/marker.key",
			MarkerKeyAcceptedFile: "/etc/geo-sidecar/marker-old.key",
			Snapshot:              Snapshot{Interval: Duration{2 * time.Second}, Timeout: Duration{90 * time.Second}, CacheSize: 20, HistoryEntries: DefaultHistoryEntries},
			AdminRate:             AdminRate{RequestsPerSecond: DefaultAdminRate, Burst: DefaultAdminBurst},
			ReceiveBudget:         1 << 30,
			SendBudget:            384 << 20,
			ReadBackBudget:        24 << 20,
			Verify:                &Verify{Interval: Duration{10 * time.Second}, MaxMessagesPerSecond: DefaultVerifyRate},
			Positions:             PositionsServlet,
		},
		Clusters: []Cluster{
			{
				Name:               "east",
				ServiceURL:         "pulsar+ssl://east-broker-1:6651,east-broker-2:6651",
				AdminURL:           "https://east-admin:8443",
				Auth:               Auth{TokenFile: "/etc/geo-sidecar/east.token", TLSTrustCertsFile: "/etc/geo-sidecar/ca.pem"},
				MaxPendingMessages: 5000,
				KeepAlive:          Duration{10 * time.Second},
			},
			{
				Name:               "west",
				ServiceURL:         "pulsar://west-broker:6650",
				AdminURL:           "http://west-admin:8080/",
				Auth:               Auth{TokenEnv: "WEST_TOKEN"},
				MaxPendingMessages: DefaultMaxPendingMessages,
				KeepAlive:          Duration{DefaultKeepAlive},
			},
			{
				Name:               "north_2",
				ServiceURL:         "pulsar://[::1]:6650",
				AdminURL:           "http://[::1]:8080",
				MaxPendingMessages: DefaultMaxPendingMessages,
				KeepAlive:          Duration{DefaultKeepAlive},
			},
		},
		Replication: []Replication{
			{
				Source:               "east",
				Namespace:            "public/default",
				Topics:               []string{"orders", "payments"},
				TopicPatterns:        []string{"audit-.*", `events\.v[0-9]+`},
				Targets:              []string{"west", "north_2"},
				Start:                StartLatest,
				DataPath:             DataPathEntries,
				OnRefused:            OnRefusedStop,
				RateLimit:            RateLimit{MessagesPerSecond: 1000, BytesPerSecond: 1.5e6},
				Subscriptions:        []string{"billing", "tenant/ns/fn"},
				SubscriptionPatterns: []string{"^team-.*"},
			},
			{
				Source:    "west",
				Namespace: "acme-corp/orders.v2",
				Topics:    []string{"orders"},
				Targets:   []string{"east"},
				Start:     StartEarliest,
				DataPath:  DataPathEntries,
				OnRefused: OnRefusedStop,
			},
		},
	}
	if got := withoutCompiled(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
	if got := cfg.Sidecar.CursorName("west"); got != "geo.repl.west" {
		t.Errorf("CursorName = %q", got)
	}
	r := cfg.Replication[0]
	for topic, want := range map[string]bool{"orders": true, "audit-eu": true, "events.v12": true, "events.v": false, "eventsXv1": false, "invoices": false} {
		if got := r.MatchesTopic(topic); got != want {
			t.Errorf("MatchesTopic(%q) = %v, want %v", topic, got, want)
		}
	}
	for sub, want := range map[string]bool{"billing": true, "tenant/ns/fn": true, "team-a": true, "ops": false} {
		if got := r.MatchesSubscription(sub); got != want {
			t.Errorf("MatchesSubscription(%q) = %v, want %v", sub, got, want)
		}
	}
}

// withoutCompiled returns a copy of c without the compiled patterns, which
// reflect.DeepEqual cannot compare usefully.
func withoutCompiled(c *Config) *Config {
	out := *c
	out.Replication = nil
	for _, r := range c.Replication {
		r.topicRE, r.subRE = nil, nil
		// Decoding leaves empty lists where the file has none; the
		// comparison is about content.
		for _, l := range []*[]string{&r.Topics, &r.TopicPatterns, &r.Targets, &r.Subscriptions, &r.SubscriptionPatterns} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		out.Replication = append(out.Replication, r)
	}
	return &out
}

func TestParseDefaults(t *testing.T) {
	cfg, err := Load("testdata/good/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sidecar
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", s.Listen, DefaultListen},
		{"discovery_interval", s.DiscoveryInterval.Duration, 30 * time.Second},
		{"cursor_prefix", s.CursorPrefix, "geo-sidecar.repl"},
		{"snapshot.interval", s.Snapshot.Interval.Duration, time.Second},
		{"snapshot.timeout", s.Snapshot.Timeout.Duration, 30 * time.Second},
		{"snapshot.cache_size", s.Snapshot.CacheSize, 10},
		{"snapshot.history_entries", s.Snapshot.HistoryEntries, int64(10000)},
		{"admin_rate.requests_per_second", s.AdminRate.RequestsPerSecond, 50.0},
		{"admin_rate.burst", s.AdminRate.Burst, 100},
		{"positions", s.Positions, PositionsAdmin},
		{"receive_budget", s.ReceiveBudget, ByteSize(512 << 20)},
		{"send_budget", s.SendBudget, ByteSize(256 << 20)},
		{"readback_budget", s.ReadBackBudget, ByteSize(64 << 20)},
		{"clusters[0].max_pending_messages", cfg.Clusters[0].MaxPendingMessages, 1000},
		{"clusters[1].max_pending_messages", cfg.Clusters[1].MaxPendingMessages, 1000},
		{"clusters[0].keep_alive", cfg.Clusters[0].KeepAlive.Duration, 30 * time.Second},
		{"replication[0].start", cfg.Replication[0].Start, StartEarliest},
		{"replication[0].rate_limit", cfg.Replication[0].RateLimit, RateLimit{}},
		{"cursor name", s.CursorName("b"), "geo-sidecar.repl.b"},
		{"verify (off when left out)", s.Verify == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestParseVerifyDefaults: a verify section present, even empty or with
// null values, turns the verifier on with the defaults; left out or
// null, it stays off (a null key keeps its default).
func TestParseVerifyDefaults(t *testing.T) {
	base, err := os.ReadFile("testdata/good/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Verify{Interval: Duration{DefaultVerifyInterval}, MaxMessagesPerSecond: DefaultVerifyRate}
	for _, section := range []string{"sidecar:\n  verify: {}\n", "sidecar:\n  verify:\n    interval:\n", "sidecar:\n  verify: {max_messages_per_second: 3000}\n"} {
		cfg, err := Parse(append([]byte(section), base...))
		if err != nil {
			t.Fatalf("%q: %v", section, err)
		}
		if cfg.Sidecar.Verify == nil || *cfg.Sidecar.Verify != want {
			t.Errorf("%q: verify %+v, want %+v", section, cfg.Sidecar.Verify, want)
		}
	}
	cfg, err := Parse(append([]byte("sidecar:\n  verify:\n"), base...))
	if err != nil || cfg.Sidecar.Verify != nil {
		t.Errorf("verify: null: %+v, %v; want off", cfg, err)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", " \n  \n", "# nothing\n", "---\n", "~\n", "null", "--- # c\n...\n"} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrEmpty) {
			t.Errorf("Parse(%q) = %v, want ErrEmpty", in, err)
		}
	}
}

func TestLoad(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want a not-exist error naming %s", err, missing)
	}
	bad := "testdata/bad/unknown-source.yaml"
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load(%s) = %v, want an error naming the file", bad, err)
	}
	if _, err := Load("testdata/bad/empty.yaml"); !errors.Is(err, ErrEmpty) {
		t.Errorf("Load(empty) = %v, want ErrEmpty", err)
	}
}

// validConfig is a small valid Config built in code, as other packages'
// tests may build one.
func validConfig() *Config {
	return &Config{
		Sidecar: Sidecar{
			Listen:            "127.0.0.1:0",
			DiscoveryInterval: Duration{time.Second},
			CursorPrefix:      DefaultCursorPrefix,
			MarkerKeyEnv:      "GEO_MARKER_KEY",
			Snapshot:          Snapshot{Interval: Duration{time.Second}, Timeout: Duration{2 * time.Second}, CacheSize: 1, HistoryEntries: 100},
			AdminRate:         AdminRate{RequestsPerSecond: 1, Burst: 1},
			ReceiveBudget:     MinBudgetShare, SendBudget: MinBudgetShare, ReadBackBudget: MinBudgetShare,
		},
		Clusters: []Cluster{
			{Name: "a", ServiceURL: "pulsar://a:6650", AdminURL: "http://a:8080", MaxPendingMessages: 1, KeepAlive: Duration{time.Second}},
			{Name: "b", ServiceURL: "pulsar://b:6650", AdminURL: "http://b:8080", MaxPendingMessages: 1, KeepAlive: Duration{time.Second}},
		},
		Replication: []Replication{{
			Source: "a", Namespace: "t/n", Targets: []string{"b"}, Start: StartLatest,
			TopicPatterns: []string{"in-.*", "x|y"}, SubscriptionPatterns: []string{"s[0-9]"},
		}},
	}
}

func TestValidateInCode(t *testing.T) {
	c := validConfig()
	for range 2 { // Validate may be called again, with the same result.
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	c.Replication[0].Targets = append(c.Replication[0].Targets, "a", "zz")
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `replication[0].targets[1]: "a" is the source cluster`) ||
		!strings.Contains(err.Error(), `replication[0].targets[2]: unknown cluster "zz"`) {
		t.Errorf("Validate = %v", err)
	}
}

func TestMatches(t *testing.T) {
	validated := validConfig()
	if err := validated.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		r    Replication
	}{
		{"validated", validated.Replication[0]},
		// Built in code and never validated: patterns are compiled on
		// the spot, with the same anchoring.
		{"unvalidated", validConfig().Replication[0]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			copied := r // the compiled patterns must survive a copy
			for _, c := range []struct {
				topic string
				want  bool
			}{
				{"in-1", true},
				{"in-", true},
				{"x", true},
				{"y", true},
				{"xy", false},     // "x|y" is anchored as ^(?:x|y)$, not ^x|y$
				{"a-in-1", false}, // anchored at the start
				{"in-1\n", false}, // and at the very end
				{"IN-1", false},   // case-sensitive
				{"", false},
			} {
				if got := copied.MatchesTopic(c.topic); got != c.want {
					t.Errorf("MatchesTopic(%q) = %v, want %v", c.topic, got, c.want)
				}
			}
			for sub, want := range map[string]bool{"s1": true, "s12": false, "xs1": false} {
				if got := copied.MatchesSubscription(sub); got != want {
					t.Errorf("MatchesSubscription(%q) = %v, want %v", sub, got, want)
				}
			}
		})
	}

	explicit := Replication{Topics: []string{"orders"}, Subscriptions: []string{"billing"}, TopicPatterns: []string{"("}}
	if !explicit.MatchesTopic("orders") || explicit.MatchesTopic("order") || explicit.MatchesTopic("(") {
		t.Errorf("explicit topics: wrong match (an invalid pattern must match nothing)")
	}
	if !explicit.MatchesSubscription("billing") || explicit.MatchesSubscription("billing2") {
		t.Errorf("explicit subscriptions: wrong match")
	}
}

func TestCluster(t *testing.T) {
	c := validConfig()
	if cl, ok := c.Cluster("b"); !ok || cl.ServiceURL != "pulsar://b:6650" {
		t.Errorf("Cluster(b) = %+v, %v", cl, ok)
	}
	if cl, ok := c.Cluster("c"); ok || cl != (Cluster{}) {
		t.Errorf("Cluster(c) = %+v, %v, want not found", cl, ok)
	}
}

func TestToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokFile := file("tok", "  eyJ.secret.token \n")
	blankFile := file("blank", " \n")
	t.Setenv("GEO_TEST_TOKEN", "eyJ.env.token\n")
	t.Setenv("GEO_TEST_EMPTY", "")

	tests := []struct {
		name    string
		auth    Auth
		want    string
		wantErr string
	}{
		{"none", Auth{}, "", ""},
		{"none with tls", Auth{TLSTrustCertsFile: "/ca.pem"}, "", ""},
		{"file", Auth{TokenFile: tokFile}, "eyJ.secret.token", ""},
		{"env", Auth{TokenEnv: "GEO_TEST_TOKEN"}, "eyJ.env.token", ""},
		{"missing file", Auth{TokenFile: filepath.Join(dir, "nope")}, "", filepath.Join(dir, "nope")},
		{"blank file", Auth{TokenFile: blankFile}, "", `token file "` + blankFile + `" is empty`},
		{"unset env", Auth{TokenEnv: "GEO_TEST_UNSET_XYZ"}, "", `"GEO_TEST_UNSET_XYZ" is not set`},
		{"empty env", Auth{TokenEnv: "GEO_TEST_EMPTY"}, "", `"GEO_TEST_EMPTY" is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.auth.Token()
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Token() = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Token() error = %v, want one containing %q", err, tt.wantErr)
			}
			if got != "" {
				t.Errorf("Token() returned %q along with an error", got)
			}
		})
	}
}

func TestMarkerKey(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const key16 = "0123456789abcdef"
	t.Setenv("GEO_TEST_KEY", key16+"xyz")
	t.Setenv("GEO_TEST_SHORT_KEY", "tinysecret")

	tests := []struct {
		name          string
		keyFile, env  string
		want, wantErr string
	}{
		{"none", "", "", "", ""},
		{"file", file("k1", key16), "", key16, ""},
		{"file newline trimmed", file("k2", key16+"\n"), "", key16, ""},
		{"file CRLF trimmed", file("k3", key16+"\r\n"), "", key16, ""},
		{"file keeps other whitespace", file("k4", " "+key16+"\n\n"), "", " " + key16 + "\n", ""},
		{"env", "", "GEO_TEST_KEY", key16 + "xyz", ""},
		{"short file", file("k5", "tinysecret\n"), "", "", "is 10 bytes, need at least 16"},
		{"short env", "", "GEO_TEST_SHORT_KEY", "", `environment variable "GEO_TEST_SHORT_KEY" is 10 bytes`},
		{"unset env", "", "GEO_TEST_UNSET_KEY", "", `"GEO_TEST_UNSET_KEY" is not set`},
		{"missing file", filepath.Join(dir, "nope"), "", "", filepath.Join(dir, "nope")},
	}
	for _, tt := range tests {
		t.Run("accepted/"+tt.name, func(t *testing.T) {
			c := &Config{Sidecar: Sidecar{MarkerKeyAcceptedFile: tt.keyFile, MarkerKeyAcceptedEnv: tt.env}}
			got, err := c.MarkerKeyAccepted()
			if tt.wantErr == "" {
				if err != nil || string(got) != tt.want || (tt.want == "" && got != nil) {
					t.Fatalf("MarkerKeyAccepted() = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "accepted marker key") {
				t.Fatalf("MarkerKeyAccepted() error = %v, want one naming the accepted key and containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "tinysecret") {
				t.Errorf("error leaks the key: %v", err)
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{Sidecar: Sidecar{MarkerKeyFile: tt.keyFile, MarkerKeyEnv: tt.env}}
			got, err := c.MarkerKey()
			if tt.wantErr == "" {
				if err != nil || string(got) != tt.want {
					t.Fatalf("MarkerKey() = %q, %v; want %q", got, err, tt.want)
				}
				if tt.want == "" && got != nil {
					t.Errorf("MarkerKey() = %q, want nil", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("MarkerKey() error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "tinysecret") {
				t.Errorf("error leaks the key: %v", err)
			}
		})
	}
}

// TestWarnings: a token over pulsar:// or http://, and HTTP endpoints
// beyond loopback, are allowed but warned about, naming the path (and
// where the token comes from, never the token).
func TestWarnings(t *testing.T) {
	base := func(service, admin string, auth Auth) *Config {
		return &Config{Sidecar: Sidecar{Listen: DefaultListen}, Clusters: []Cluster{
			{Name: "east", ServiceURL: service, AdminURL: admin, Auth: auth},
			{Name: "west", ServiceURL: "pulsar://west:6650", AdminURL: "http://west:8080"},
		}}
	}
	listen := func(addr string) *Config {
		c := base("pulsar://e:6650", "http://e:8080", Auth{})
		c.Sidecar.Listen = addr
		return c
	}
	tests := []struct {
		name string
		cfg  *Config
		want []string
	}{
		{"token over TLS", base("pulsar+ssl://e:6651", "https://e:8443", Auth{TokenFile: "/t"}), nil},
		{"no token in clear", base("pulsar://e:6650", "http://e:8080", Auth{}), nil},
		{"client cert only", base("pulsar+ssl://e:6651", "https://e:8443", Auth{TLSCertFile: "/c", TLSKeyFile: "/k"}), nil},
		{"token file in clear", base("pulsar://e:6650", "http://e:8080", Auth{TokenFile: "/etc/geo/east.token"}), []string{
			`clusters[0].service_url: "pulsar://e:6650" is not encrypted; the token from file "/etc/geo/east.token" would cross the network in clear text`,
			`clusters[0].admin_url: "http://e:8080" is not encrypted; the token from file "/etc/geo/east.token" would cross the network in clear text with every admin call`,
		}},
		{"token env, admin in clear", base("pulsar+ssl://e:6651", "http://e:8080", Auth{TokenEnv: "EAST_TOKEN"}), []string{
			`clusters[0].admin_url: "http://e:8080" is not encrypted; the token from environment variable "EAST_TOKEN"`,
		}},
		{"listen everywhere", listen(":9750"), []string{`sidecar.listen: ":9750" is reachable from other hosts`}},
		{"listen on all IPv4", listen("0.0.0.0:9750"), []string{`sidecar.listen: "0.0.0.0:9750" is reachable`}},
		{"listen on localhost", listen("localhost:9750"), nil},
		{"listen on ::1", listen("[::1]:9750"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("Warnings() = %q, want %d lines", got, len(tt.want))
			}
			for i := range tt.want {
				if !strings.Contains(got[i].Detail, tt.want[i]) {
					t.Errorf("warning %d:\n got: %s\nwant: …%s…", i, got[i].Detail, tt.want[i])
				}
				// Each kind is logged under its own message.
				summary := WarnCleartext
				if strings.HasPrefix(got[i].Detail, "sidecar.listen") {
					summary = WarnReachable
				}
				if got[i].Summary != summary {
					t.Errorf("warning %d is logged as %q, want %q", i, got[i].Summary, summary)
				}
			}
		})
	}
}

func TestWarningEntryPathWithoutKey(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"entry path, no key", Config{Replication: []Replication{{}}}, true},
		{"entry path, key file", Config{Sidecar: Sidecar{MarkerKeyFile: "/k"}, Replication: []Replication{{}}}, false},
	} {
		got := false
		for _, w := range tt.cfg.Warnings() {
			if strings.Contains(w.Detail, "replication[0]: the entry data path without a marker key") {
				got = w.Summary == WarnNoMarkerKey
			}
		}
		if got != tt.want {
			t.Errorf("%s: warned %v, want %v (%q)", tt.name, got, tt.want, tt.cfg.Warnings())
		}
	}
}
