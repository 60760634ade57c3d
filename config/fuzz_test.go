package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParse feeds arbitrary bytes to Parse, the decoder of outside input. It
// must never panic, every error must be one non-empty line per problem, and
// a Config it accepts must validate again and be usable.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	if len(files) == 0 {
		f.Fatal("no seed files in testdata")
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned a config along with %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.TrimSpace(line) == "" {
					t.Fatalf("error has an empty line: %q", err.Error())
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		// What was accepted can be written out and read back unchanged,
		// so the effective config can be shown to an operator.
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(cfg)): %v\n%s", err, out)
		}
		if a, b := withoutCompiled(cfg), withoutCompiled(back); !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", a, b)
		}
		for _, r := range cfg.Replication {
			for _, topic := range r.Topics {
				if !r.MatchesTopic(topic) {
					t.Fatalf("replication from %q does not match its own topic %q", r.Source, topic)
				}
			}
			r.MatchesSubscription("x")
			for _, target := range r.Targets {
				if _, ok := cfg.Cluster(target); !ok || target == r.Source {
					t.Fatalf("accepted target %q of source %q", target, r.Source)
				}
			}
		}
	})
}
