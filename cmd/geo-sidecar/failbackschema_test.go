package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// fakeSchemas is both ends of lateSchemas: the source serves the schemas
// of its versions, the target numbers each schema it is given per topic
// from start (so that its numbers differ from the source's), or answers
// with err or an empty version.
type fakeSchemas struct {
	source   map[string]wire.Schema // version → schema
	srcErr   error
	dstErr   error
	noVer    bool
	start    byte
	regs     map[string]map[string]byte // topic → schema name → number
	gets     int
	creates  int
	lastSeen string
}

func (f *fakeSchemas) GetSchema(_ context.Context, topic string, version []byte) (wire.Schema, []byte, error) {
	f.gets++
	f.lastSeen = topic
	if f.srcErr != nil {
		return wire.Schema{}, nil, f.srcErr
	}
	s, ok := f.source[string(version)]
	if !ok {
		return wire.Schema{}, nil, &wire.BrokerError{Op: "get schema of " + topic, Code: wire.TopicNotFound}
	}
	return s, version, nil
}

func (f *fakeSchemas) GetOrCreateSchema(_ context.Context, topic string, s wire.Schema) ([]byte, error) {
	f.creates++
	if f.dstErr != nil {
		return nil, f.dstErr
	}
	if f.noVer {
		return nil, nil
	}
	if f.regs == nil {
		f.regs = map[string]map[string]byte{}
	}
	if f.regs[topic] == nil {
		f.regs[topic] = map[string]byte{}
	}
	n, ok := f.regs[topic][s.Name]
	if !ok {
		n = f.start + byte(len(f.regs[topic]))
		f.regs[topic][s.Name] = n
	}
	return []byte{0, 0, 0, 0, 0, 0, 0, n}, nil
}

func ver(n byte) []byte { return []byte{0, 0, 0, 0, 0, 0, 0, n} }

// TestLateSchemas: a late copy's schema version is the target's number
// for the entry's schema on the topic written (never the source's), each
// fetched and registered once; a schema the source no longer serves, one
// the target refuses and a target that answers no number each stop the
// copy with an error naming the version, the clusters and the topic.
func TestLateSchemas(t *testing.T) {
	const part, west, park = "persistent://t/ns/a-partition-0", "persistent://t/ns/a-partition-0", "persistent://t/ns/aside"
	v1, v2 := wire.Schema{Name: "v1", Type: 4}, wire.Schema{Name: "v2", Type: 4}
	type lookup struct {
		topic   string
		version []byte
		want    []byte // nil: an error
	}
	for _, tc := range []struct {
		name        string
		f           fakeSchemas
		lookups     []lookup
		wantErr     []string
		wantRefused bool
		gets        int
		creates     int
	}{
		{"the target's numbers, not the source's", fakeSchemas{source: map[string]wire.Schema{string(ver(0)): v1, string(ver(1)): v2}, start: 5},
			[]lookup{{west, ver(1), ver(5)}, {west, ver(0), ver(6)}, {west, ver(1), ver(5)}, {west, ver(0), ver(6)}}, nil, false, 2, 2},
		{"each topic written registers its own", fakeSchemas{source: map[string]wire.Schema{string(ver(0)): v1, string(ver(1)): v2}},
			[]lookup{{west, ver(1), ver(0)}, {park, ver(0), ver(0)}, {park, ver(1), ver(1)}, {west, ver(0), ver(1)}}, nil, false, 2, 4},
		{"the source no longer serves the version", fakeSchemas{source: map[string]wire.Schema{}},
			[]lookup{{west, ver(3), nil}}, []string{"schema version 3", "east no longer serves it on " + part}, false, 1, 0},
		{"the source unreachable", fakeSchemas{srcErr: errors.New("connection refused")},
			[]lookup{{west, ver(3), nil}}, []string{"schema version 3", "fetch from east", "connection refused"}, false, 1, 0},
		{"the target refuses the schema", fakeSchemas{source: map[string]wire.Schema{string(ver(0)): v1},
			dstErr: &wire.BrokerError{Op: "get or create schema on " + park, Code: wire.IncompatibleSchema, Message: "incompatible"}},
			[]lookup{{park, ver(0), nil}}, []string{"schema version 0 of east's " + part, "west does not take it on " + park}, true, 1, 1},
		{"the target answers no number", fakeSchemas{source: map[string]wire.Schema{string(ver(0)): v1}, noVer: true},
			[]lookup{{west, ver(0), nil}}, []string{"schema version 0", "west answered no version for it on " + west}, false, 1, 1},
		{"a version that is not 8 bytes", fakeSchemas{source: map[string]wire.Schema{"\x01\x02": v1}},
			[]lookup{{west, []byte{1, 2}, ver(0)}}, nil, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			s := lateSchemas{src: &f, dst: &f, srcName: "east", dstName: "west"}
			for _, l := range tc.lookups {
				got, err := s.target(context.Background(), part, l.topic, l.version)
				if l.want == nil {
					if err == nil {
						t.Fatalf("%s %x: %x, want an error", l.topic, l.version, got)
					}
					for _, w := range tc.wantErr {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error %q does not say %q", err, w)
						}
					}
					if errors.Is(err, errSchemaRefused) != tc.wantRefused {
						t.Errorf("error %q: refused %v, want %v", err, !tc.wantRefused, tc.wantRefused)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s %x: %v", l.topic, l.version, err)
				}
				if string(got) != string(l.want) {
					t.Errorf("%s, source's %x: the copy gets %x, want %x", l.topic, l.version, got, l.want)
				}
			}
			if f.gets != tc.gets || f.creates != tc.creates {
				t.Errorf("%d fetches and %d registrations, want %d and %d", f.gets, f.creates, tc.gets, tc.creates)
			}
			if f.gets > 0 && f.lastSeen != part {
				t.Errorf("fetched from %s, want the source's partition %s", f.lastSeen, part)
			}
		})
	}
}
