package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MinKeepAlive and MaxKeepAlive bound clusters[].keep_alive: below a
// second, pings would cost more than they tell and a busy broker would be
// taken for a dead link; above ten minutes, a half-open link would stall
// replication for longer than any operator waits.
const (
	MinKeepAlive = time.Second
	MaxKeepAlive = 10 * time.Minute
)

// MaxDiscoveryInterval bounds sidecar.discovery_interval: topics created
// after start are not replicated until the next discovery, and a longer gap
// than this is more likely a typo ("30h" for "30s") than a wish.
const MaxDiscoveryInterval = 30 * time.Minute

var (
	reClusterName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	reNamePart    = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	reEnvName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// problems collects validation errors so all of them are reported at once.
type problems []error

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Validate checks c and reports every problem found, joined, one per line,
// each naming its path and value. It also compiles the topic and
// subscription patterns that [Replication.MatchesTopic] and
// [Replication.MatchesSubscription] use, so a Config built in code must be
// validated before use. It does not fill defaults (that is Parse's job) and
// does not touch the files or variables that hold secrets.
func (c *Config) Validate() error {
	var p problems
	c.validateSidecar(&p)
	c.validateBudgets(&p)
	clusters := c.validateClusters(&p)
	c.validateReplication(&p, clusters)
	return errors.Join(p...)
}

func (c *Config) validateSidecar(p *problems) {
	s := c.Sidecar
	if s.Listen == "" {
		p.add("sidecar.listen", "missing")
	} else if _, port, err := net.SplitHostPort(s.Listen); err != nil {
		p.add("sidecar.listen", "%q is not host:port", s.Listen)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		p.add("sidecar.listen", "%q: port %q is not a number from 0 to 65535", s.Listen, port)
	}

	if d := s.DiscoveryInterval.Duration; d <= 0 || d > MaxDiscoveryInterval {
		p.add("sidecar.discovery_interval", "%s must be more than 0 and at most %s", d, MaxDiscoveryInterval)
	}

	switch {
	case s.CursorPrefix == "":
		p.add("sidecar.cursor_prefix", "missing")
	case !reNamePart.MatchString(s.CursorPrefix):
		p.add("sidecar.cursor_prefix", "%q may only contain letters, digits, '_', '-' and '.'", s.CursorPrefix)
	case IsPulsarCursor(s.OwnCursorPrefix()):
		// "pulsar" alone would name the cursors "pulsar.<remote>".
		p.add("sidecar.cursor_prefix", "%q makes cursors start with %q, which Pulsar reserves for its own", s.CursorPrefix, PulsarCursorPrefix)
	}

	if s.MarkerKeyFile != "" && s.MarkerKeyEnv != "" {
		p.add("sidecar", "marker_key_file (%q) and marker_key_env (%q) are both set; use one", s.MarkerKeyFile, s.MarkerKeyEnv)
	}
	if s.MarkerKeyEnv != "" && !reEnvName.MatchString(s.MarkerKeyEnv) {
		p.add("sidecar.marker_key_env", "%q is not an environment variable name", s.MarkerKeyEnv)
	}
	if s.MarkerKeyAcceptedFile != "" && s.MarkerKeyAcceptedEnv != "" {
		p.add("sidecar", "marker_key_accepted_file (%q) and marker_key_accepted_env (%q) are both set; use one", s.MarkerKeyAcceptedFile, s.MarkerKeyAcceptedEnv)
	}
	if s.MarkerKeyAcceptedEnv != "" && !reEnvName.MatchString(s.MarkerKeyAcceptedEnv) {
		p.add("sidecar.marker_key_accepted_env", "%q is not an environment variable name", s.MarkerKeyAcceptedEnv)
	}
	if (s.MarkerKeyAcceptedFile != "" || s.MarkerKeyAcceptedEnv != "") && s.MarkerKeyFile == "" && s.MarkerKeyEnv == "" {
		field, v := "marker_key_accepted_file", s.MarkerKeyAcceptedFile
		if v == "" {
			field, v = "marker_key_accepted_env", s.MarkerKeyAcceptedEnv
		}
		p.add("sidecar."+field, "%q is set without a marker key (marker_key_file or marker_key_env): an accepted key only verifies, something must sign", v)
	}
	switch {
	case s.MarkerKeyAcceptedFile != "" && s.MarkerKeyAcceptedFile == s.MarkerKeyFile:
		p.add("sidecar.marker_key_accepted_file", "%q is the marker key file itself", s.MarkerKeyAcceptedFile)
	case s.MarkerKeyAcceptedEnv != "" && s.MarkerKeyAcceptedEnv == s.MarkerKeyEnv:
		p.add("sidecar.marker_key_accepted_env", "%q is the marker key variable itself", s.MarkerKeyAcceptedEnv)
	}

	sn := s.Snapshot
	if sn.Interval.Duration <= 0 {
		p.add("sidecar.snapshot.interval", "%s must be more than 0", sn.Interval)
	}
	if sn.Timeout.Duration <= sn.Interval.Duration {
		p.add("sidecar.snapshot.timeout", "%s must be more than the interval (%s)", sn.Timeout, sn.Interval)
	}
	if sn.CacheSize < 1 || sn.CacheSize > 1000 {
		p.add("sidecar.snapshot.cache_size", "%d must be from 1 to 1000", sn.CacheSize)
	}
	if sn.HistoryEntries < 100 {
		p.add("sidecar.snapshot.history_entries", "%d must be at least 100", sn.HistoryEntries)
	}
	ar, arKey := s.AdminRate, "sidecar.admin_rate"
	if s.adminRateKey != "" {
		arKey = "sidecar." + s.adminRateKey
	}
	if ar.RequestsPerSecond <= 0 || ar.RequestsPerSecond > 100000 || math.IsNaN(ar.RequestsPerSecond) {
		p.add(arKey+".requests_per_second", "%v must be more than 0 and at most 100000", ar.RequestsPerSecond)
	}
	if ar.Burst < 1 || ar.Burst > 100000 {
		p.add(arKey+".burst", "%d must be from 1 to 100000", ar.Burst)
	}
	if s.Positions != PositionsAdmin && s.Positions != PositionsServlet && s.Positions != "" {
		p.add("sidecar.positions", "%q must be %q or %q", s.Positions, PositionsAdmin, PositionsServlet)
	}
	if s.AdminBudget != nil {
		p.add("sidecar.admin_budget", "the old name of sidecar.admin_rate, which is set too: keep admin_rate only")
	}
	if v := s.Verify; v != nil {
		if d := v.Interval.Duration; d < MinVerifyInterval || d > MaxVerifyInterval {
			p.add("sidecar.verify.interval", "%s must be from %s to %s", d, MinVerifyInterval, MaxVerifyInterval)
		}
		if r := v.MaxMessagesPerSecond; !(r >= MinVerifyRate && r <= MaxVerifyRate) {
			p.add("sidecar.verify.max_messages_per_second", "%v must be from %d to %d", r, MinVerifyRate, MaxVerifyRate)
		}
	}
}

// Bounds of sidecar.verify. Each walk opens readers on both sides of a
// partition: more often than every 100 ms is load on the brokers for
// nothing, and rarer than every 10 minutes leaves the age alert nothing
// to go by. Below 10 messages a second the verifier would never keep up
// with any copy; above a million it is not bounded at all (which
// costs about a core at full throughput).
const (
	MinVerifyInterval = 100 * time.Millisecond
	MaxVerifyInterval = 10 * time.Minute
	MinVerifyRate     = 10
	MaxVerifyRate     = 1_000_000
)

// validateBudgets checks the memory budgets against MinBudgetShare: a
// budget that could not hold one large entry for one target is refused.
// Each is split among the target clusters; a share below the floor still
// works (an entry larger than a share passes alone, one at a time) and is
// warned about (budgetShares).
func (c *Config) validateBudgets(p *problems) {
	for _, b := range c.budgets() {
		if b.v < MinBudgetShare {
			p.add("sidecar."+b.field, "%s is below %s, the least a budget may be: one whole entry of the broker's default maximum message size (5MiB) with room for its metadata, and one read-back reader's window", b.v, MinBudgetShare)
		}
	}
}

type budget struct {
	field string
	v     ByteSize
}

func (c *Config) budgets() []budget {
	return []budget{
		{"receive_budget", c.Sidecar.ReceiveBudget},
		{"send_budget", c.Sidecar.SendBudget},
		{"readback_budget", c.Sidecar.ReadBackBudget},
	}
}

// budgetShares warns about each budget whose share per target cluster is
// below MinBudgetShare, for a process that runs every entry of the file,
// where the shares are smallest (--cluster picks fewer targets).
func (c *Config) budgetShares(add func(summary, format string, args ...any)) {
	targets := map[string]bool{}
	for _, r := range c.Replication {
		for _, t := range r.Targets {
			targets[t] = true
		}
	}
	n := ByteSize(max(len(targets), 1))
	for _, b := range c.budgets() {
		if share := b.v / n; b.v >= MinBudgetShare && share < MinBudgetShare {
			add(WarnSmallBudget, "sidecar.%s: %s is %s for each of %d target clusters, below %s: an entry larger than a target's share passes alone, one at a time (set at least %s)",
				b.field, b.v, share.approx(), n, MinBudgetShare, MinBudgetShare*n)
		}
	}
}

// validateClusters checks the cluster list and returns the set of valid,
// unique names, for checking references to them.
func (c *Config) validateClusters(p *problems) map[string]bool {
	names := map[string]bool{}
	serviceURLs := map[string]string{} // service URL -> first cluster using it
	if len(c.Clusters) < 2 {
		p.add("clusters", "need at least 2 clusters to replicate between, got %d", len(c.Clusters))
	}
	for i, cl := range c.Clusters {
		path := fmt.Sprintf("clusters[%d]", i)
		switch {
		case cl.Name == "":
			p.add(path+".name", "missing")
		case !reClusterName.MatchString(cl.Name):
			p.add(path+".name", "%q may only contain letters, digits, '_' and '-'", cl.Name)
		case names[cl.Name]:
			p.add(path+".name", "duplicate cluster %q", cl.Name)
		default:
			names[cl.Name] = true
		}

		if checkURL(p, path+".service_url", cl.ServiceURL, "pulsar", "pulsar+ssl") {
			if first, dup := serviceURLs[cl.ServiceURL]; dup {
				// Replicating a cluster into itself would copy every
				// message back onto its own topic, forever.
				p.add(path+".service_url", "%q is also the service URL of cluster %q", cl.ServiceURL, first)
			} else {
				serviceURLs[cl.ServiceURL] = cl.Name
			}
		}
		checkURL(p, path+".admin_url", cl.AdminURL, "http", "https")

		a := cl.Auth
		if a.TokenFile != "" && a.TokenEnv != "" {
			p.add(path+".auth", "token_file (%q) and token_env (%q) are both set; use one", a.TokenFile, a.TokenEnv)
		}
		if a.TokenEnv != "" && !reEnvName.MatchString(a.TokenEnv) {
			p.add(path+".auth.token_env", "%q is not an environment variable name", a.TokenEnv)
		}
		switch {
		case (a.TLSCertFile == "") != (a.TLSKeyFile == ""):
			p.add(path+".auth", "tls_cert_file (%q) and tls_key_file (%q) go together; set both or neither", a.TLSCertFile, a.TLSKeyFile)
		case a.TLSCertFile != "" && a.HasToken():
			p.add(path+".auth", "tls_cert_file and a token (%s) are both set; authenticate with one", a.TokenSource())
		case a.TLSCertFile != "":
			// A client certificate is only presented in a TLS handshake:
			// over plaintext the cluster would see no credentials at all.
			if strings.HasPrefix(cl.ServiceURL, "pulsar://") {
				p.add(path+".service_url", "%q: tls_cert_file needs pulsar+ssl://", cl.ServiceURL)
			}
			if strings.HasPrefix(cl.AdminURL, "http://") {
				p.add(path+".admin_url", "%q: tls_cert_file needs https://", cl.AdminURL)
			}
		}

		if cl.MaxPendingMessages < 1 || cl.MaxPendingMessages > 100000 {
			p.add(path+".max_pending_messages", "%d must be from 1 to 100000", cl.MaxPendingMessages)
		}
		if d := cl.KeepAlive.Duration; d < MinKeepAlive || d > MaxKeepAlive {
			p.add(path+".keep_alive", "%s must be from %s to %s", d, MinKeepAlive, MaxKeepAlive)
		}
	}
	return names
}

// Warning is a setting that is allowed but unsafe or costly.
type Warning struct {
	// Summary says what kind of finding it is, the same words for every
	// finding of that kind: `run` logs it as the message.
	Summary string
	// Detail names the path and value, like the errors of
	// [Config.Validate], and what follows from them.
	Detail string
	// Old and New, for [WarnDeprecated], are the deprecated name read
	// and the name it was read as (paths, or path=value for a value).
	Old, New string
}

// The kinds of [Warning].
const (
	WarnReachable   = "HTTP endpoints reachable from other hosts"
	WarnCleartext   = "credentials would travel unencrypted"
	WarnNoMarkerKey = "without a marker key, copies on the target are not recognised"
	WarnSmallBudget = "a memory budget's share per target holds no large entry"
	WarnDeprecated  = "a deprecated config name was read under its new name"
)

// Warnings returns what is allowed but unsafe in c, one finding each: a
// token that would travel in clear text, over pulsar:// (at every
// connection and every re-authentication) or http:// (with every admin
// call), HTTP endpoints reachable from other hosts, the entry path
// without a marker key, and the deprecated key names and values read. `validate` prints them and `run` logs each once at
// start; they are not errors because a test bed, a network that encrypts
// below Pulsar or a container (whose loopback is its own) may want exactly
// that.
func (c *Config) Warnings() []Warning {
	var w []Warning
	add := func(summary, format string, args ...any) {
		w = append(w, Warning{Summary: summary, Detail: fmt.Sprintf(format, args...)})
	}
	if host, _, err := net.SplitHostPort(c.Sidecar.Listen); err == nil && !IsLoopback(host) {
		add(WarnReachable, "sidecar.listen: %q is reachable from other hosts; /metrics names every cluster, topic and subscription replicated (use 127.0.0.1 outside containers, or firewall the port)",
			c.Sidecar.Listen)
	}
	for i, cl := range c.Clusters {
		if !cl.Auth.HasToken() {
			continue
		}
		path := fmt.Sprintf("clusters[%d]", i)
		if strings.HasPrefix(cl.ServiceURL, "pulsar://") {
			add(WarnCleartext, "%s.service_url: %q is not encrypted; the token from %s would cross the network in clear text (use pulsar+ssl://)",
				path, cl.ServiceURL, cl.Auth.TokenSource())
		}
		if strings.HasPrefix(cl.AdminURL, "http://") {
			add(WarnCleartext, "%s.admin_url: %q is not encrypted; the token from %s would cross the network in clear text with every admin call (use https://)",
				path, cl.AdminURL, cl.Auth.TokenSource())
		}
	}
	c.budgetShares(add)
	w = append(w, c.deprecated...)
	if c.Sidecar.MarkerKeyFile == "" && c.Sidecar.MarkerKeyEnv == "" {
		for i := range c.Replication {
			add(WarnNoMarkerKey, "replication[%d]: the entry data path without a marker key (sidecar.marker_key_file or marker_key_env) recognises none of its copies on the target: whenever a partition's session starts again (a restart or crash, a takeover by another instance, a lost connection, a failed send) the entries it had in flight are copied again, with or without deduplication on the target (duplicates, not loss)", i)
		}
	}
	return w
}

// IsLoopback reports whether host (from host:port) listens on loopback
// only; "" and 0.0.0.0 listen everywhere.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkURL reports whether raw is a URL with one of the schemes and a host.
// URLs with credentials are refused (credentials belong in auth, where they
// are kept out of logs), and are redacted in the error.
func checkURL(p *problems, path, raw string, schemes ...string) bool {
	if raw == "" {
		p.add(path, "missing")
		return false
	}
	u, err := url.Parse(raw)
	if err != nil {
		shown := raw
		if strings.Contains(raw, "@") {
			shown = "(redacted)"
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL
		}
		p.add(path, "%q is not a URL: %v", shown, err)
		return false
	}
	if u.User != nil {
		p.add(path, "%q holds credentials; put them in auth instead", u.Redacted())
		return false
	}
	ok := false
	for _, s := range schemes {
		ok = ok || u.Scheme == s
	}
	if !ok {
		p.add(path, "%q must start with %s://", raw, strings.Join(schemes, ":// or "))
		return false
	}
	if u.Host == "" {
		p.add(path, "%q has no host", raw)
		return false
	}
	return true
}

func (c *Config) validateReplication(p *problems, clusters map[string]bool) {
	if len(c.Replication) == 0 {
		p.add("replication", "no entries; nothing would be replicated")
	}
	for i := range c.Replication {
		r := &c.Replication[i]
		path := fmt.Sprintf("replication[%d]", i)

		switch {
		case r.Source == "":
			p.add(path+".source", "missing")
		case !clusters[r.Source]:
			p.add(path+".source", "unknown cluster %q", r.Source)
		}

		if r.Namespace == "" {
			p.add(path+".namespace", "missing")
		} else if tenant, ns, ok := strings.Cut(r.Namespace, "/"); !ok || !reNamePart.MatchString(tenant) || !reNamePart.MatchString(ns) {
			p.add(path+".namespace", "%q is not \"tenant/namespace\" (each part letters, digits, '_', '-' or '.')", r.Namespace)
		}

		if len(r.Topics) == 0 && len(r.TopicPatterns) == 0 {
			p.add(path, "neither topics nor topic_patterns is set; nothing would be replicated")
		}
		seen := map[string]bool{}
		for j, t := range r.Topics {
			tp := fmt.Sprintf("%s.topics[%d]", path, j)
			switch {
			case t == "":
				p.add(tp, "empty topic name")
			case strings.Contains(t, "://") || strings.Contains(t, "/"):
				p.add(tp, "%q must be a short topic name, without \"persistent://\", tenant or namespace", t)
			case !printable(t):
				p.add(tp, "%q contains spaces or control characters", t)
			case seen[t]:
				p.add(tp, "duplicate topic %q", t)
			}
			seen[t] = true
		}
		r.topicRE = compilePatterns(p, path+".topic_patterns", r.TopicPatterns)

		if len(r.Targets) == 0 {
			p.add(path+".targets", "missing; name at least one cluster to copy to")
		}
		seenTarget := map[string]bool{}
		for j, t := range r.Targets {
			tp := fmt.Sprintf("%s.targets[%d]", path, j)
			switch {
			case t == "":
				p.add(tp, "empty cluster name")
			case t == r.Source:
				p.add(tp, "%q is the source cluster", t)
			case !clusters[t]:
				p.add(tp, "unknown cluster %q", t)
			case seenTarget[t]:
				p.add(tp, "duplicate target %q", t)
			}
			seenTarget[t] = true
		}

		if r.Start != StartEarliest && r.Start != StartLatest {
			p.add(path+".start", "%q must be %q or %q", r.Start, StartEarliest, StartLatest)
		}

		switch r.DataPath {
		case DataPathEntries, DataPathAuto, "":
		case dataPathMessages:
			p.add(path+".data_path", "%q was removed; the entry path (%q, the default) replaces it: remove data_path or set it to %q",
				r.DataPath, DataPathEntries, DataPathEntries)
		default:
			p.add(path+".data_path", "%q must be %q (the default; the only data path)", r.DataPath, DataPathEntries)
		}

		if r.OnRefused != OnRefusedStop && r.OnRefused != OnRefusedSkip && r.OnRefused != "" {
			p.add(path+".on_refused", "%q must be %q or %q", r.OnRefused, OnRefusedStop, OnRefusedSkip)
		}

		checkRate(p, path+".rate_limit.messages_per_second", r.RateLimit.MessagesPerSecond)
		checkRate(p, path+".rate_limit.bytes_per_second", r.RateLimit.BytesPerSecond)

		seenSub := map[string]bool{}
		for j, s := range r.Subscriptions {
			sp := fmt.Sprintf("%s.subscriptions[%d]", path, j)
			switch {
			case s == "":
				p.add(sp, "empty subscription name")
			case !printable(s):
				p.add(sp, "%q contains spaces or control characters", s)
			case c.Sidecar.IsOwnCursor(s):
				p.add(sp, "%q is one of geo-sidecar's own cursors (prefix %q)", s, c.Sidecar.OwnCursorPrefix())
			case IsPulsarCursor(s):
				p.add(sp, "%q is one of Pulsar's own cursors (prefix %q)", s, PulsarCursorPrefix)
			case seenSub[s]:
				p.add(sp, "duplicate subscription %q", s)
			}
			seenSub[s] = true
		}
		r.subRE = compilePatterns(p, path+".subscription_patterns", r.SubscriptionPatterns)
		if (len(r.Subscriptions) > 0 || len(r.SubscriptionPatterns) > 0) &&
			c.Sidecar.MarkerKeyFile == "" && c.Sidecar.MarkerKeyEnv == "" {
			p.add(path, "subscriptions to keep in step need a marker key (sidecar.marker_key_file or sidecar.marker_key_env): unsigned markers could be forged")
		}
	}
	c.checkOverlap(p)
}

// checkOverlap reports a topic that two entries would copy from the same
// source to the same target. Both would read it with the same cursor
// (see [Sidecar.CursorName]), each acknowledging what the other has not
// copied. Overlap between two patterns cannot be decided in general and is
// not checked; an explicit topic matched by another entry is.
func (c *Config) checkOverlap(p *problems) {
	for i := range c.Replication {
		a := c.Replication[i]
		for j := i + 1; j < len(c.Replication); j++ {
			b := c.Replication[j]
			if a.Source != b.Source || a.Namespace != b.Namespace {
				continue
			}
			target := sharedTarget(a.Targets, b.Targets)
			if target == "" {
				continue
			}
			reported := map[string]bool{}
			for _, t := range append(append([]string(nil), a.Topics...), b.Topics...) {
				if reported[t] || !a.MatchesTopic(t) || !b.MatchesTopic(t) {
					continue
				}
				reported[t] = true
				p.add(fmt.Sprintf("replication[%d]", j), "topic %q of %s is already copied from %q to %q by replication[%d]", t, a.Namespace, a.Source, target, i)
			}
		}
	}
}

func sharedTarget(a, b []string) string {
	for _, x := range a {
		for _, y := range b {
			if x == y && x != "" {
				return x
			}
		}
	}
	return ""
}

// compilePatterns compiles each pattern anchored at both ends and returns
// them index for index; a pattern that does not compile is reported and left
// nil, so it matches nothing.
func compilePatterns(p *problems, path string, patterns []string) []*regexp.Regexp {
	if len(patterns) == 0 {
		return nil
	}
	res := make([]*regexp.Regexp, len(patterns))
	for j, pat := range patterns {
		pp := fmt.Sprintf("%s[%d]", path, j)
		if pat == "" {
			p.add(pp, "empty pattern")
			continue
		}
		re, err := compileAnchored(pat)
		if err != nil {
			reason := err.Error()
			var serr *syntax.Error
			if errors.As(err, &serr) {
				reason = serr.Code.String() // the whole error repeats the pattern
				if serr.Expr != "" && serr.Expr != pat {
					reason += " in " + strconv.Quote(serr.Expr)
				}
			}
			p.add(pp, "%q is not a valid regular expression: %s", pat, reason)
			continue
		}
		res[j] = re
	}
	return res
}

func checkRate(p *problems, path string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		p.add(path, "%v must be 0 (unlimited) or more", v)
	}
}

// printable reports whether s is valid UTF-8 without spaces or control
// characters, which Pulsar names do not contain in practice and which would
// be invisible in logs and metric labels.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
