package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ByteSize is a number of bytes written in YAML with a binary unit:
// "512MiB", "1GiB", "64 MiB", "8388608B". Units are B, KiB, MiB, GiB and
// TiB (powers of 1024); the number is a whole one.
//
// A bare number is rejected, as for [Duration]: `receive_budget: 512` is
// 512 bytes to a parser and 512 MiB to its writer. So are decimal and
// Kubernetes-style units ("512MB", "512M", "512Mi"): "MB" is 10^6 bytes
// to some readers and 2^20 to others, and a budget off by 5 % or by a
// factor of 1,000 should not depend on which one wrote it.
type ByteSize int64

var byteUnits = []struct {
	name string
	mult int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

var (
	reByteSize  = regexp.MustCompile(`^([0-9]+) ?([A-Za-z]+)$`)
	reOtherUnit = regexp.MustCompile(`^(?i)([kmgt]i?b?|[kmgt]?b)$`)
)

// ParseByteSize reads s as [ByteSize] does in YAML.
func ParseByteSize(s string) (ByteSize, error) {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%q has no unit; write a size with a unit such as \"512MiB\" or \"1GiB\"", s)
	}
	m := reByteSize.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size; write a whole number and a unit, such as \"512MiB\" or \"1GiB\"", s)
	}
	for _, u := range byteUnits {
		if m[2] != u.name {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > math.MaxInt64/u.mult {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return ByteSize(n * u.mult), nil
	}
	if reOtherUnit.MatchString(m[2]) {
		return 0, fmt.Errorf("%q: write the unit as B, KiB, MiB, GiB or TiB (powers of 1024), such as \"%s%s\"", s, m[1], binaryUnitFor(m[2]))
	}
	return 0, fmt.Errorf("%q has an unknown unit %q; use B, KiB, MiB, GiB or TiB", s, m[2])
}

// binaryUnitFor is the binary unit an operator most likely meant by u
// ("MB", "M", "Mi", "mib": MiB).
func binaryUnitFor(u string) string {
	switch strings.ToUpper(u[:1]) {
	case "K":
		return "KiB"
	case "M":
		return "MiB"
	case "G":
		return "GiB"
	case "T":
		return "TiB"
	}
	return "B"
}

// UnmarshalYAML implements [yaml.Unmarshaler]. Its errors are
// [*yaml.TypeError]s, so yaml.v3 keeps decoding and reports them together
// with the file's other type errors.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return posError(n, fmt.Sprintf("expected a size such as \"512MiB\", got %s", describeKind(n)))
	}
	if n.ShortTag() == "!!int" || n.ShortTag() == "!!float" {
		return posError(n, fmt.Sprintf("%q has no unit; write a size with a unit such as \"512MiB\" or \"1GiB\"", n.Value))
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return posError(n, err.Error())
	}
	*b = v
	return nil
}

// MarshalYAML implements [yaml.Marshaler]: the size as [ByteSize.String]
// writes it, which reads back the same.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// String writes b in the largest unit that holds it whole: "512MiB",
// "1536KiB", "3B".
func (b ByteSize) String() string {
	for _, u := range byteUnits {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// approx writes b for a sentence, to a tenth in its largest unit: "5.3MiB".
func (b ByteSize) approx() string {
	for _, u := range byteUnits {
		if int64(b) >= u.mult && u.mult > 1 {
			if int64(b)%u.mult == 0 {
				return b.String()
			}
			return strconv.FormatFloat(float64(b)/float64(u.mult), 'f', 1, 64) + u.name
		}
	}
	return b.String()
}
