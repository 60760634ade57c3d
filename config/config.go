// Package config loads and checks the one YAML file that tells geo-sidecar
// which Pulsar clusters exist and which namespaces and topics to copy between
// them.
//
// A replication daemon that silently ignores a typo copies the wrong data, or
// nothing, and nobody notices until a failover. So loading is strict: defaults
// are filled first, then the file is decoded with unknown keys rejected, then
// [Config.Validate] checks every cross-reference. All problems are reported at
// once, each naming its path in the file (for example
// `replication[0].targets[1]`) and the offending value, so an operator can fix
// a file in one pass.
//
// Secrets (auth tokens, the marker key) are never held in the Config: it only
// names the file or environment variable holding them, and [Auth.Token] and
// [Config.MarkerKey] read them when needed. Errors name where a secret was
// looked for, never the secret itself.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults filled in before decoding, for keys the file leaves out. A key that
// is present but null (`listen:` with nothing after it) also keeps its default.
const (
	DefaultListen             = "127.0.0.1:9750"
	DefaultDiscoveryInterval  = 30 * time.Second
	DefaultCursorPrefix       = "geo-sidecar.repl"
	DefaultSnapshotInterval   = 1 * time.Second
	DefaultSnapshotTimeout    = 30 * time.Second
	DefaultSnapshotCacheSize  = 10
	DefaultHistoryEntries     = 10000
	DefaultAdminRate          = 50
	DefaultAdminBurst         = 100
	DefaultMaxPendingMessages = 1000
	DefaultKeepAlive          = 30 * time.Second
	DefaultStart              = StartEarliest
	DefaultDataPath           = DataPathEntries
	DefaultOnRefused          = OnRefusedStop
	DefaultPositions          = PositionsAdmin
)

// Values of [Sidecar.Positions]: where subscription sync learns the local
// subscriptions' positions.
const (
	// PositionsAdmin reads them from the admin API (stats readings, and an
	// internal-stats call per partition that moved), in the cluster's
	// admin_rate: the default, and what every broker serves.
	PositionsAdmin = "admin"
	// PositionsServlet asks each broker of the cluster for all of them at
	// once, from geo-sidecar's positions servlet (deploy/positions, a
	// broker plugin); a broker without it (404) keeps the admin path for
	// its topics.
	PositionsServlet = "servlet"
)

// Defaults of sidecar.verify, the continuous verifier, for the keys a
// present verify section leaves out (docs/verify.md says what each
// buys). The rate bounds its cost (both sides are read): 3,000 a second
// is under a percent of a core, and verifies copies of up to 1,500
// messages a second as they come, each within about interval + 2/3 of
// it (the measurements: docs/benchmark.md, History).
const (
	DefaultVerifyInterval = 3 * time.Second
	DefaultVerifyRate     = 3000
)

// Default memory budgets of the entry path (sidecar.receive_budget,
// sidecar.send_budget, sidecar.readback_budget), each split evenly among
// the target clusters of the process; see docs/guarantees.md, Memory.
const (
	DefaultReceiveBudget  ByteSize = 512 << 20
	DefaultSendBudget     ByteSize = 256 << 20
	DefaultReadBackBudget ByteSize = 64 << 20
)

// MinBudgetShare is the least a memory budget may be, and the least each
// target cluster's share of it (the budget over the number of targets)
// should be, else [Config.Warnings] says so: a whole entry of the
// broker's default maximum message size (5 MiB) with room for its
// metadata, and one read-back reader's window (8 MiB). Below it every
// large entry passes alone, one at a time.
const MinBudgetShare ByteSize = 8 << 20

// Values of [Replication.OnRefused].
const (
	// OnRefusedStop stops a partition at a message its target refuses for
	// good (over the target's size limit, or invalid there), with one
	// error and partitions_stopped, until the operator acts: nothing is
	// lost in silence.
	OnRefusedStop = "stop"
	// OnRefusedSkip skips such a message (counted in
	// skipped_messages_total) and goes on: the operator accepts that the
	// target will not have it.
	OnRefusedSkip = "skip"
)

// Values of [Replication.DataPath]. There is one data path: the entry
// path forwards each stored entry whole (a batch stays one batch,
// compressed and encrypted payloads untouched), over the sidecar's own
// binary-protocol client. The field stays so that configs that name it
// keep working, and so that a later release may add a path again.
const (
	// DataPathEntries is the entry path, the default.
	DataPathEntries = "entries"
	// DataPathAuto is DataPathEntries' deprecated other name: [Parse]
	// reads it as DataPathEntries, with a warning ([WarnDeprecated]).
	// Accepted until the next release.
	DataPathAuto = "auto"
)

// dataPathMessages is the first version's data path (consume each message
// with pulsar-client-go, produce a copy), removed: Validate refuses it
// with an error that says what replaces it, rather than as an unknown
// value.
const dataPathMessages = "messages"

// Values of [Replication.Start].
const (
	// StartEarliest copies the backlog that already exists on the source
	// topic when the replication cursor is first created.
	StartEarliest = "earliest"
	// StartLatest copies only messages published after the cursor is
	// created.
	StartLatest = "latest"
)

// MinMarkerKeyLen is the shortest HMAC key [Config.MarkerKey] accepts: a
// shorter key would make forged markers cheap to brute-force.
const MinMarkerKeyLen = 16

// ErrEmpty is returned by [Parse], and wrapped by [Load], when the file holds no
// YAML document, or only comments, whitespace or a null document. An empty
// file is far more likely a failed deploy than a wish to replicate nothing.
var ErrEmpty = errors.New("config is empty")

// Config is the whole configuration file. Build it with [Parse] or [Load];
// a Config built in code must pass [Config.Validate] before use, because
// Validate also compiles the topic and subscription patterns.
type Config struct {
	Sidecar     Sidecar       `yaml:"sidecar"`
	Clusters    []Cluster     `yaml:"clusters"`
	Replication []Replication `yaml:"replication"`

	// deprecated are the warnings about deprecated names [Parse] read
	// (see renamed), for [Config.Warnings].
	deprecated []Warning
}

// Sidecar holds settings of the daemon itself rather than of any cluster.
type Sidecar struct {
	// Listen is the host:port of the metrics and health HTTP endpoint.
	Listen string `yaml:"listen"`
	// DiscoveryInterval is how often topic lists are re-read to pick up
	// topics created after start (for topic_patterns) and partition changes.
	DiscoveryInterval Duration `yaml:"discovery_interval"`
	// CursorPrefix names the durable subscriptions geo-sidecar reads source
	// topics with; see [Sidecar.CursorName].
	CursorPrefix string `yaml:"cursor_prefix"`
	// MarkerKeyFile and MarkerKeyEnv say where the HMAC key that signs
	// markers is kept; at most one may be set. See [Config.MarkerKey].
	MarkerKeyFile string `yaml:"marker_key_file"`
	MarkerKeyEnv  string `yaml:"marker_key_env"`
	// MarkerKeyAcceptedFile and MarkerKeyAcceptedEnv say where a second
	// key is kept that signatures are accepted under but nothing is signed
	// with: the other key of a rotation (see [Config.MarkerKeyAccepted]).
	// At most one may be set, and only with a marker key.
	MarkerKeyAcceptedFile string `yaml:"marker_key_accepted_file"`
	MarkerKeyAcceptedEnv  string `yaml:"marker_key_accepted_env"`
	// Snapshot tunes replicated-subscription snapshots.
	Snapshot Snapshot `yaml:"snapshot"`
	// AdminRate bounds the rate of the admin requests subscription sync
	// makes to each cluster.
	AdminRate AdminRate `yaml:"admin_rate"`
	// AdminBudget is AdminRate's deprecated old name: [Parse] moves it
	// into AdminRate, with a warning ([WarnDeprecated]), and leaves it
	// nil unless AdminRate was set too, which [Config.Validate] refuses.
	// Accepted until the next release.
	AdminBudget *AdminRate `yaml:"admin_budget"`
	// Positions is [PositionsAdmin] (the default) or [PositionsServlet]:
	// where subscription sync reads the local subscriptions' positions.
	// Empty (a Sidecar built in code) is read as PositionsAdmin.
	Positions string `yaml:"positions"`
	// adminRateKey is the key AdminRate was read from ("admin_rate" when
	// empty), so that errors name the key the file holds.
	adminRateKey string
	// ReceiveBudget bounds what the replication cursors hold (entries
	// received, not yet confirmed by the target) and may still be sent;
	// SendBudget what the entry path holds in flight (sent, not yet
	// confirmed); ReadBackBudget what the read-backs of the remote
	// partitions hold. Each is split evenly among the target clusters of
	// the process; each must be at least [MinBudgetShare], and each
	// target's share should be (else a warning). Together, plus about 100 MiB for the process
	// itself, they are what the sidecar's memory limit must hold.
	ReceiveBudget  ByteSize `yaml:"receive_budget"`
	SendBudget     ByteSize `yaml:"send_budget"`
	ReadBackBudget ByteSize `yaml:"readback_budget"`
	// Verify, when present, runs the continuous verifier: each pair's
	// copies checked against their sources as they are made (metrics,
	// alerts). nil (the section left out): off.
	Verify *Verify `yaml:"verify"`
}

// Verify tunes the continuous verifier (docs/verify.md). It reads both
// sides of every partition the process copies and is active for, with
// non-durable readers of its own, never a replication cursor.
type Verify struct {
	// Interval is how often each partition's walk starts again from
	// where the last one stopped: the verified-through age is about this
	// plus the walk's length.
	Interval Duration `yaml:"interval"`
	// MaxMessagesPerSecond bounds what the verifier reads, both sides
	// together, all pairs of the process together: its CPU and read
	// cost. It verifies copies of up to half this rate as they come.
	MaxMessagesPerSecond float64 `yaml:"max_messages_per_second"`
}

// verifyFields has Verify's fields but not its UnmarshalYAML.
type verifyFields Verify

// UnmarshalYAML fills the defaults of a present verify section before
// decoding; see [Cluster.UnmarshalYAML] for why it uses the callback
// form. `verify: {}` runs the verifier with the defaults.
func (v *Verify) UnmarshalYAML(unmarshal func(any) error) error {
	f := verifyFields{Interval: Duration{DefaultVerifyInterval}, MaxMessagesPerSecond: DefaultVerifyRate}
	err := unmarshal(&f)
	*v = Verify(f)
	return err
}

// AdminRate is the token bucket of admin requests that subscription
// sync may make to one cluster (the stats readings, the position reads,
// the backlogs): every cluster gets its own, shared by all its
// partitions, and follows wait in it most behind first. Discovery, the
// status command and the data path's read-back are outside it. A low
// rate only makes subscriptions follow later (more redelivered after a
// failover), never lose a message.
type AdminRate struct {
	// RequestsPerSecond is the steady rate per cluster.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Burst is how many may go at once after a quiet spell.
	Burst int `yaml:"burst"`
}

// adminRateFields has AdminRate's fields but not its UnmarshalYAML.
type adminRateFields AdminRate

// UnmarshalYAML fills the defaults of a present section before decoding,
// so that a section that sets one key keeps the other's default under
// either name (admin_rate, or admin_budget, which decodes into a new
// AdminRate); see [Cluster.UnmarshalYAML] for the callback form.
func (a *AdminRate) UnmarshalYAML(unmarshal func(any) error) error {
	f := adminRateFields{RequestsPerSecond: DefaultAdminRate, Burst: DefaultAdminBurst}
	err := unmarshal(&f)
	*a = AdminRate(f)
	return err
}

// Snapshot tunes the snapshots that let subscription positions be carried
// across clusters.
type Snapshot struct {
	// Interval is how often a snapshot is started.
	Interval Duration `yaml:"interval"`
	// Timeout is how long a snapshot may wait for answers from every remote
	// before the next one starts in its place (a late answer still
	// completes it within 10 timeouts: a lagging copy forwards requests
	// and answers late); it must exceed Interval, or no snapshot could
	// finish before the next one starts.
	Timeout Duration `yaml:"timeout"`
	// CacheSize is how many completed snapshots are kept per topic.
	CacheSize int `yaml:"cache_size"`
	// HistoryEntries bounds the start-up re-read of each partition's
	// history (snapshot markers, third-origin watermarks): about this many
	// entries before the newest, and around each tracked subscription's
	// position. Cost at start grows with it; a snapshot that falls outside
	// only makes a subscription follow later, never lose a message.
	HistoryEntries int64 `yaml:"history_entries"`
}

// Cluster is one Pulsar cluster geo-sidecar reads from or writes to.
type Cluster struct {
	// Name identifies the cluster in replication entries, cursor names and
	// metric labels.
	Name string `yaml:"name"`
	// ServiceURL is the binary-protocol URL (pulsar:// or pulsar+ssl://);
	// a comma-separated host list is allowed, as the Pulsar client allows it.
	ServiceURL string `yaml:"service_url"`
	// AdminURL is the REST admin URL (http:// or https://).
	AdminURL string `yaml:"admin_url"`
	// Auth says where to find credentials; empty means none.
	Auth Auth `yaml:"auth"`
	// MaxPendingMessages bounds each producer's send queue towards this
	// cluster, which bounds memory when the cluster is slow.
	MaxPendingMessages int `yaml:"max_pending_messages"`
	// KeepAlive bounds how long a binary-protocol connection to this
	// cluster may stay silent before it is closed and its producers and
	// consumers reconnect (pings go every half of it, so a healthy broker
	// always answers in time). It is what notices a half-open link (a
	// NAT or firewall that dropped the connection's state, where no close
	// ever arrives); shorter notices sooner, at the price of closing
	// connections to a broker that stalls longer (a long GC pause).
	KeepAlive Duration `yaml:"keep_alive"`
}

// clusterFields has Cluster's fields but not its UnmarshalYAML, so decoding
// into it does not recurse.
type clusterFields Cluster

// UnmarshalYAML fills per-cluster defaults before decoding. Defaults of list
// elements cannot be pre-filled by [Parse], since the elements do not exist
// until the list is decoded. It uses the callback form on purpose: yaml.v3
// keeps KnownFields for the callback, but not for [yaml.Node.Decode].
func (c *Cluster) UnmarshalYAML(unmarshal func(any) error) error {
	f := clusterFields{MaxPendingMessages: DefaultMaxPendingMessages, KeepAlive: Duration{DefaultKeepAlive}}
	err := unmarshal(&f)
	*c = Cluster(f)
	return err
}

// Auth says where a cluster's credentials are. It holds file names and
// variable names, never the secrets, so a Config can be logged.
type Auth struct {
	// TokenFile is a file holding a JWT; surrounding whitespace is ignored.
	TokenFile string `yaml:"token_file"`
	// TokenEnv names an environment variable holding a JWT.
	TokenEnv string `yaml:"token_env"`
	// TLSTrustCertsFile is a PEM bundle to trust for pulsar+ssl:// and
	// https:// connections, instead of the system roots.
	TLSTrustCertsFile string `yaml:"tls_trust_certs_file"`
	// TLSCertFile and TLSKeyFile are a client certificate and its private
	// key (PEM) for TLS authentication, the alternative to a token: the
	// broker takes the certificate's common name as the role. Both or
	// neither; not together with a token; only over pulsar+ssl:// and
	// https://. They are read at each new connection, so renewed files are
	// used without a restart.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
}

// HasToken reports whether a token is configured (not whether it can be
// read).
func (a Auth) HasToken() bool { return a.TokenFile != "" || a.TokenEnv != "" }

// TokenSource names where the token is looked for, for logs and errors:
// `file "/etc/geo/east.token"` or `environment variable "EAST_TOKEN"`, or ""
// when there is no token. Never the token itself.
func (a Auth) TokenSource() string {
	switch {
	case a.TokenFile != "":
		return fmt.Sprintf("file %q", a.TokenFile)
	case a.TokenEnv != "":
		return fmt.Sprintf("environment variable %q", a.TokenEnv)
	}
	return ""
}

// Token returns the cluster's auth token, or "" with a nil error when no
// token is configured. It reads the file or variable on each call, so a
// token file that is replaced (a short-lived token renewed by an agent) is
// picked up without a restart: the replicator's clients call it for every
// new connection, when the broker challenges an expiring token, and before
// admin calls. Surrounding whitespace is dropped, and an empty token is an
// error. Errors name the file or variable, never the token.
func (a Auth) Token() (string, error) {
	switch {
	case a.TokenFile != "":
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			// *fs.PathError already names the file.
			return "", fmt.Errorf("read token file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %q is empty", a.TokenFile)
		}
		return tok, nil
	case a.TokenEnv != "":
		v, ok := os.LookupEnv(a.TokenEnv)
		if !ok {
			return "", fmt.Errorf("token environment variable %q is not set", a.TokenEnv)
		}
		tok := strings.TrimSpace(v)
		if tok == "" {
			return "", fmt.Errorf("token environment variable %q is empty", a.TokenEnv)
		}
		return tok, nil
	}
	return "", nil
}

// Replication copies the topics of one namespace from a source cluster to
// one or more target clusters, where the namespace has the same name.
type Replication struct {
	// Source names the cluster to read from.
	Source string `yaml:"source"`
	// Namespace is "tenant/namespace" on the source and on every target.
	Namespace string `yaml:"namespace"`
	// Topics are short topic names (no "persistent://", no tenant or
	// namespace) copied whether or not they match a pattern.
	Topics []string `yaml:"topics"`
	// TopicPatterns are Go regular expressions matched against the whole
	// short topic name, as if written ^(?:pattern)$, so "orders" does not
	// also match "orders-dlq".
	TopicPatterns []string `yaml:"topic_patterns"`
	// Targets name the clusters to write to.
	Targets []string `yaml:"targets"`
	// Start is [StartEarliest] or [StartLatest]; it only matters when the
	// replication cursor does not exist yet.
	Start string `yaml:"start"`
	// OnRefused is [OnRefusedStop] (the default) or [OnRefusedSkip].
	OnRefused string `yaml:"on_refused"`
	// RateLimit caps the copy rate per topic and target.
	RateLimit RateLimit `yaml:"rate_limit"`
	// Subscriptions and SubscriptionPatterns select the source
	// subscriptions whose positions are kept in step on the targets;
	// patterns are anchored like TopicPatterns.
	Subscriptions        []string `yaml:"subscriptions"`
	SubscriptionPatterns []string `yaml:"subscription_patterns"`
	// DataPath is [DataPathEntries] (the default), the entry path; its
	// deprecated other name [DataPathAuto] is read as it.
	DataPath string `yaml:"data_path"`

	// topicRE and subRE are the compiled, anchored patterns, index for
	// index. They are slices of pointers so that copying a Replication by
	// value (as range loops and the replicator do) keeps them; *regexp.Regexp
	// is safe for concurrent use.
	topicRE []*regexp.Regexp
	subRE   []*regexp.Regexp
}

// replicationFields has Replication's fields but not its UnmarshalYAML.
type replicationFields Replication

// UnmarshalYAML fills per-entry defaults before decoding; see
// [Cluster.UnmarshalYAML] for why it exists and uses the callback form.
func (r *Replication) UnmarshalYAML(unmarshal func(any) error) error {
	f := replicationFields{Start: DefaultStart, DataPath: DefaultDataPath, OnRefused: DefaultOnRefused}
	err := unmarshal(&f)
	*r = Replication(f)
	return err
}

// RateLimit caps throughput; 0 means unlimited.
type RateLimit struct {
	MessagesPerSecond float64 `yaml:"messages_per_second"`
	BytesPerSecond    float64 `yaml:"bytes_per_second"`
}

// MatchesTopic reports whether the short topic name is listed in Topics or
// matches one of TopicPatterns as a whole.
func (r Replication) MatchesTopic(short string) bool {
	return slices.Contains(r.Topics, short) || matchAny(r.topicRE, r.TopicPatterns, short)
}

// MatchesSubscription reports whether the subscription name is listed in
// Subscriptions or matches one of SubscriptionPatterns as a whole.
func (r Replication) MatchesSubscription(name string) bool {
	return slices.Contains(r.Subscriptions, name) || matchAny(r.subRE, r.SubscriptionPatterns, name)
}

// matchAny matches s against the compiled patterns, or, if they were not
// compiled (a Replication built in code and never validated), compiles them
// on the spot so the answer does not depend on whether Validate ran. Invalid
// patterns match nothing.
func matchAny(compiled []*regexp.Regexp, patterns []string, s string) bool {
	if len(compiled) == len(patterns) {
		for _, re := range compiled {
			if re != nil && re.MatchString(s) {
				return true
			}
		}
		return false
	}
	for _, p := range patterns {
		if re, err := compileAnchored(p); err == nil && re.MatchString(s) {
			return true
		}
	}
	return false
}

// compileAnchored compiles p so that it must match the whole string. The
// error, if any, is about p as written, not about the wrapped form.
func compileAnchored(p string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(p); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + p + `)$`)
}

// Cluster returns the cluster with the given name.
func (c *Config) Cluster(name string) (Cluster, bool) {
	for _, cl := range c.Clusters {
		if cl.Name == name {
			return cl, true
		}
	}
	return Cluster{}, false
}

// CursorName returns the durable subscription geo-sidecar uses on a source
// topic to track what it has copied to the remote cluster. One cursor per
// remote lets a slow or down target fall behind without holding back the
// others.
func (s Sidecar) CursorName(remote string) string {
	return s.CursorPrefix + "." + remote
}

// MarkerKey returns the HMAC key for markers, or nil and a nil error when
// neither marker_key_file nor marker_key_env is set. A key file is used as raw
// bytes, minus one trailing newline ("\n" or "\r\n") that editors add; an
// environment variable is used as is. It fails if the key is shorter than
// [MinMarkerKeyLen] bytes. Errors name the file or variable, never the key.
func (c *Config) MarkerKey() ([]byte, error) {
	return readKey("marker key", c.Sidecar.MarkerKeyFile, c.Sidecar.MarkerKeyEnv)
}

// MarkerKeyAccepted returns the key that signatures are also accepted
// under (marker_key_accepted_file or marker_key_accepted_env), read as
// [Config.MarkerKey] reads the marker key; nil and a nil error when
// neither is set.
func (c *Config) MarkerKeyAccepted() ([]byte, error) {
	return readKey("accepted marker key", c.Sidecar.MarkerKeyAcceptedFile, c.Sidecar.MarkerKeyAcceptedEnv)
}

// readKey reads what a key file or variable holds; what names the key in
// errors.
func readKey(what, file, env string) ([]byte, error) {
	var (
		key  []byte
		from string
	)
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read %s file: %w", what, err)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		b = bytes.TrimSuffix(b, []byte("\r"))
		key, from = b, fmt.Sprintf("file %q", file)
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return nil, fmt.Errorf("%s environment variable %q is not set", what, env)
		}
		key, from = []byte(v), fmt.Sprintf("environment variable %q", env)
	default:
		return nil, nil
	}
	if len(key) < MinMarkerKeyLen {
		return nil, fmt.Errorf("%s from %s is %d bytes, need at least %d", what, from, len(key), MinMarkerKeyLen)
	}
	return key, nil
}

// Load reads and parses the file at path; see [Parse]. Errors name the path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse fills defaults, decodes data strictly (unknown keys and wrong types
// are errors) and validates the result. When decoding fails, only the decode
// errors are returned: validating a half-decoded file would add misleading
// follow-on errors. The error joins one error per problem, one per line.
func Parse(data []byte) (*Config, error) {
	// First pass: syntax, emptiness and the node tree used to name paths in
	// yaml.v3's type errors. yaml.v3 keeps KnownFields only for its own
	// Decoder, so the typed decode below is a second pass over the bytes.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ErrEmpty
		}
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, ErrEmpty
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
		return nil, fmt.Errorf("line %d: a second YAML document; put the whole config in one document", extra.Line)
	}

	cfg := &Config{Sidecar: Sidecar{
		Listen:            DefaultListen,
		DiscoveryInterval: Duration{DefaultDiscoveryInterval},
		CursorPrefix:      DefaultCursorPrefix,
		ReceiveBudget:     DefaultReceiveBudget,
		SendBudget:        DefaultSendBudget,
		ReadBackBudget:    DefaultReadBackBudget,
		Snapshot: Snapshot{
			Interval:       Duration{DefaultSnapshotInterval},
			Timeout:        Duration{DefaultSnapshotTimeout},
			CacheSize:      DefaultSnapshotCacheSize,
			HistoryEntries: DefaultHistoryEntries,
		},
		AdminRate: AdminRate{RequestsPerSecond: DefaultAdminRate, Burst: DefaultAdminBurst},
		Positions: DefaultPositions,
	}}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, decodeErrors(&doc, te)
		}
		return nil, fmt.Errorf("decode config: %w", err)
	}
	cfg.renamed(&doc)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Deprecated names, each accepted until the release after the one that
// renamed it: the file's value is read under the new name and
// [Config.Warnings] names both.
const (
	oldAdminRateKey = "admin_budget" // sidecar.admin_rate
)

// renamed reads the values set under deprecated names (see
// [Sidecar.AdminBudget], [DataPathAuto]) as their new names, and notes a
// warning naming the old and the new for each. A key set under both names
// is left for Validate to refuse. doc is the file's node tree, to tell a
// key that is present from one that holds its default.
func (c *Config) renamed(doc *yaml.Node) {
	s := &c.Sidecar
	if s.AdminBudget != nil {
		c.deprecated = append(c.deprecated, Warning{Summary: WarnDeprecated, Old: "sidecar.admin_budget", New: "sidecar.admin_rate",
			Detail: "sidecar.admin_budget: renamed sidecar.admin_rate (a rate: requests per second and a burst); the old name is accepted until the next release"})
		if !hasKey(doc, "sidecar", "admin_rate") {
			s.AdminRate, s.AdminBudget, s.adminRateKey = *s.AdminBudget, nil, oldAdminRateKey
		}
	}
	for i := range c.Replication {
		if r := &c.Replication[i]; r.DataPath == DataPathAuto {
			path := fmt.Sprintf("replication[%d].data_path", i)
			c.deprecated = append(c.deprecated, Warning{Summary: WarnDeprecated, Old: path + "=" + DataPathAuto, New: path + "=" + DataPathEntries,
				Detail: fmt.Sprintf("%s: %q is the same as %q, the default; write %q or leave data_path out (%q is accepted until the next release)",
					path, DataPathAuto, DataPathEntries, DataPathEntries, DataPathAuto)})
			r.DataPath = DataPathEntries
		}
	}
}

// hasKey reports whether the document's mapping holds the key at path.
func hasKey(doc *yaml.Node, path ...string) bool {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return true
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}
