package replicator

// Fuzz targets for the replicator's parsers of outside input: the origin-id
// property (any producer on a replicated topic can set it), Pulsar's
// mark-delete position (from the admin API) and the replicate-to property
// (set by applications). Each checks a property of the result, not only
// that nothing panics. They run for a few seconds each in `make test` and
// longer in `make fuzz`; .ci/fuzz.sh finds them by name.

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

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

// FuzzReplicateTo checks listHas and decide on the replicate-to property,
// which applications write by hand. The list is split at commas; listHas
// matches an element, with surrounding white space trimmed, against the
// remote's exact name:
//   - a name is in a list built from names exactly when it is one of them,
//     whatever white space surrounds the elements and whatever empty
//     elements sit between them (never by prefix, suffix or case);
//   - listHas(list, name) is listHas on the list with every element
//     trimmed (white-space insensitive);
//   - decide forwards a plain message carrying the property exactly when
//     listHas says so, and skips it as replicate-to otherwise; a copy (an
//     origin-cluster property) or a marker is never forwarded, whatever
//     the list says.
func FuzzReplicateTo(f *testing.F) {
	f.Add("west", "west", " \t", uint8(0))
	f.Add("north,west", "west", " ", uint8(1))
	f.Add(" north , west ", "west", "\n", uint8(2))
	f.Add("wes,west2", "west", "", uint8(3))
	f.Add("WEST", "west", "", uint8(0))
	f.Add("", "west", "", uint8(0))
	f.Add(" , ", "west", "  ", uint8(5))
	f.Add("west,,east", "east", "\u00a0", uint8(7))
	f.Add("a\u2003,b", "a", "\u3000", uint8(4))
	f.Fuzz(func(t *testing.T, list, remote, pad string, shape uint8) {
		// Remote names come from the config: non-empty, no commas, no
		// surrounding white space. Keep pad to white space only.
		remote = strings.TrimSpace(strings.ReplaceAll(remote, ",", ""))
		if remote == "" || !utf8.ValidString(remote) {
			remote = "west"
		}
		pad = strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return r
			}
			return -1
		}, pad)

		// 1. Lists built from names: membership is exact.
		var names []string
		for _, e := range strings.Split(list, ",") {
			if n := strings.TrimSpace(e); n != "" {
				names = append(names, n)
			}
		}
		if shape&1 != 0 {
			names = append(names, remote) // sometimes named
		}
		if shape&2 != 0 && len(names) > 0 {
			names = append(names[1:], names[0])
		}
		var b strings.Builder
		for i, n := range names {
			if i > 0 {
				b.WriteString(",")
				if shape&4 != 0 {
					b.WriteString(pad + ",") // an empty element
				}
			}
			b.WriteString(pad + n + pad)
		}
		built := b.String()
		if got, want := listHas(built, remote), slices.Contains(names, remote); got != want {
			t.Fatalf("listHas(%q, %q) = %v; the list's names are %q", built, remote, got, names)
		}
		for _, near := range []string{remote + "x", "x" + remote, strings.ToUpper(remote), strings.ToLower(remote)} {
			if near == remote {
				continue
			}
			if got, want := listHas(built, near), slices.Contains(names, near); got != want {
				t.Fatalf("listHas(%q, %q) = %v; the list's names are %q", built, near, got, names)
			}
		}

		// 2. White space around the elements of any list is ignored.
		elems := strings.Split(list, ",")
		for i := range elems {
			elems[i] = strings.TrimSpace(elems[i])
		}
		trimmed := strings.Join(elems, ",")
		if listHas(list, remote) != listHas(trimmed, remote) {
			t.Fatalf("listHas(%q, %q) = %v but listHas(%q, %q) = %v", list, remote, listHas(list, remote), trimmed, remote, listHas(trimmed, remote))
		}
		if got, want := listHas(list, remote), slices.Contains(elems, remote); got != want {
			t.Fatalf("listHas(%q, %q) = %v, want %v", list, remote, got, want)
		}

		// 3. decide follows listHas for a local message, and never forwards
		// a copy or a marker.
		for _, l := range []string{list, built} {
			m := &parseFuzzMsg{props: map[string]string{PropReplicateTo: l}}
			want := skipReplicateTo
			if listHas(l, remote) {
				want = ""
			}
			if got := decide(m, remote); got != want {
				t.Fatalf("decide(replicate-to %q, %q) = %q, want %q", l, remote, got, want)
			}
			m.props[PropOriginCluster] = "north"
			if got := decide(m, remote); got != skipRemoteOrigin {
				t.Fatalf("decide(copy, replicate-to %q, %q) = %q, want %q", l, remote, got, skipRemoteOrigin)
			}
			m.props[marker.Property] = l
			if got := decide(m, remote); got != skipMarker {
				t.Fatalf("decide(marker, replicate-to %q, %q) = %q, want %q", l, remote, got, skipMarker)
			}
		}
	})
}

// parseFuzzMsg is the least pulsar.Message decide needs; any other method
// panics on the nil embedded interface.
type parseFuzzMsg struct {
	pulsar.Message
	props map[string]string
}

func (m *parseFuzzMsg) Properties() map[string]string { return m.props }
func (m *parseFuzzMsg) IsReplicated() bool            { return false }

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
