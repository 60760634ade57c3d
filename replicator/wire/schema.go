package wire

import (
	"context"
	"fmt"
)

// Schemas: an entry names its schema by the schema_version of the cluster
// that stored it. Forwarding an entry with a schema means fetching the
// schema by that version at the source (GetSchema), registering it at the
// target (GetOrCreateSchema, which answers the target's version for it)
// and rewriting schema_version (Patch.SchemaVersion).

// SchemaType is a schema's kind (Schema.Type in the protocol: 0 None,
// 1 String, 2 Json, 3 Protobuf, 4 Avro, ... 15 KeyValue, 20
// ProtobufNative). It is carried through, never interpreted.
type SchemaType int32

// Schema is a schema as the broker stores it.
type Schema struct {
	Name       string
	Data       []byte
	Type       SchemaType
	Properties []KeyValue
}

func (s *Schema) appendTo(b []byte) []byte {
	b = appendStr(b, 1, s.Name)
	b = appendBytes(b, 3, s.Data)
	b = appendI32(b, 4, int32(s.Type))
	for _, kv := range s.Properties {
		b = appendMsg(b, 5, kv.appendTo)
	}
	return b
}

func (s *Schema) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&s.Name, f)
		case 3:
			return setBytes(&s.Data, f)
		case 4:
			return setI32((*int32)(&s.Type), f)
		case 5:
			var kv KeyValue
			if err := decodeSub(f, "properties", kv.decode); err != nil {
				return err
			}
			s.Properties = append(s.Properties, kv)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("Schema", seen, 1, 4)
}

// GetSchema asks for a topic's schema by version (the latest when Version
// is nil).
type GetSchema struct {
	RequestID uint64
	Topic     string
	Version   []byte
}

func (*GetSchema) Type() CommandType { return TypeGetSchema }

func (g *GetSchema) appendTo(b []byte) []byte {
	b = appendU64(b, 1, g.RequestID)
	b = appendStr(b, 2, g.Topic)
	if g.Version != nil {
		b = appendBytes(b, 3, g.Version)
	}
	return b
}

func (g *GetSchema) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&g.RequestID, f)
		case 2:
			return setStr(&g.Topic, f)
		case 3:
			return setBytes(&g.Version, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandGetSchema", seen, 1, 2)
}

// GetSchemaResponse answers GetSchema.
type GetSchemaResponse struct {
	RequestID    uint64
	ErrorCode    ServerError
	ErrorMessage string
	HasError     bool
	Schema       *Schema
	Version      []byte
}

func (*GetSchemaResponse) Type() CommandType { return TypeGetSchemaResponse }

func (g *GetSchemaResponse) appendTo(b []byte) []byte {
	b = appendU64(b, 1, g.RequestID)
	if g.HasError {
		b = appendI32(b, 2, int32(g.ErrorCode))
		b = appendStr(b, 3, g.ErrorMessage)
	}
	if g.Schema != nil {
		b = appendMsg(b, 4, g.Schema.appendTo)
	}
	if g.Version != nil {
		b = appendBytes(b, 5, g.Version)
	}
	return b
}

func (g *GetSchemaResponse) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&g.RequestID, f)
		case 2:
			g.HasError = true
			return setI32((*int32)(&g.ErrorCode), f)
		case 3:
			return setStr(&g.ErrorMessage, f)
		case 4:
			g.Schema = &Schema{}
			return decodeSub(f, "schema", g.Schema.decode)
		case 5:
			return setBytes(&g.Version, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandGetSchemaResponse", seen, 1)
}

// GetOrCreateSchema registers a schema on a topic (or finds it) and
// answers its version there.
type GetOrCreateSchema struct {
	RequestID uint64
	Topic     string
	Schema    Schema
}

func (*GetOrCreateSchema) Type() CommandType { return TypeGetOrCreateSchema }

func (g *GetOrCreateSchema) appendTo(b []byte) []byte {
	b = appendU64(b, 1, g.RequestID)
	b = appendStr(b, 2, g.Topic)
	return appendMsg(b, 3, g.Schema.appendTo)
}

func (g *GetOrCreateSchema) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&g.RequestID, f)
		case 2:
			return setStr(&g.Topic, f)
		case 3:
			return decodeSub(f, "schema", g.Schema.decode)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandGetOrCreateSchema", seen, 1, 2, 3)
}

// GetOrCreateSchemaResponse answers GetOrCreateSchema.
type GetOrCreateSchemaResponse struct {
	RequestID    uint64
	ErrorCode    ServerError
	ErrorMessage string
	HasError     bool
	Version      []byte
}

func (*GetOrCreateSchemaResponse) Type() CommandType { return TypeGetOrCreateSchemaResponse }

func (g *GetOrCreateSchemaResponse) appendTo(b []byte) []byte {
	b = appendU64(b, 1, g.RequestID)
	if g.HasError {
		b = appendI32(b, 2, int32(g.ErrorCode))
		b = appendStr(b, 3, g.ErrorMessage)
	}
	if g.Version != nil {
		b = appendBytes(b, 4, g.Version)
	}
	return b
}

func (g *GetOrCreateSchemaResponse) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&g.RequestID, f)
		case 2:
			g.HasError = true
			return setI32((*int32)(&g.ErrorCode), f)
		case 3:
			return setStr(&g.ErrorMessage, f)
		case 4:
			return setBytes(&g.Version, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandGetOrCreateSchemaResponse", seen, 1)
}

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
