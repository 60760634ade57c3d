package config

import (
	"strings"
	"testing"
)

// TestRenamed: the deprecated names (sidecar.admin_budget, data_path:
// auto) are read as their new names for one release, each with a warning
// naming the old and the new; the new names read without one; a key set
// under both names, and bad values under either, are errors that name the
// key the file holds.
func TestRenamed(t *testing.T) {
	const rest = `clusters:
  - {name: a, service_url: "pulsar://a:6650", admin_url: "http://a:8080"}
  - {name: b, service_url: "pulsar://b:6650", admin_url: "http://b:8080"}
replication:
  - {source: a, namespace: t/ns, topics: [o], targets: [b]%s}
`
	type want struct {
		rate     float64
		burst    int
		dataPath string
		old, new []string // the deprecation warnings' Old and New, in order
		err      []string // the error's lines hold these, in order
	}
	tests := []struct {
		name    string
		sidecar string // the sidecar section's keys, indented by 2
		entry   string // more keys of replication[0]
		want    want
	}{
		{"new rate key", "  admin_rate: {requests_per_second: 7, burst: 9}\n", "",
			want{rate: 7, burst: 9, dataPath: DataPathEntries}},
		{"new rate key, one field", "  admin_rate: {burst: 9}\n", "",
			want{rate: DefaultAdminRate, burst: 9, dataPath: DataPathEntries}},
		{"old rate key", "  admin_budget: {requests_per_second: 7, burst: 9}\n", "",
			want{rate: 7, burst: 9, dataPath: DataPathEntries,
				old: []string{"sidecar.admin_budget"}, new: []string{"sidecar.admin_rate"}}},
		{"old rate key, one field", "  admin_budget: {requests_per_second: 7}\n", "",
			want{rate: 7, burst: DefaultAdminBurst, dataPath: DataPathEntries,
				old: []string{"sidecar.admin_budget"}, new: []string{"sidecar.admin_rate"}}},
		{"both rate keys", "  admin_rate: {requests_per_second: 7}\n  admin_budget: {requests_per_second: 8}\n", "",
			want{err: []string{"sidecar.admin_budget: the old name of sidecar.admin_rate, which is set too"}}},
		{"old rate key, bad values", "  admin_budget: {requests_per_second: -1, burst: 0}\n", "",
			want{err: []string{"sidecar.admin_budget.requests_per_second: -1 must be", "sidecar.admin_budget.burst: 0 must be"}}},
		{"new rate key, bad value", "  admin_rate: {requests_per_second: 100001}\n", "",
			want{err: []string{"sidecar.admin_rate.requests_per_second: 100001 must be"}}},
		{"old rate key, unknown field", "  admin_budget: {rate: 5}\n", "",
			want{err: []string{`sidecar.admin_budget: unknown key "rate" (line 3)`}}},
		{"data path left out", "", "",
			want{rate: DefaultAdminRate, burst: DefaultAdminBurst, dataPath: DataPathEntries}},
		{"data path entries", "", ", data_path: entries",
			want{rate: DefaultAdminRate, burst: DefaultAdminBurst, dataPath: DataPathEntries}},
		{"data path auto", "", ", data_path: auto",
			want{rate: DefaultAdminRate, burst: DefaultAdminBurst, dataPath: DataPathEntries,
				old: []string{"replication[0].data_path=auto"}, new: []string{"replication[0].data_path=entries"}}},
		{"data path auto and the old rate key", "  admin_budget: {burst: 3}\n", ", data_path: auto",
			want{rate: DefaultAdminRate, burst: 3, dataPath: DataPathEntries,
				old: []string{"sidecar.admin_budget", "replication[0].data_path=auto"},
				new: []string{"sidecar.admin_rate", "replication[0].data_path=entries"}}},
		{"data path other", "", ", data_path: automatic",
			want{err: []string{`replication[0].data_path: "automatic" must be "entries"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "sidecar:\n  marker_key_env: K\n" + tt.sidecar + strings.Replace(rest, "%s", tt.entry, 1)
			cfg, err := Parse([]byte(doc))
			if tt.want.err != nil {
				if err == nil {
					t.Fatalf("no error, want %q", tt.want.err)
				}
				lines := strings.Split(err.Error(), "\n")
				if len(lines) != len(tt.want.err) {
					t.Fatalf("error:\n%v\nwant %d lines", err, len(tt.want.err))
				}
				for i, w := range tt.want.err {
					if !strings.Contains(lines[i], w) {
						t.Errorf("error line %d: %q, want …%s…", i, lines[i], w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Sidecar
			if s.AdminRate.RequestsPerSecond != tt.want.rate || s.AdminRate.Burst != tt.want.burst || s.AdminBudget != nil {
				t.Errorf("admin_rate = %+v (admin_budget %v), want %v/s burst %d", s.AdminRate, s.AdminBudget, tt.want.rate, tt.want.burst)
			}
			if got := cfg.Replication[0].DataPath; got != tt.want.dataPath {
				t.Errorf("data_path = %q, want %q", got, tt.want.dataPath)
			}
			var old, new []string
			for _, w := range cfg.Warnings() {
				if w.Summary != WarnDeprecated {
					continue
				}
				old, new = append(old, w.Old), append(new, w.New)
				// The detail, which `validate` prints, names both too.
				oldKey, _, _ := strings.Cut(w.Old, "=")
				if !strings.HasPrefix(w.Detail, oldKey+": ") || !strings.Contains(w.Detail, strings.TrimPrefix(strings.TrimPrefix(w.New, oldKey+"="), "sidecar.")) {
					t.Errorf("warning %q does not name %s and %s", w.Detail, w.Old, w.New)
				}
			}
			if strings.Join(old, ",") != strings.Join(tt.want.old, ",") || strings.Join(new, ",") != strings.Join(tt.want.new, ",") {
				t.Errorf("deprecations %v -> %v, want %v -> %v", old, new, tt.want.old, tt.want.new)
			}
		})
	}
}
