package wire

import (
	"context"
	"fmt"
)

// Schemas: an entry names its schema by the schema_version of the cluster
// that stored it. Forwarding an entry with a schema means fetching the
// schema by that version at the source (GetSchema), registering it at the
// target (GetOrCreateSchema, which answers the target's version for it)
// and rewriting schema_version (Patch.SchemaVersion). The schema commands'
// types and codecs are generated from commands.txt.

// SchemaType is a schema's kind (Schema.Type in the protocol: 0 None,
// 1 String, 2 Json, 3 Protobuf, 4 Avro, ... 15 KeyValue, 20
// ProtobufNative). It is carried through, never interpreted.
type SchemaType int32

// GetSchema fetches topic's schema by version (nil: the latest) from the
// broker serving topic. It returns the schema and its version.
func (c *Client) GetSchema(ctx context.Context, topic string, version []byte) (Schema, []byte, error) {
	op := "get schema of " + topic
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	conn, err := c.connFor(ctx, topic)
	if err != nil {
		return Schema{}, nil, fmt.Errorf("wire: %s: %w", op, err)
	}
	id := conn.newRequestID()
	cmd, err := conn.request(ctx, op, id, &GetSchema{RequestID: id, Topic: topic, Version: version})
	if err != nil {
		return Schema{}, nil, err
	}
	r, err := asType[*GetSchemaResponse](cmd, op)
	if err != nil {
		return Schema{}, nil, err
	}
	if r.HasError {
		return Schema{}, nil, &BrokerError{Op: op, Code: r.ErrorCode, Message: r.ErrorMessage}
	}
	if r.Schema == nil {
		return Schema{}, nil, fmt.Errorf("wire: %s: %w", op, malformed("response without schema"))
	}
	return *r.Schema, r.Version, nil
}

// GetOrCreateSchema registers s on topic (the broker checks compatibility)
// and returns its version there. It goes to the broker serving topic.
func (c *Client) GetOrCreateSchema(ctx context.Context, topic string, s Schema) ([]byte, error) {
	op := "get or create schema on " + topic
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	conn, err := c.connFor(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("wire: %s: %w", op, err)
	}
	id := conn.newRequestID()
	cmd, err := conn.request(ctx, op, id, &GetOrCreateSchema{RequestID: id, Topic: topic, Schema: s})
	if err != nil {
		return nil, err
	}
	r, err := asType[*GetOrCreateSchemaResponse](cmd, op)
	if err != nil {
		return nil, err
	}
	if r.HasError {
		return nil, &BrokerError{Op: op, Code: r.ErrorCode, Message: r.ErrorMessage}
	}
	return r.Version, nil
}
