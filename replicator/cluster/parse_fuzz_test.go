package cluster

// A fuzz target for a parser of outside input: Pulsar's mark-delete
// position (from the admin API). It checks a property of the result, not
// only that nothing panics. It runs for a few seconds in `make test` and
// longer in `make fuzz`; .ci/fuzz.sh finds it by name.

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// FuzzParseEntry checks ParseEntry, the reader of the admin API's
// mark-delete position: it accepts exactly "ledger:entry" with two base-10
// int64 integers, returns them with Batch -1 (a whole entry), and refuses
// everything else, including the three-field origin-id form, with ok false.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{
		"12:34", "12:-1", "0:0", "-1:-1", "", "12", "12:", ":34", "12:34:5", "12:34:-1",
		"12:34:", "a:b", "12;34", " 12:34", "12:34 ", "+12:+34", "007:08",
		"9223372036854775807:9223372036854775807", "9223372036854775808:0",
		"-9223372036854775808:-9223372036854775808", "1:2:3:4", "::", "1::",
	} {
		f.Add(s, int64(0), int64(0))
	}
	f.Add("", int64(math.MaxInt64), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, s string, ledger, entry int64) {
		// Round trip from the form Pulsar writes.
		in := strconv.FormatInt(ledger, 10) + ":" + strconv.FormatInt(entry, 10)
		want := marker.Position{Ledger: ledger, Entry: entry, Batch: -1}
		if p, ok := ParseEntry(in); !ok || p != want {
			t.Fatalf("ParseEntry(%q) = %v, %v; want %v, true", in, p, ok, want)
		}

		p, ok := ParseEntry(s)
		wantOK := entryForm.MatchString(s)
		if wantOK {
			l, e, _ := strings.Cut(s, ":")
			wantOK = decimalIn(l, 64) && decimalIn(e, 64)
		}
		if ok != wantOK {
			t.Fatalf("ParseEntry(%q) ok = %v, want %v", s, ok, wantOK)
		}
		if !ok {
			return
		}
		if p.Batch != -1 {
			t.Fatalf("ParseEntry(%q) = %v: batch %d, want -1 (a whole entry)", s, p, p.Batch)
		}
		l, e, _ := strings.Cut(s, ":")
		if strconv.FormatInt(p.Ledger, 10) != canonicalDecimal(l) || strconv.FormatInt(p.Entry, 10) != canonicalDecimal(e) {
			t.Fatalf("ParseEntry(%q) = %v", s, p)
		}
	})
}

// entryForm is the grammar of a mark-delete position, written apart from
// ParseEntry's own strings.Cut and strconv calls.
var entryForm = regexp.MustCompile(`^[+-]?[0-9]+:[+-]?[0-9]+$`)

// decimalIn reports whether s is an optionally signed run of ASCII digits
// whose value fits a signed integer of the given bit size. It compares
// digit strings rather than call strconv, to be an oracle independent of
// the parsers it checks.
func decimalIn(s string, bits int) bool {
	d := strings.TrimLeft(s, "+-")
	if len(s)-len(d) > 1 || d == "" {
		return false
	}
	for _, c := range []byte(d) {
		if c < '0' || c > '9' {
			return false
		}
	}
	neg := s[0] == '-'
	d = strings.TrimLeft(d, "0")
	limit := "9223372036854775807"
	if bits == 32 {
		limit = "2147483647"
	}
	if neg {
		limit = limit[:len(limit)-1] + string(limit[len(limit)-1]+1)
	}
	return len(d) < len(limit) || len(d) == len(limit) && d <= limit
}

// canonicalDecimal returns s, accepted by decimalIn, as strconv.FormatInt
// writes its value: no '+', no leading zeros, no "-0".
func canonicalDecimal(s string) string {
	neg := strings.HasPrefix(s, "-")
	d := strings.TrimLeft(strings.TrimLeft(s, "+-"), "0")
	if d == "" {
		return "0"
	}
	if neg {
		return "-" + d
	}
	return d
}
