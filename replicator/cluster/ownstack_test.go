package cluster

import (
	"errors"
	"testing"
)

func TestOwnStack(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		name string
		v    int
		err  error
	}{
		{"value", 7, nil},
		{"error", 0, boom},
		{"both", 3, boom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := OwnStack(func() (int, error) { return tt.v, tt.err })
			if v != tt.v || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("OwnStack = %d, %v; want %d, %v", v, err, tt.v, tt.err)
			}
		})
	}
}
