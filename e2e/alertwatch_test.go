package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// alertScrape is how often an alertWatch scrapes, as a Prometheus would.
const alertScrape = 5 * time.Second

// alertWatch scrapes a sidecar's /metrics every alertScrape during a
// scenario and keeps the series whose names start with one of its
// prefixes, so that the scenario can ask whether an alert rule of the
// operations kit (deploy/prometheus/alerts.yaml) fires at a given scrape:
// promtool evaluates the real rule over what the sidecar exported (the
// rules' own tests in alerts_test.yaml use series made up by hand, which
// cannot show, for instance, that a counter series appearing at 1 never
// shows an increase).
type alertWatch struct {
	s        *Sidecar
	prefixes []string

	mu     sync.Mutex
	ticks  int
	series map[string][]string // "name{labels}" -> value per scrape; "_" while absent

	stop chan struct{}
	done chan struct{}
}

// watchAlerts starts scraping s; it stops at the test's end.
func watchAlerts(t *testing.T, s *Sidecar, prefixes ...string) *alertWatch {
	w := &alertWatch{s: s, prefixes: prefixes, series: map[string][]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	w.scrape()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(alertScrape)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				w.scrape()
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *alertWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// now is the index of the latest scrape.
func (w *alertWatch) now() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ticks - 1
}

// scrape reads /metrics once; a failed scrape leaves the tick's values
// absent, as a missed scrape does in Prometheus.
func (w *alertWatch) scrape() {
	got := map[string]string{}
	if resp, err := http.Get("http://" + w.s.Listen + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") || !w.wanted(line) {
				continue
			}
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				got[line[:i]] = line[i+1:]
			}
		}
		resp.Body.Close()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, v := range got {
		if _, ok := w.series[k]; !ok {
			w.series[k] = make([]string, w.ticks)
			for i := range w.series[k] {
				w.series[k][i] = "_"
			}
		}
		w.series[k] = append(w.series[k], v)
	}
	for k := range w.series {
		if _, ok := got[k]; !ok {
			w.series[k] = append(w.series[k], "_")
		}
	}
	w.ticks++
}

func (w *alertWatch) wanted(line string) bool {
	for _, p := range w.prefixes {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// firing reports whether the alert fires at scrape tick for the series
// with labels (the rule's grouping labels, such as cluster: far): nil if
// it does, else promtool's account of what it found instead.
func (w *alertWatch) firing(t *testing.T, alert string, tick int, labels map[string]string) error {
	t.Helper()
	rules, rule := alertRule(t, alert)
	exp := map[string]string{}
	for k, v := range rule.Labels {
		exp[k] = v
	}
	for k, v := range labels {
		exp[k] = v
	}
	ann := map[string]string{}
	for k, v := range rule.Annotations {
		for lk, lv := range labels {
			v = strings.ReplaceAll(v, "{{ $labels."+lk+" }}", lv)
		}
		if strings.Contains(v, "{{") {
			t.Fatalf("alert %s: annotation %s has a template firing cannot fill: %q", alert, k, v)
		}
		ann[k] = v
	}
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	var in []series
	w.mu.Lock()
	for k, vs := range w.series {
		in = append(in, series{k, strings.Join(vs, " ")})
	}
	w.mu.Unlock()
	test := map[string]any{
		"rule_files":          []string{rules},
		"evaluation_interval": alertScrape.String(),
		"tests": []any{map[string]any{
			"interval":     alertScrape.String(),
			"input_series": in,
			"alert_rule_test": []any{map[string]any{
				"eval_time": (time.Duration(tick) * alertScrape).String(),
				"alertname": alert,
				"exp_alerts": []any{map[string]any{
					"exp_labels":      exp,
					"exp_annotations": ann,
				}},
			}},
		}},
	}
	b, err := yaml.Marshal(test)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "alert_test.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool(t, "promtool"), "test", "rules", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s does not fire at %s: %s", alert, time.Duration(tick)*alertScrape, strings.TrimSpace(string(out)))
	}
	return nil
}

// alertRule reads deploy/prometheus/alerts.yaml: its path and the rule.
func alertRule(t *testing.T, alert string) (string, alertingRule) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(filepath.Dir(file)), "deploy", "prometheus", "alerts.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertingRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				return path, r
			}
		}
	}
	t.Fatalf("no alert %s in %s", alert, path)
	return "", alertingRule{}
}

type alertingRule struct {
	Alert       string            `yaml:"alert"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// tool is deploy/tools/tool.sh's path of a deploy tool (built and cached
// on first use: promtool takes minutes on a cold cache).
func tool(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	out, err := exec.Command(filepath.Join(filepath.Dir(filepath.Dir(file)), "deploy", "tools", "tool.sh"), name).Output()
	if err != nil {
		t.Fatalf("deploy/tools/tool.sh %s: %v\n%s", name, err, stderrOf(err))
	}
	return strings.TrimSpace(string(out))
}
