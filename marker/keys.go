package marker

import (
	"errors"
	"slices"
)

// Keys are a deployment's marker keys while one is being replaced: markers
// (and the entry path's signed origins) are signed with the current key and
// accepted under the current key or any accepted one. A rotation then needs
// no moment when every sidecar changes together:
//
//  1. every sidecar accepts the new key (the old one still signs);
//  2. every sidecar signs with the new key and accepts the old one;
//  3. once nothing signed with the old key is left to read, drop it.
//
// The zero value holds no key: nothing is signed and nothing verifies.
// Keys is immutable and safe for concurrent use.
type Keys struct {
	current  []byte
	accepted [][]byte // current first
}

// NewKeys returns the keys that sign with current and verify with current
// or any of accepted. Empty accepted keys are left out; with an empty
// current key the result is the zero Keys (an accepted key alone signs
// nothing and proves nothing).
func NewKeys(current []byte, accepted ...[]byte) Keys {
	if len(current) == 0 {
		return Keys{}
	}
	k := Keys{current: slices.Clone(current), accepted: [][]byte{slices.Clone(current)}}
	for _, a := range accepted {
		if len(a) > 0 {
			k.accepted = append(k.accepted, slices.Clone(a))
		}
	}
	return k
}

// IsZero reports whether k holds no key.
func (k Keys) IsZero() bool { return len(k.current) == 0 }

// Current is the key that signs; nil for the zero Keys. The caller must
// not change it.
func (k Keys) Current() []byte { return k.current }

// Accepted are the keys a signature may verify under, the current one
// first; nil for the zero Keys. The caller must not change them.
func (k Keys) Accepted() [][]byte { return k.accepted }

// Encode is [Encode] with the current key.
func (k Keys) Encode(m Marker) ([]byte, error) { return Encode(m, k.current) }

// Decode is [Decode] under each accepted key in turn: the marker of the
// first key it verifies under. A payload that verifies under none fails
// with [ErrBadSignature]; one that is malformed or of another version
// fails as [Decode] does, whatever the key.
func (k Keys) Decode(payload []byte) (Marker, error) {
	if k.IsZero() {
		return Marker{}, ErrNoKey
	}
	var err error
	for _, key := range k.accepted {
		var m Marker
		if m, err = Decode(payload, key); !errors.Is(err, ErrBadSignature) {
			return m, err
		}
	}
	return Marker{}, err
}
