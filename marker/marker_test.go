package marker

import (
	"errors"
	"fmt"
	"testing"
)

// fakeMessage is the smallest PropertyReader.
type fakeMessage map[string]string

func (m fakeMessage) Properties() map[string]string { return m }

func TestIs(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		want  bool
	}{
		{"nil properties", nil, false},
		{"data message", map[string]string{"geo-sidecar.origin-cluster": "east"}, false},
		{"request", Properties(KindSnapshotRequest), true},
		{"update", Properties(KindUpdate), true},
		{"unknown kind is still a marker", map[string]string{Property: "99"}, true},
		{"empty value is still a marker", map[string]string{Property: ""}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Is(fakeMessage(tt.props)); got != tt.want {
				t.Fatalf("Is = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPropertiesAndKindOf(t *testing.T) {
	for _, k := range []Kind{KindSnapshotRequest, KindSnapshotResponse, KindSnapshot, KindUpdate, KindAcked} {
		props := Properties(k)
		if want := fmt.Sprint(uint8(k)); len(props) != 1 || props[Property] != want {
			t.Errorf("Properties(%v) = %v, want {%s: %s}", k, props, Property, want)
		}
		if got, ok := KindOf(props); !ok || got != k {
			t.Errorf("KindOf(Properties(%v)) = %v, %v", k, got, ok)
		}
		if !Is(fakeMessage(props)) {
			t.Errorf("Is(Properties(%v)) = false", k)
		}
	}
	// Each call returns a map of its own.
	a := Properties(KindUpdate)
	a["x"] = "y"
	if _, ok := Properties(KindUpdate)["x"]; ok {
		t.Error("Properties returns a shared map")
	}
	// An unknown kind is still tagged as a marker, so consumers skip it.
	if p := Properties(Kind(42)); p[Property] != "42" {
		t.Errorf("Properties(42) = %v", p)
	}
}

func TestKindOfRejects(t *testing.T) {
	for _, props := range []map[string]string{
		nil,
		{},
		{"other": "10"},
		{Property: ""},
		{Property: "9"},
		{Property: "15"},
		{Property: "010"},
		{Property: "+10"},
		{Property: " 10"},
		{Property: "10 "},
		{Property: "0x0a"},
		{Property: "snapshot"},
		{Property: "266"}, // 10 + 256: no silent wrap-around to uint8
	} {
		if k, ok := KindOf(props); ok {
			t.Errorf("KindOf(%q) = %v, true; want false", props, k)
		}
	}
}

func TestKindString(t *testing.T) {
	tests := map[Kind]string{
		KindSnapshotRequest:  "snapshot-request",
		KindSnapshotResponse: "snapshot-response",
		KindSnapshot:         "snapshot",
		KindUpdate:           "update",
		KindAcked:            "acked",
		0:                    "Kind(0)",
		15:                   "Kind(15)",
	}
	for k, want := range tests {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{ErrMalformed, "malformed"},
		{fmt.Errorf("marker: bad from: %w", ErrMalformed), "malformed"},
		{fmt.Errorf("marker: version 2: %w", ErrUnsupportedVersion), "version"},
		{ErrBadSignature, "signature"},
		{fmt.Errorf("partition 3: %w", ErrBadSignature), "signature"},
		{ErrNoKey, "other"},
		{errors.New("boom"), "other"},
		{nil, "other"},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	// Every error Decode can return maps to a label other than "other",
	// except a missing key, which is a configuration error.
	for _, payload := range [][]byte{nil, {2}, {1, 2, 3}, make([]byte, 64)} {
		_, err := Decode(payload, testKey)
		if Reason(err) == "other" {
			t.Errorf("Decode(%x): %v has reason other", payload, err)
		}
	}
}
