package subsync

// A fuzz target for a parser of outside input: the origin-id property (any
// producer on a replicated topic can set it). It checks a property of the
// result, not only that nothing panics. It runs for a few seconds in `make
// test` and longer in `make fuzz`; .ci/fuzz.sh finds it by name.

import (
	"math"
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
