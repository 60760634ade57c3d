package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

//go:generate go run gen.go

// The commands' types and codecs are generated from the table commands.txt
// into command_gen.go, together with the CommandType constants, their names
// and newBody. This file holds the rest: BaseCommand itself, MessageID's
// methods, the enums, and the two commands the table does not describe:
// Connect (a flag inside its feature_flags sub-message) and
// PartitionedMetadataResponse (its response field is the Failed flag, and
// the error and message go with it only).

// CommandType is BaseCommand's type. In BaseCommand the sub-message of a
// type is carried in the field with the same number.
type CommandType int32

func (t CommandType) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("COMMAND_%d", int32(t))
}

// ProtocolVersion is the protocol version this package announces (v20:
// topic migration). Everything used here exists since v15.
const ProtocolVersion = 20

// Body is the sub-message of one command type. Implementations are the
// pointer types below; they are plain values, safe to share once built.
type Body interface {
	Type() CommandType
	appendTo(b []byte) []byte
	decode(b []byte) error
}

// Command is a decoded BaseCommand. Body is nil for a type this package does
// not know (the connection ignores those).
type Command struct {
	Type CommandType
	Body Body
}

// AppendCommand appends the encoded BaseCommand for body to dst.
func AppendCommand(dst []byte, body Body) []byte {
	dst = appendU64(dst, 1, uint64(body.Type()))
	return appendMsg(dst, protowire.Number(body.Type()), body.appendTo)
}

// DecodeCommand decodes a BaseCommand. Unknown command types decode to a
// Command with a nil Body; malformed bytes give ErrMalformed. Decoded
// values never alias b.
func DecodeCommand(b []byte) (Command, error) {
	var (
		typ      CommandType
		body     []byte
		bodyNum  protowire.Number
		haveBody bool
	)
	seen, err := forEachField(b, func(f field) error {
		if f.num == 1 {
			v, err := f.int32()
			typ = CommandType(v)
			return err
		}
		if f.typ == protowire.BytesType {
			if haveBody {
				return malformed("BaseCommand carries sub-commands %d and %d", bodyNum, f.num)
			}
			body, bodyNum, haveBody = f.b, f.num, true
		}
		return nil
	})
	if err != nil {
		return Command{}, fmt.Errorf("BaseCommand: %w", err)
	}
	if err := need("BaseCommand", seen, 1); err != nil {
		return Command{}, err
	}
	if haveBody && bodyNum != protowire.Number(typ) {
		return Command{}, malformed("BaseCommand of type %v carries sub-command %d", typ, bodyNum)
	}
	c := Command{Type: typ, Body: newBody(typ)}
	if c.Body == nil {
		return c, nil
	}
	if !haveBody {
		switch typ {
		case TypePing, TypePong:
			return c, nil // an empty sub-message may be left out
		}
		return Command{}, malformed("%v without its sub-command", typ)
	}
	if err := c.Body.decode(body); err != nil {
		return Command{}, fmt.Errorf("%v: %w", typ, err)
	}
	return c, nil
}

// EntryID returns the id of the entry alone: acknowledging it acknowledges
// every message of the entry.
func EntryID(ledger, entry uint64) MessageID {
	return MessageID{Ledger: ledger, Entry: entry, Partition: -1, BatchIndex: -1}
}

func (id MessageID) String() string {
	if id.BatchIndex >= 0 {
		return fmt.Sprintf("%d:%d:%d", id.Ledger, id.Entry, id.BatchIndex)
	}
	return fmt.Sprintf("%d:%d", id.Ledger, id.Entry)
}

// Connect opens the session (CommandConnect).
type Connect struct {
	ClientVersion    string
	AuthMethodName   string
	AuthData         []byte
	ProtocolVersion  int32
	ProxyToBrokerURL string // host:port of the broker a proxy should forward to
	// SupportsAuthRefresh lets the broker send AUTH_CHALLENGE when the
	// credentials expire. supports_broker_entry_metadata is never announced:
	// entries then arrive exactly as stored by clients.
	SupportsAuthRefresh bool
}

func (*Connect) Type() CommandType { return TypeConnect }

func (c *Connect) appendTo(b []byte) []byte {
	b = appendStr(b, 1, c.ClientVersion)
	if c.AuthData != nil {
		b = appendBytes(b, 3, c.AuthData)
	}
	b = appendI32(b, 4, c.ProtocolVersion)
	if c.AuthMethodName != "" {
		b = appendStr(b, 5, c.AuthMethodName)
	}
	if c.ProxyToBrokerURL != "" {
		b = appendStr(b, 6, c.ProxyToBrokerURL)
	}
	if c.SupportsAuthRefresh {
		b = appendMsg(b, 10, func(b []byte) []byte { return appendBool(b, 1, true) })
	}
	return b
}

func (c *Connect) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&c.ClientVersion, f)
		case 3:
			return setBytes(&c.AuthData, f)
		case 4:
			return setI32(&c.ProtocolVersion, f)
		case 5:
			return setStr(&c.AuthMethodName, f)
		case 6:
			return setStr(&c.ProxyToBrokerURL, f)
		case 10:
			return decodeSub(f, "feature_flags", func(b []byte) error {
				_, err := forEachField(b, func(f field) error {
					if f.num == 1 {
						return setBool(&c.SupportsAuthRefresh, f)
					}
					return nil
				})
				return err
			})
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandConnect", seen, 1)
}

// SubType is a subscription type.
type SubType int32

// Subscription types. The sidecar's cursors are Failover, so that several
// instances share partitions with one active consumer per partition.
const (
	Exclusive SubType = 0
	Shared    SubType = 1
	Failover  SubType = 2
	KeyShared SubType = 3
)

// KeySharedMode is how a Key_Shared subscription shares the key hashes
// among its consumers.
type KeySharedMode int32

// Key_Shared modes. AUTO_SPLIT gives every consumer a share of the hash
// space whatever its permits; STICKY consumers bring fixed hash ranges.
const (
	KeySharedAutoSplit KeySharedMode = 0
	KeySharedSticky    KeySharedMode = 1
)

// InitialPosition is where a new subscription starts.
type InitialPosition int32

// Initial positions.
const (
	Latest   InitialPosition = 0
	Earliest InitialPosition = 1
)

// AckType is individual or cumulative.
type AckType int32

// Ack types. Cumulative is allowed on Exclusive and Failover subscriptions.
const (
	AckIndividual AckType = 0
	AckCumulative AckType = 1
)

// PartitionedMetadataResponse answers PartitionedMetadata. Partitions is 0
// for a non-partitioned topic.
type PartitionedMetadataResponse struct {
	RequestID  uint64
	Partitions uint32
	Failed     bool
	Error      ServerError
	Message    string
}

func (*PartitionedMetadataResponse) Type() CommandType { return TypePartitionedMetadataResponse }

func (p *PartitionedMetadataResponse) appendTo(b []byte) []byte {
	b = appendU64(b, 1, uint64(p.Partitions))
	b = appendU64(b, 2, p.RequestID)
	if p.Failed {
		b = appendI32(b, 3, 1)
		b = appendI32(b, 4, int32(p.Error))
		b = appendStr(b, 5, p.Message)
	} else {
		b = appendI32(b, 3, 0)
	}
	return b
}

func (p *PartitionedMetadataResponse) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU32(&p.Partitions, f)
		case 2:
			return setU64(&p.RequestID, f)
		case 3:
			var r int32
			err := setI32(&r, f)
			p.Failed = r == 1
			return err
		case 4:
			return setI32((*int32)(&p.Error), f)
		case 5:
			return setStr(&p.Message, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandPartitionedTopicMetadataResponse", seen, 2)
}

// LookupKind is the answer of a lookup.
type LookupKind int32

// Lookup answers: ask again at the given broker, connect to it, or fail.
const (
	LookupRedirect LookupKind = 0
	LookupConnect  LookupKind = 1
	LookupFailed   LookupKind = 2
)
