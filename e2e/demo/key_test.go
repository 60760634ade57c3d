package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestMarkerKeyFile: the first call makes the folder and a key, later
// calls (a second make demo) return the same file with the same key,
// and runs starting at once agree on one key.
func TestMarkerKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "geo-sidecar", "demo")
	path, err := markerKeyFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 65 {
		t.Fatalf("key file %q: want 64 hex digits and a newline", first)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	again, err := markerKeyFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(again)
	if again != path || string(second) != string(first) {
		t.Errorf("second run: %s %q, want %s %q", again, second, path, first)
	}

	race := filepath.Join(t.TempDir(), "demo")
	var wg sync.WaitGroup
	keys := make([]string, 8)
	for i := range keys {
		wg.Go(func() {
			p, err := markerKeyFile(race)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := os.ReadFile(p)
			keys[i] = string(b)
		})
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] || k == "" {
			t.Fatalf("runs at once got different keys: %q", keys)
		}
	}
	left, _ := filepath.Glob(filepath.Join(race, "marker.key.*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
