package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
)

// opsRequirement is one line of deploy/tools/promtool/promqlnames' output:
// at least one of Metrics carries each of Labels.
type opsRequirement struct {
	Where   string   `json:"where"`
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
	Labels  []string `json:"labels"`
}

// TestOpsKitMetricNames: every metric and label that the Grafana dashboard
// (deploy/grafana) and the alert rules (deploy/prometheus) use is one that
// a running sidecar exports, so that a renamed metric or label cannot
// silently blank a panel or disarm an alert. The expressions are parsed
// with Prometheus's own PromQL parser (promqlnames, built by
// deploy/tools/tool.sh); the names are compared with a scrape of a sidecar
// that has replicated two namespaces, kept a subscription in step both
// ways and skipped a forged marker. A metric without a series in
// that run (one that counts failures this test does not cause) is checked
// against the sidecar's own declarations instead, and named in the log.
func TestOpsKitMetricNames(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	reqs := opsRequirements(t, root)

	ns := NewNamespace(t, "east", "west")
	entryNS := NewNamespace(t, "east", "west")
	entries := syncEntries(ns, "billing", "east", "west") +
		fmt.Sprintf("  - source: east\n    namespace: %s\n    %s\n    targets: [west]\n", entryNS, all)
	s := StartSidecar(t, []string{"east", "west"}, entries)
	east, west := Client(t, "east"), Client(t, "west")

	// Replicated subscription both ways: billing exists on both sides and
	// is consumed in east while messages keep arriving, so snapshots
	// complete and updates move it in west. A forged marker (wrong key) is
	// skipped and counted.
	topic := Topic(ns, "orders")
	_ = Consume(t, west, topic, "billing", 0, time.Second)
	_ = Consume(t, east, topic, "billing", 0, time.Second)
	ProduceN(t, east, Topic(entryNS, "events"), "x", 200)
	forged, err := marker.Encode(marker.Marker{Kind: marker.KindUpdate, From: "east", To: "west",
		Topic: topic, Subscription: "billing", Remote: marker.Position{Ledger: 1 << 40}}, []byte("not-the-key-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	ProduceWith(t, east, pulsar.ProducerOptions{Topic: topic, DisableBatching: true},
		&pulsar.ProducerMessage{Payload: forged, Properties: marker.Properties(marker.KindUpdate)})

	round := 0
	Eventually(t, 2*time.Minute, func() error {
		round++
		ProduceN(t, east, topic, fmt.Sprintf("e%d-", round), 20)
		ProduceN(t, west, topic, fmt.Sprintf("w%d-", round), 5)
		_ = Consume(t, east, topic, "billing", 20, 2*time.Second)
		for _, c := range []struct {
			name  string
			match []string
			min   float64
		}{
			{"geo_sidecar_replicated_messages_total", []string{`source="east"`}, 300},
			{"geo_sidecar_replicated_messages_total", []string{`source="west"`}, 10},
			{"geo_sidecar_snapshots_completed_total", nil, 1},
			{"geo_sidecar_subscription_updates_sent_total", nil, 1},
			{"geo_sidecar_markers_invalid_total", nil, 1},
		} {
			if v := s.Metric(c.name, c.match...); v < c.min {
				return fmt.Errorf("%s%v = %v, waiting for %v", c.name, c.match, v, c.min)
			}
		}
		return nil
	})
	// Stats (backlog, oldest age, subscription lag) are refreshed on their
	// own clock; wait for their series.
	Eventually(t, 90*time.Second, func() error {
		fams := scrapeFamilies(t, s.Listen)
		for _, n := range []string{"geo_sidecar_backlog_messages", "geo_sidecar_oldest_unreplicated_age_seconds",
			"geo_sidecar_subscription_lag_entries", "geo_sidecar_subscription_lag_seconds", "geo_sidecar_snapshot_round_trip_seconds_bucket"} {
			if _, ok := fams[n]; !ok {
				return fmt.Errorf("no series of %s yet", n)
			}
		}
		return nil
	})

	live := scrapeFamilies(t, s.Listen)
	declared := declaredFamilies(t, root)
	var fromDecl []string
	labelsOf := func(metric string) (map[string]bool, bool) {
		if ls, ok := live[metric]; ok {
			return ls, true
		}
		if ls, ok := declared[metric]; ok {
			fromDecl = append(fromDecl, metric)
			return ls, true
		}
		return nil, false
	}
	// Labels every series has once Prometheus scrapes it (target labels).
	target := map[string]bool{"job": true, "instance": true}
	used := map[string]bool{}
	for _, r := range reqs {
		union := map[string]bool{}
		for _, m := range r.Metrics {
			used[m] = true
			if m == "up" { // made by Prometheus for each target
				continue
			}
			ls, ok := labelsOf(m)
			if !ok {
				t.Errorf("%s: metric %s is not exported by the sidecar\n  expr: %s", r.Where, m, r.Expr)
				continue
			}
			for l := range ls {
				union[l] = true
			}
		}
		for _, l := range r.Labels {
			if !target[l] && !union[l] {
				t.Errorf("%s: label %q is on none of %v (exported labels: %v)\n  expr: %s", r.Where, l, r.Metrics, keys(union), r.Expr)
			}
		}
	}
	sort.Strings(fromDecl)
	fromDecl = compactStrings(fromDecl)
	t.Logf("%d requirements, %d metrics used; checked against the declarations only (no series in this run): %v", len(reqs), len(used), fromDecl)
	var unused []string
	for m := range live {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(m, "geo_sidecar_") && !used[m] && !used[base+"_bucket"] {
			unused = append(unused, m)
		}
	}
	sort.Strings(unused)
	t.Logf("exported but on no panel or alert: %v", unused)
}

// opsRequirements builds promqlnames (deploy/tools/tool.sh caches it) and
// runs it on the alert rules and the dashboard.
func opsRequirements(t *testing.T, root string) []opsRequirement {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "deploy", "tools", "tool.sh"), "promqlnames").Output()
	if err != nil {
		t.Fatalf("deploy/tools/tool.sh promqlnames: %v\n%s", err, stderrOf(err))
	}
	tool := strings.TrimSpace(string(out))
	cmd := exec.Command(tool, filepath.Join(root, "deploy", "prometheus", "alerts.yaml"), filepath.Join(root, "deploy", "grafana", "geo-sidecar.json"))
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("promqlnames: %v\n%s", err, stderrOf(err))
	}
	var reqs []opsRequirement
	if err := json.Unmarshal(out, &reqs); err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 50 {
		t.Fatalf("only %d requirements from the alerts and the dashboard: promqlnames found no expressions?", len(reqs))
	}
	return reqs
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// scrapeFamilies reads /metrics and returns each sample name with the
// label names its series carry.
func scrapeFamilies(t *testing.T, listen string) map[string]map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]map[string]bool{}
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		if i := strings.IndexByte(name, ' '); i >= 0 {
			name, rest = name[:i], ""
		}
		ls := fams[name]
		if ls == nil {
			ls = map[string]bool{}
			fams[name] = ls
		}
		if rest != "" {
			labels, _, _ := strings.Cut(rest, "}")
			for _, m := range label.FindAllStringSubmatch(labels, -1) {
				ls[m[1]] = true
			}
		}
	}
	return fams
}

// declaredFamilies are the metrics the sidecar declares, with their label
// names, whether or not they have series: metrics.Metrics through its
// descriptors, and the two token metrics of cmd/geo-sidecar (exported
// only for clusters with a token, which the test bed's east and west do
// not have) from their source.
func declaredFamilies(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	fams := map[string]map[string]bool{}
	add := func(name string, labels []string) {
		ls := map[string]bool{}
		for _, l := range labels {
			ls[l] = true
		}
		fams[name] = ls
	}
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	m := reflect.ValueOf(metrics.New(nil)).Elem()
	for i := range m.NumField() {
		f := m.Field(i)
		if !f.CanInterface() {
			continue
		}
		c, ok := f.Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 1)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			sm := descRE.FindStringSubmatch(d.String())
			if sm == nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			var labels []string
			if sm[2] != "" {
				labels = strings.Split(sm[2], ",")
			}
			if _, hist := f.Interface().(*prometheus.HistogramVec); hist {
				add(sm[1]+"_bucket", append(labels, "le"))
				add(sm[1]+"_sum", labels)
				add(sm[1]+"_count", labels)
				continue
			}
			add(sm[1], labels)
		}
	}
	src, err := os.ReadFile(filepath.Join(root, "cmd", "geo-sidecar", "security.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"auth_token_expiry_timestamp_seconds", "auth_token_expired"} {
		re := regexp.MustCompile(`Name: "` + name + `",[^}]*\},\s*\[\]string\{"cluster"\}`)
		if re.Match(src) {
			add("geo_sidecar_"+name, []string{"cluster"})
		}
	}
	return fams
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func compactStrings(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
