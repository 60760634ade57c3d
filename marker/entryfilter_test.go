package marker

import (
	"os"
	"regexp"
	"testing"
)

// The broker's entry filter (deploy/entryfilter, Java) recognises markers
// by the names defined here; it is built with Maven, apart from the Go
// code, so this test reads its source and holds its constants against
// marker's: a name changed on one side only would let markers through to
// applications, or hide them from the sidecar.
func TestEntryFilterAgrees(t *testing.T) {
	const src = "../deploy/entryfilter/src/main/java/io/geosidecar/entryfilter/MarkerEntryFilter.java"
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, m := range regexp.MustCompile(`static final String (\w+) = "([^"]*)";`).FindAllSubmatch(b, -1) {
		consts[string(m[1])] = string(m[2])
	}
	for name, want := range map[string]string{
		"MARKER_PROPERTY":        Property,
		"MARKER_PRODUCER_PREFIX": MarkerProducers,
		// The subscriptions that still see markers by default: the
		// sidecar's own cursors and readers, whose names start with the
		// sidecar's prefix (config.DefaultCursorPrefix is under it).
		"DEFAULT_PREFIXES": SidecarProducers,
	} {
		got, ok := consts[name]
		switch {
		case !ok:
			t.Errorf("%s: no constant %s", src, name)
		case got != want:
			t.Errorf("%s: %s = %q, marker has %q", src, name, got, want)
		}
	}
	// The kinds the filter takes for markers: exactly "10" to "13".
	kinds := regexp.MustCompile(`charAt\(0\) == '(\d)' && v\.charAt\(1\) >= '(\d)' && v\.charAt\(1\) <= '(\d)'`).FindSubmatch(b)
	if kinds == nil {
		t.Fatalf("%s: isMarkerKind's test of the kind digits not found", src)
	}
	first, last := string(kinds[1])+string(kinds[2]), string(kinds[1])+string(kinds[3])
	if first != Properties(KindSnapshotRequest)[Property] || last != Properties(KindUpdate)[Property] {
		t.Errorf("%s: isMarkerKind takes %s to %s, marker's kinds are %s to %s", src, first, last, Properties(KindSnapshotRequest)[Property], Properties(KindUpdate)[Property])
	}
}
