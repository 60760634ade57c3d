package marker

import (
	"errors"
	"reflect"
	"testing"
)

// A key rotation in three steps: each sidecar decodes what any other
// sidecar of the same or a neighbouring step signs, and a key dropped
// from the accepted ones verifies nothing any more.
func TestKeysRotation(t *testing.T) {
	old, next, other := []byte("old-marker-key-0123456789"), []byte("new-marker-key-0123456789"), []byte("another-key-0123456789ab")
	m := validMarkers()["update"]
	signed := func(key []byte) []byte {
		b, err := Encode(m, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name    string
		keys    Keys
		payload []byte
		wantErr error
	}{
		{"signed with the current key", NewKeys(old), signed(old), nil},
		{"step 1: new key accepted before it signs", NewKeys(old, next), signed(next), nil},
		{"step 2: old key still accepted", NewKeys(next, old), signed(old), nil},
		{"step 2: current key", NewKeys(next, old), signed(next), nil},
		{"step 3: old key dropped", NewKeys(next), signed(old), ErrBadSignature},
		{"a key never accepted", NewKeys(next, old), signed(other), ErrBadSignature},
		{"no key", Keys{}, signed(old), ErrNoKey},
		{"accepted key without a current one", NewKeys(nil, old), signed(old), ErrNoKey},
		{"malformed under every key", NewKeys(next, old), []byte{1, 2}, ErrMalformed},
		{"empty accepted key ignored", NewKeys(next, nil, []byte{}), signed(other), ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.keys.Decode(tt.payload)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Decode() error = %v, want %v", err, tt.wantErr)
			}
			if err == nil && !reflect.DeepEqual(normalized(got), normalized(m)) {
				t.Errorf("Decode() = %+v, want %+v", got, m)
			}
		})
	}
}

// Keys sign with the current key only: a sidecar that already accepts
// the new key keeps signing what sidecars without it can read.
func TestKeysSignWithCurrent(t *testing.T) {
	old, next := []byte("old-marker-key-0123456789"), []byte("new-marker-key-0123456789")
	b, err := NewKeys(old, next).Encode(validMarkers()["update"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(b, old); err != nil {
		t.Errorf("signed with the current key: Decode under it = %v", err)
	}
	if _, err := Decode(b, next); !errors.Is(err, ErrBadSignature) {
		t.Errorf("Decode under the accepted key = %v, want %v", err, ErrBadSignature)
	}
	if k := NewKeys(old, next); len(k.Accepted()) != 2 || string(k.Accepted()[0]) != string(old) || string(k.Current()) != string(old) {
		t.Errorf("Accepted() = %q, want current first", k.Accepted())
	}
	if !(Keys{}).IsZero() || NewKeys(old).IsZero() {
		t.Error("IsZero wrong")
	}
}

// FuzzKeysDecode: under two keys, a payload decodes exactly when it does
// under one of them, to the same marker.
func FuzzKeysDecode(f *testing.F) {
	other := []byte("another-key-0123456789ab")
	for _, m := range validMarkers() {
		for _, key := range [][]byte{testKey, other} {
			b, err := Encode(m, key)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte{})
	keys := NewKeys(other, testKey)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := keys.Decode(data)
		m1, err1 := Decode(data, other)
		m2, err2 := Decode(data, testKey)
		switch {
		case err1 == nil:
			if err != nil || !reflect.DeepEqual(got, m1) {
				t.Fatalf("Keys.Decode = %+v, %v; Decode under the current key = %+v", got, err, m1)
			}
		case err2 == nil:
			if err != nil || !reflect.DeepEqual(got, m2) {
				t.Fatalf("Keys.Decode = %+v, %v; Decode under the accepted key = %+v", got, err, m2)
			}
		case err == nil:
			t.Fatalf("Keys.Decode accepted what no key verifies: %+v", got)
		}
	})
}
