package replicator

// Fuzz targets for the replicator's parsers of outside input: the origin-id
// property (any producer on a replicated topic can set it) and Pulsar's
// mark-delete position (from the admin API). Each checks a property of the
// result, not only that nothing panics. They run for a few seconds each in
// `make test` and longer in `make fuzz`; .ci/fuzz.sh finds them by name.

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// FuzzParsePosition checks parsePosition, the reader of the origin-id
// property, against formatID, its writer:
//   - every position formatID writes parses back to itself (round trip);
//   - what parses is exactly three base-10 integers separated by ':', the
//     first two in int64, the third in int32, and formatting the result
//     again gives the input up to a leading '+' and leading zeros;
//   - anything else is refused with the zero position.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{
		"12:34:5", "12:34:-1", "0:0:0", "", "12:34", "1:2:3:4", "a:b:c", "12;34;5",
		"9223372036854775807:9223372036854775807:2147483647",
		"-9223372036854775808:-1:-2147483648",
		"1:2:2147483648", "9223372036854775808:0:0", "+1:+2:+3", "01:002:-0",
		" 1:2:3", "1:2:3\n", "1_0:2:3", "0x1:2:3", "１:2:3", "::", "1::3",
	} {
		f.Add(s, int64(0), int64(0), int32(0))
	}
	f.Add("", int64(math.MaxInt64), int64(math.MinInt64), int32(math.MinInt32))
	f.Add("", int64(-1), int64(-1), int32(-1))
	f.Fuzz(func(t *testing.T, s string, ledger, entry int64, batch int32) {
		// Round trip from a position.
		id := pulsar.NewMessageID(ledger, entry, batch, 0)
		want := marker.Position{Ledger: ledger, Entry: entry, Batch: batch}
		if p, ok := marker.ParsePosition(positionOf(id).String()); !ok || p != want {
			t.Fatalf("marker.ParsePosition(positionOf(%v).String()) = %v, %v; want %v, true", want, p, ok, want)
		}

		// From a string: accepted exactly when the grammar holds.
		p, ok := marker.ParsePosition(s)
		fields := strings.Split(s, ":")
		wantOK := len(fields) == 3 && decimalIn(fields[0], 64) && decimalIn(fields[1], 64) && decimalIn(fields[2], 32)
		if ok != wantOK {
			t.Fatalf("marker.ParsePosition(%q) ok = %v, want %v", s, ok, wantOK)
		}
		if !ok {
			if p != (marker.Position{}) {
				t.Fatalf("marker.ParsePosition(%q) refused but returned %v", s, p)
			}
			return
		}
		got := []string{strconv.FormatInt(p.Ledger, 10), strconv.FormatInt(p.Entry, 10), strconv.FormatInt(int64(p.Batch), 10)}
		for i := range fields {
			if got[i] != canonicalDecimal(fields[i]) {
				t.Fatalf("marker.ParsePosition(%q) = %v: field %d reads %s", s, p, i, got[i])
			}
		}
	})
}

// FuzzParseEntry checks parseEntry, the reader of the admin API's
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
		if p, ok := parseEntry(in); !ok || p != want {
			t.Fatalf("parseEntry(%q) = %v, %v; want %v, true", in, p, ok, want)
		}

		p, ok := parseEntry(s)
		wantOK := entryForm.MatchString(s)
		if wantOK {
			l, e, _ := strings.Cut(s, ":")
			wantOK = decimalIn(l, 64) && decimalIn(e, 64)
		}
		if ok != wantOK {
			t.Fatalf("parseEntry(%q) ok = %v, want %v", s, ok, wantOK)
		}
		if !ok {
			return
		}
		if p.Batch != -1 {
			t.Fatalf("parseEntry(%q) = %v: batch %d, want -1 (a whole entry)", s, p, p.Batch)
		}
		l, e, _ := strings.Cut(s, ":")
		if strconv.FormatInt(p.Ledger, 10) != canonicalDecimal(l) || strconv.FormatInt(p.Entry, 10) != canonicalDecimal(e) {
			t.Fatalf("parseEntry(%q) = %v", s, p)
		}
	})
}

// entryForm is the grammar of a mark-delete position, written apart from
// parseEntry's own strings.Cut and strconv calls.
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
