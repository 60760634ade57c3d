package config

import (
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    ByteSize
		wantErr string
	}{
		{`512MiB`, 512 << 20, ""},
		{`"1GiB"`, 1 << 30, ""},
		{`64 MiB`, 64 << 20, ""},
		{`1536KiB`, 1536 << 10, ""},
		{`8388608B`, 8 << 20, ""},
		{`2TiB`, 2 << 40, ""},
		{`0B`, 0, ""}, // decodes; Validate rejects it where it matters
		{`7B`, 7, ""},
		{`512`, 0, `"512" has no unit`},
		{`"512"`, 0, `"512" has no unit`},
		{`1.5`, 0, `"1.5" has no unit`},
		{`0x10`, 0, `"0x10" has no unit`},
		{`512MB`, 0, `"512MB": write the unit as B, KiB, MiB, GiB or TiB (powers of 1024), such as "512MiB"`},
		{`512M`, 0, `such as "512MiB"`},
		{`512Mi`, 0, `such as "512MiB"`},
		{`512mib`, 0, `such as "512MiB"`},
		{`1G`, 0, `such as "1GiB"`},
		{`4kb`, 0, `such as "4KiB"`},
		{`1.5GiB`, 0, `"1.5GiB" is not a size; write a whole number and a unit`},
		{`-5MiB`, 0, `"-5MiB" is not a size`},
		{`512  MiB`, 0, `is not a size`},
		{`lots`, 0, `"lots" is not a size`},
		{`512 bytes`, 0, `"512 bytes" has an unknown unit "bytes"`},
		{`9999999999TiB`, 0, `"9999999999TiB" is too large`},
		{`99999999999999999999B`, 0, `is too large`},
		{`[1MiB]`, 0, `got a list`},
		{`{a: 1}`, 0, `got a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var v struct{ B ByteSize }
			err := yaml.Unmarshal([]byte("b: "+tt.in), &v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if _, ok := err.(*yaml.TypeError); !ok {
					t.Errorf("error is %T, want *yaml.TypeError so decoding goes on", err)
				}
				return
			}
			if err != nil || v.B != tt.want {
				t.Fatalf("got %v, %v; want %v", int64(v.B), err, int64(tt.want))
			}
			out, err := yaml.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var back struct{ B ByteSize }
			if err := yaml.Unmarshal(out, &back); err != nil || back != v {
				t.Errorf("round trip via %q: got %v, %v", out, int64(back.B), err)
			}
		})
	}
}

func TestByteSizeString(t *testing.T) {
	for b, want := range map[ByteSize]string{
		0: "0B", 3: "3B", 1 << 10: "1KiB", 1536 << 10: "1536KiB", 512 << 20: "512MiB", 3 << 30: "3GiB", 1<<40 + 1: "1099511627777B",
	} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
	for b, want := range map[ByteSize]string{
		0: "0B", 1000: "1000B", (16 << 20) / 3: "5.3MiB", 15 << 19: "7.5MiB", 8 << 20: "8MiB", 1536 << 20: "1.5GiB",
	} {
		if got := b.approx(); got != want {
			t.Errorf("ByteSize(%d).approx() = %q, want %q", int64(b), got, want)
		}
	}
}

// Each budget must be at least the floor; a target's share (the budget
// over the distinct targets of every pair in the file) below it is
// warned about, not refused: a default config with many targets stays
// valid.
func TestValidateBudgets(t *testing.T) {
	tests := []struct {
		name     string
		targets  [][]string // per replication entry, from source "a"
		set      func(*Sidecar)
		wantErr  string // "": valid
		wantWarn []string
	}{
		{"the defaults, one target", [][]string{{"b"}}, func(s *Sidecar) {}, "", nil},
		{"the floor, one target", [][]string{{"b"}}, func(s *Sidecar) {
			s.ReceiveBudget, s.SendBudget, s.ReadBackBudget = MinBudgetShare, MinBudgetShare, MinBudgetShare
		}, "", nil},
		{"below the floor", [][]string{{"b"}}, func(s *Sidecar) { s.ReceiveBudget = MinBudgetShare - 1 },
			"sidecar.receive_budget: 8388607B is below 8MiB, the least a budget may be", nil},
		{"negative, built in code", [][]string{{"b"}}, func(s *Sidecar) { s.SendBudget = -1 }, "sidecar.send_budget: -1B is below 8MiB", nil},
		{"two targets: a share below the floor", [][]string{{"b", "c"}}, func(s *Sidecar) { s.SendBudget = 12 << 20 }, "", []string{
			"sidecar.send_budget: 12MiB is 6MiB for each of 2 target clusters, below 8MiB: an entry larger than a target's share passes alone, one at a time (set at least 16MiB)",
		}},
		{"a target named twice counts once", [][]string{{"b"}, {"b"}}, func(s *Sidecar) { s.ReadBackBudget = 8 << 20 }, "", nil},
		{"targets of every entry count", [][]string{{"b"}, {"c"}}, func(s *Sidecar) { s.ReadBackBudget, s.ReceiveBudget = 8<<20, 15<<20 }, "", []string{
			"sidecar.receive_budget: 15MiB is 7.5MiB for each of 2 target clusters",
			"sidecar.readback_budget: 8MiB is 4MiB for each of 2 target clusters",
		}},
		{"two targets at twice the floor", [][]string{{"b"}, {"c"}}, func(s *Sidecar) {
			s.ReceiveBudget, s.SendBudget, s.ReadBackBudget = 16<<20, 16<<20, 16<<20
		}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			c.Clusters = append(c.Clusters, Cluster{Name: "c", ServiceURL: "pulsar://c:6650", AdminURL: "http://c:8080", MaxPendingMessages: 1, KeepAlive: Duration{DefaultKeepAlive}})
			base := c.Replication[0]
			c.Replication = nil
			for i, ts := range tt.targets {
				r := base
				r.Targets, r.Namespace = ts, "t/n"+string(rune('0'+i))
				c.Replication = append(c.Replication, r)
			}
			c.Sidecar.ReceiveBudget, c.Sidecar.SendBudget, c.Sidecar.ReadBackBudget = DefaultReceiveBudget, DefaultSendBudget, DefaultReadBackBudget
			tt.set(&c.Sidecar)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			case tt.wantErr != "" && strings.Count(err.Error(), "\n") != 0:
				t.Errorf("Validate() = %v, want that one error only", err)
			}
			var got []Warning
			for _, w := range c.Warnings() {
				if w.Summary == WarnSmallBudget {
					got = append(got, w)
				}
			}
			if len(got) != len(tt.wantWarn) {
				t.Fatalf("budget warnings %q, want %d", got, len(tt.wantWarn))
			}
			for i, w := range tt.wantWarn {
				if !strings.Contains(got[i].Detail, w) {
					t.Errorf("warning %d:\n got: %s\nwant: …%s…", i, got[i].Detail, w)
				}
			}
		})
	}
}

// The defaults stay valid, without a budget warning, for up to 8 targets
// (the read-back budget's 64 MiB at 8 MiB a target), and valid with a
// warning beyond.
func TestDefaultBudgetsManyTargets(t *testing.T) {
	for _, tt := range []struct {
		targets int
		warn    bool
	}{{1, false}, {8, false}, {9, true}, {40, true}} {
		c := validConfig()
		c.Sidecar.ReceiveBudget, c.Sidecar.SendBudget, c.Sidecar.ReadBackBudget = DefaultReceiveBudget, DefaultSendBudget, DefaultReadBackBudget
		c.Replication[0].Targets = nil
		for i := range tt.targets {
			name := fmt.Sprintf("t%d", i)
			c.Clusters = append(c.Clusters, Cluster{Name: name, ServiceURL: "pulsar://" + name + ":6650", AdminURL: "http://" + name + ":8080", MaxPendingMessages: 1, KeepAlive: Duration{DefaultKeepAlive}})
			c.Replication[0].Targets = append(c.Replication[0].Targets, name)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%d targets: the defaults are invalid: %v", tt.targets, err)
		}
		warned := false
		for _, w := range c.Warnings() {
			warned = warned || w.Summary == WarnSmallBudget
		}
		if warned != tt.warn {
			t.Errorf("%d targets: warned %v, want %v", tt.targets, warned, tt.warn)
		}
	}
}
