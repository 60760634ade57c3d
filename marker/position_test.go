package marker

import (
	"math"
	"testing"
)

func TestPositionCompare(t *testing.T) {
	p := func(l, e int64, b int32) Position { return Position{Ledger: l, Entry: e, Batch: b} }
	tests := []struct {
		name string
		a, b Position
		want int
	}{
		{"equal", p(5, 7, 2), p(5, 7, 2), 0},
		{"equal non-batched", p(5, 7, -1), p(5, 7, -1), 0},
		{"zero", Position{}, Position{}, 0},
		{"ledger first", p(4, 9, 9), p(5, 0, 0), -1},
		{"ledger beats entry and batch", p(6, 0, 0), p(5, math.MaxInt64, -1), 1},
		{"entry", p(5, 6, 9), p(5, 7, 0), -1},
		{"entry beats batch -1", p(5, 6, -1), p(5, 7, 0), -1},
		{"batch", p(5, 7, 1), p(5, 7, 2), -1},
		{"batch reversed", p(5, 7, 3), p(5, 7, 2), 1},
		{"non-batched after batch 0", p(5, 7, -1), p(5, 7, 0), 1},
		{"non-batched after the largest batch index", p(5, 7, -1), p(5, 7, math.MaxInt32), 1},
		{"batch index before non-batched", p(5, 7, 0), p(5, 7, -1), -1},
		{"other negative batch after non-negative", p(5, 7, -2), p(5, 7, 100), 1},
		{"-2 before -1", p(5, 7, -2), p(5, 7, -1), -1},
		{"negative ledger (earliest) first", p(-1, -1, -1), p(0, 0, 0), -1},
		{"large ledgers", p(math.MaxInt64, 0, 0), p(math.MaxInt64-1, math.MaxInt64, -1), 1},
		{"negative entry", p(5, -1, 0), p(5, 0, 0), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Compare(tt.b); got != tt.want {
				t.Fatalf("%v.Compare(%v) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
			if got := tt.b.Compare(tt.a); got != -tt.want {
				t.Fatalf("%v.Compare(%v) = %d, want %d", tt.b, tt.a, got, -tt.want)
			}
		})
	}
}

func TestPositionString(t *testing.T) {
	for _, tt := range []struct {
		p    Position
		want string
	}{
		{Position{}, "0:0:0"},
		{Position{Ledger: 17, Entry: 4, Batch: -1}, "17:4:-1"},
		{Position{Ledger: math.MaxInt64, Entry: math.MinInt64, Batch: math.MaxInt32}, "9223372036854775807:-9223372036854775808:2147483647"},
	} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestParsePosition(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Position
		ok   bool
	}{
		{"12:34:5", Position{Ledger: 12, Entry: 34, Batch: 5}, true},
		{"12:34:-1", Position{Ledger: 12, Entry: 34, Batch: -1}, true},
		{"0:0:0", Position{}, true},
		{"9223372036854775807:-1:-2147483648", Position{Ledger: math.MaxInt64, Entry: -1, Batch: math.MinInt32}, true},
		{"", Position{}, false},
		{"12:34", Position{}, false},
		{"1:2:3:4", Position{}, false},
		{"1:2:2147483648", Position{}, false},
		{"a:b:c", Position{}, false},
		{"12;34;5", Position{}, false},
	} {
		got, ok := ParsePosition(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParsePosition(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
