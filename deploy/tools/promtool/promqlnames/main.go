// Command promqlnames lists the metric names and labels that Prometheus
// rule files and Grafana dashboards use, parsed with Prometheus's own
// PromQL parser, so that a test can compare them with what a running
// geo-sidecar exports (e2e/opskit_test.go): a renamed metric or label
// must not silently blank a panel or disarm an alert.
//
// Usage: promqlnames FILE... (*.yaml: rule files; *.json: Grafana
// dashboards). It prints a JSON list of requirements and exits 1 if an
// expression does not parse.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Requirement says that at least one of Metrics must carry each of Labels
// (a selector's matchers: its one metric; a by/on/ignoring clause: the
// metrics under it, on each side for a binary operator).
type Requirement struct {
	Where   string   `json:"where"`
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
	Labels  []string `json:"labels"`
}

func main() {
	var reqs []Requirement
	var errs []error
	for _, f := range os.Args[1:] {
		exprs, err := load(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range exprs {
			r, err := analyse(e.where, e.expr)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q: %w", e.where, e.expr, err))
			}
			reqs = append(reqs, r...)
		}
	}
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, "promqlnames:", err)
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(reqs)
}

type expr struct{ where, expr string }

func load(path string) ([]expr, error) {
	switch {
	case strings.HasSuffix(path, ".yaml"), strings.HasSuffix(path, ".yml"):
		groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s: %w", path, errors.Join(errs...))
		}
		var out []expr
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				name := r.Alert
				if name == "" {
					name = r.Record
				}
				out = append(out, expr{path + ": " + name, r.Expr})
			}
		}
		return out, nil
	case strings.HasSuffix(path, ".json"):
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var out []expr
		var walk func(ps []panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				for _, t := range p.Targets {
					if t.Expr != "" {
						out = append(out, expr{fmt.Sprintf("%s: panel %q", path, p.Title), grafanaVars(t.Expr)})
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q := v.Definition
			if s, ok := v.Query.(string); ok && q == "" {
				q = s
			} else if m, ok := v.Query.(map[string]any); ok && q == "" {
				q, _ = m["query"].(string)
			}
			// label_values(selector, label): the selector's metric has the label.
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				return nil, fmt.Errorf("%s: variable %s: query %q is not label_values(selector, label)", path, v.Name, q)
			}
			out = append(out, expr{fmt.Sprintf("%s: variable %s", path, v.Name), fmt.Sprintf("count by (%s) (%s)", m[2], grafanaVars(m[1]))})
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: neither .yaml (rules) nor .json (dashboard)", path)
}

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
			Query      any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var (
	labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
	// Grafana's interval variables become a duration, the others (inside
	// label matchers' quotes) a match-all regexp.
	intervalVar = regexp.MustCompile(`\$__(rate_interval|interval|range)|\$\{__(rate_interval|interval|range)\}`)
	otherVar    = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
)

func grafanaVars(s string) string {
	s = intervalVar.ReplaceAllString(s, "5m")
	return otherVar.ReplaceAllString(s, ".*")
}

func analyse(where, src string) ([]Requirement, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(src)
	if err != nil {
		return nil, err
	}
	var reqs []Requirement
	add := func(metrics, labels []string) {
		if len(labels) == 0 && len(metrics) == 0 {
			return
		}
		reqs = append(reqs, Requirement{Where: where, Expr: src, Metrics: uniq(metrics), Labels: uniq(labels)})
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			var ls []string
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" {
					ls = append(ls, m.Name)
				}
			}
			add([]string{n.Name}, ls)
		case *parser.AggregateExpr:
			if len(n.Grouping) > 0 {
				add(metricsIn(n.Expr), n.Grouping)
			}
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				ls := append(slices.Clone(vm.MatchingLabels), vm.Include...)
				if len(ls) > 0 {
					if m := metricsIn(n.LHS); len(m) > 0 {
						add(m, ls)
					}
					if m := metricsIn(n.RHS); len(m) > 0 {
						add(m, ls)
					}
				}
			}
		}
		return nil
	})
	return reqs, nil
}

func metricsIn(e parser.Node) []string {
	var ms []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if v, ok := n.(*parser.VectorSelector); ok {
			ms = append(ms, v.Name)
		}
		return nil
	})
	return ms
}

func uniq(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}
