package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// The README is the front door: short, a first config that works, and a
// link to every page of docs/ on its first screen. The rest lives in
// docs/, and every relative link there must resolve.
const (
	readmeMaxLines = 250
	// firstScreen is how many lines of the README the table of contents
	// (a link to every docs page) must fit in.
	firstScreen = 50
)

// repoFile is a path relative to the repository's root.
func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docPages lists docs/*.md as paths relative to the root ("docs/x.md").
func docPages(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatal("no docs/*.md")
	}
	var pages []string
	for _, p := range m {
		pages = append(pages, "docs/"+filepath.Base(p))
	}
	return pages
}

// TestReadmeIsShort keeps the README under readmeMaxLines lines.
func TestReadmeIsShort(t *testing.T) {
	if n := strings.Count(repoFile(t, "README.md"), "\n"); n >= readmeMaxLines {
		t.Errorf("README.md has %d lines, want under %d: move detail into a page of docs/ and link it", n, readmeMaxLines)
	}
}

// TestReadmeLinksEveryDocsPage checks that each docs/*.md is linked from
// the README's first screen.
func TestReadmeLinksEveryDocsPage(t *testing.T) {
	lines := strings.Split(repoFile(t, "README.md"), "\n")
	head := strings.Join(lines[:min(firstScreen, len(lines))], "\n")
	for _, page := range docPages(t) {
		if !strings.Contains(head, "]("+page+")") && !strings.Contains(head, "]("+page+"#") {
			t.Errorf("README.md does not link %s in its first %d lines (the table of contents)", page, firstScreen)
		}
	}
}

var (
	// mdLink is an inline markdown link or image: [text](target).
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	// inlineCode is a code span, whose brackets are no link.
	inlineCode = regexp.MustCompile("`[^`]*`")
)

// TestDocsLinksResolve checks every relative link of the README and of
// docs/*.md: the file exists and, for a markdown file, so does the
// heading an anchor names.
func TestDocsLinksResolve(t *testing.T) {
	files := append([]string{"README.md"}, docPages(t)...)
	anchors := map[string][]string{} // markdown file -> its heading anchors
	anchorsOf := func(name string) []string {
		if a, ok := anchors[name]; ok {
			return a
		}
		a := headingAnchors(repoFile(t, name))
		anchors[name] = a
		return a
	}
	for _, file := range files {
		for i, line := range proseLines(repoFile(t, file)) {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				name := file
				if path != "" {
					name = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
					if strings.HasPrefix(name, "../") {
						t.Errorf("%s:%d: link %q leaves the repository", file, i+1, target)
						continue
					}
					if _, err := os.Stat(filepath.Join("..", "..", filepath.FromSlash(name))); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", file, i+1, target, name)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(name, ".md") && !slices.Contains(anchorsOf(name), anchor) {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", file, i+1, target, name, anchor)
				}
			}
		}
	}
}

// proseLines returns the lines of a markdown document with the lines of
// fenced code blocks blanked (so that line numbers stay right).
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the document's
// headings: lower case, punctuation dropped, spaces as hyphens, a repeated
// one suffixed -1, -2, ...
func headingAnchors(doc string) []string {
	var out []string
	seen := map[string]int{}
	for _, l := range proseLines(doc) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}

// firstYAML returns the first ```yaml block of a markdown document.
func firstYAML(t *testing.T, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(repoFile(t, name), "\n```yaml\n")
	if !ok {
		t.Fatalf("%s has no ```yaml block", name)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("%s: the first ```yaml block does not end", name)
	}
	return block + "\n"
}

// TestDocsConfigExamplesValid runs the README's first config and the full
// example of docs/configuration.md through the config's own parsing and
// validation, and checks that they draw none of validate's warnings.
func TestDocsConfigExamplesValid(t *testing.T) {
	for _, name := range []string{"README.md", "docs/configuration.md"} {
		cfg, err := config.Parse([]byte(firstYAML(t, name)))
		if err != nil {
			t.Errorf("%s: the config example is invalid:\n%v", name, err)
			continue
		}
		if w := cfg.Warnings(); len(w) > 0 {
			t.Errorf("%s: the config example draws warnings: %v", name, w)
		}
	}
}

// TestBenchmarkPageHasGeneratedSections: `make bench` rewrites the
// sections of docs/benchmark.md between these markers (e2e/bench) and
// fails, after its whole run, if they are missing.
func TestBenchmarkPageHasGeneratedSections(t *testing.T) {
	if !strings.Contains(repoFile(t, "Makefile"), "--page docs/benchmark.md") {
		t.Error("the Makefile's bench target does not write docs/benchmark.md (--page docs/benchmark.md)")
	}
	page := repoFile(t, "docs/benchmark.md")
	for _, m := range []string{
		"<!-- bench:begin (generated by make bench; edits are overwritten) -->", "<!-- bench:end -->",
		"<!-- bench-wan:begin (generated by make bench; edits are overwritten) -->", "<!-- bench-wan:end -->",
	} {
		if strings.Count(page, m) != 1 {
			t.Errorf("docs/benchmark.md has %d of the marker %q, want 1", strings.Count(page, m), m)
		}
	}
}

// TestObservabilityPageNamesEveryAlert: each alert of the rule file has
// its row (what it means, what to do) in docs/observability.md.
func TestObservabilityPageNamesEveryAlert(t *testing.T) {
	page := repoFile(t, "docs/observability.md")
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(repoFile(t, "deploy/prometheus/alerts.yaml"), -1)
	if len(alerts) == 0 {
		t.Fatal("no alerts in deploy/prometheus/alerts.yaml")
	}
	for _, a := range alerts {
		if !strings.Contains(page, "| `"+a[1]+"` |") {
			t.Errorf("docs/observability.md has no row for the alert %s", a[1])
		}
	}
}
