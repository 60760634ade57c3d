package config

import (
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

// Each budget's floor is on a target's share: the budget over the
// distinct targets of every pair in the file.
func TestValidateBudgets(t *testing.T) {
	tests := []struct {
		name    string
		targets [][]string // per replication entry, from source "a"
		set     func(*Sidecar)
		wantErr string // "" : valid
	}{
		{"the defaults, one target", [][]string{{"b"}}, func(s *Sidecar) {}, ""},
		{"the floor, one target", [][]string{{"b"}}, func(s *Sidecar) {
			s.ReceiveBudget, s.SendBudget, s.ReadBackBudget = MinBudgetShare, MinBudgetShare, MinBudgetShare
		}, ""},
		{"below the floor, one target", [][]string{{"b"}}, func(s *Sidecar) { s.ReceiveBudget = MinBudgetShare - 1 },
			"sidecar.receive_budget: 8388607B is below 8MiB, the least a target's share may be"},
		{"two targets need twice the floor", [][]string{{"b", "c"}}, func(s *Sidecar) { s.SendBudget = 12 << 20 },
			"sidecar.send_budget: 12MiB is 6MiB for each of 2 target clusters, below 8MiB, the least a target's share may be: one whole entry of the broker's default maximum message size (5MiB) with room for its metadata; at least 16MiB"},
		{"a target named twice counts once", [][]string{{"b"}, {"b"}}, func(s *Sidecar) {}, ""},
		{"targets of every entry count", [][]string{{"b"}, {"c"}}, func(s *Sidecar) { s.ReadBackBudget = 8 << 20 },
			"sidecar.readback_budget: 8MiB is 4MiB for each of 2 target clusters"},
		{"two targets at twice the floor", [][]string{{"b"}, {"c"}}, func(s *Sidecar) {
			s.ReceiveBudget, s.SendBudget, s.ReadBackBudget = 16<<20, 16<<20, 16<<20
		}, ""},
		{"negative, built in code", [][]string{{"b"}}, func(s *Sidecar) { s.SendBudget = -1 }, "sidecar.send_budget: -1B is below 8MiB"},
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
		})
	}
}
