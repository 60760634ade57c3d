package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// schemaSource is what a late copy needs of the source's broker: the
// schema an entry's version names there.
type schemaSource interface {
	GetSchema(ctx context.Context, topic string, version []byte) (wire.Schema, []byte, error)
}

// schemaTarget is what a late copy needs of the target's broker: the
// same schema registered on the topic written, and its number there.
type schemaTarget interface {
	GetOrCreateSchema(ctx context.Context, topic string, s wire.Schema) ([]byte, error)
}

// lateSchemas maps the source's schema versions to the target's for late
// copies (failback --replay, --park), as the entry pipe does for its
// copies: schema numbers are per cluster and per topic, so the number an
// entry carries on east names another schema, or none, on west's
// partition or on the park topic, and a typed consumer there would decode
// the copy with the wrong schema or not at all. Each version is fetched
// from the source once and registered on each topic written once. Not
// safe for concurrent use: one per copier.
type lateSchemas struct {
	src     schemaSource
	dst     schemaTarget
	srcName string
	dstName string
	known   map[string][]byte // topic written + "\x00" + source version → target version
	fetched map[string]wire.Schema
}

// errSchemaRefused marks a schema the target will not take on the topic
// written (incompatible with the schema there): the copy of that entry
// can never be made as it is.
var errSchemaRefused = errors.New("refused by the target")

// target returns the target's version, on topic (the topic written), of
// the schema that version names on the source's partition. An error
// names the cluster and the topic; the caller adds the entry. It never
// returns an empty version without an error: a copy under the source's
// number would be mislabelled.
func (s *lateSchemas) target(ctx context.Context, partition, topic string, version []byte) ([]byte, error) {
	key := topic + "\x00" + string(version)
	if v, ok := s.known[key]; ok {
		return v, nil
	}
	sch, ok := s.fetched[string(version)]
	if !ok {
		got, _, err := s.src.GetSchema(ctx, partition, version)
		if err != nil {
			var be *wire.BrokerError
			if errors.As(err, &be) && be.Code == wire.TopicNotFound {
				return nil, fmt.Errorf("schema version %s: %s no longer serves it on %s (the schema deleted since the entry was written?): %w",
					schemaVersionString(version), s.srcName, partition, err)
			}
			return nil, fmt.Errorf("schema version %s: fetch from %s: %w", schemaVersionString(version), s.srcName, err)
		}
		sch = got
		if s.fetched == nil {
			s.fetched = map[string]wire.Schema{}
		}
		s.fetched[string(version)] = sch
	}
	v, err := s.dst.GetOrCreateSchema(ctx, topic, sch)
	if err != nil {
		var be *wire.BrokerError
		if errors.As(err, &be) && be.Code == wire.IncompatibleSchema {
			return nil, fmt.Errorf("schema version %s of %s's %s: %w: %s does not take it on %s (incompatible with the schema there): %w",
				schemaVersionString(version), s.srcName, partition, errSchemaRefused, s.dstName, topic, err)
		}
		return nil, fmt.Errorf("schema version %s: register on %s's %s: %w", schemaVersionString(version), s.dstName, topic, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("schema version %s: %s answered no version for it on %s", schemaVersionString(version), s.dstName, topic)
	}
	if s.known == nil {
		s.known = map[string][]byte{}
	}
	s.known[key] = v
	return v, nil
}

// schemaVersionString is a schema version as an operator reads it:
// Pulsar's are 8-byte big-endian numbers, anything else is shown in hex.
func schemaVersionString(v []byte) string {
	if len(v) == 8 {
		return strconv.FormatUint(binary.BigEndian.Uint64(v), 10)
	}
	return hex.EncodeToString(v)
}
