package config

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{`30s`, 30 * time.Second, ""},
		{`"1m"`, time.Minute, ""},
		{`500ms`, 500 * time.Millisecond, ""},
		{`1h2m3s`, time.Hour + 2*time.Minute + 3*time.Second, ""},
		{`-5s`, -5 * time.Second, ""}, // decodes; Validate rejects it where it matters
		{`30`, 0, `"30" has no unit`},
		{`0`, 0, `"0" has no unit`},
		{`1.5`, 0, `"1.5" has no unit`},
		{`"30"`, 0, `"30" has no unit`},
		{`30 s`, 0, `"30 s" is not a duration`},
		{`soon`, 0, `"soon" is not a duration`},
		{`[1s]`, 0, `got a list`},
		{`{s: 1}`, 0, `got a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var v struct{ D Duration }
			err := yaml.Unmarshal([]byte("d: "+tt.in), &v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if _, ok := err.(*yaml.TypeError); !ok {
					t.Errorf("error is %T, want *yaml.TypeError so decoding goes on", err)
				}
				return
			}
			if err != nil || v.D.Duration != tt.want {
				t.Fatalf("got %v, %v; want %v", v.D, err, tt.want)
			}

			out, err := yaml.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var back struct{ D Duration }
			if err := yaml.Unmarshal(out, &back); err != nil || back != v {
				t.Errorf("round trip via %q: got %v, %v", out, back.D, err)
			}
		})
	}
}
