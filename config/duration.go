package config

import (
	"fmt"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in YAML as Go writes durations: "30s",
// "1m30s", "500ms". It is a struct embedding time.Duration, rather than a
// named time.Duration, so that methods such as Seconds and String come along
// and the plain value is d.Duration.
//
// A bare number is rejected rather than read as nanoseconds or seconds:
// `interval: 30` is ambiguous, and guessing wrong by a factor of 10^9 is
// worse than asking for a unit.
type Duration struct{ time.Duration }

// UnmarshalYAML implements [yaml.Unmarshaler]. Its errors are
// [*yaml.TypeError]s, so yaml.v3 keeps decoding and reports them together
// with the file's other type errors.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return posError(n, fmt.Sprintf("expected a duration such as \"30s\", got %s", describeKind(n)))
	}
	_, numErr := strconv.ParseFloat(n.Value, 64)
	if numErr == nil || n.ShortTag() == "!!int" || n.ShortTag() == "!!float" {
		return posError(n, fmt.Sprintf("%q has no unit; write a duration with a unit such as \"30s\", \"1m\" or \"500ms\"", n.Value))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return posError(n, fmt.Sprintf("%q is not a duration; write one such as \"30s\", \"1m\" or \"500ms\"", n.Value))
	}
	d.Duration = v
	return nil
}

// MarshalYAML implements [yaml.Marshaler], so a Config written back out (for
// example to show the effective configuration) reads like the input.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}
