package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// CommandType is BaseCommand's type. In BaseCommand the sub-message of a
// type is carried in the field with the same number.
type CommandType int32

// The command types this package speaks (numbers from the protocol).
const (
	TypeConnect                     CommandType = 2
	TypeConnected                   CommandType = 3
	TypeSubscribe                   CommandType = 4
	TypeProducer                    CommandType = 5
	TypeSend                        CommandType = 6
	TypeSendReceipt                 CommandType = 7
	TypeSendError                   CommandType = 8
	TypeMessage                     CommandType = 9
	TypeAck                         CommandType = 10
	TypeFlow                        CommandType = 11
	TypeSuccess                     CommandType = 13
	TypeError                       CommandType = 14
	TypeCloseProducer               CommandType = 15
	TypeCloseConsumer               CommandType = 16
	TypeProducerSuccess             CommandType = 17
	TypePing                        CommandType = 18
	TypePong                        CommandType = 19
	TypeRedeliverUnacknowledged     CommandType = 20
	TypePartitionedMetadata         CommandType = 21
	TypePartitionedMetadataResponse CommandType = 22
	TypeLookup                      CommandType = 23
	TypeLookupResponse              CommandType = 24
	TypeReachedEndOfTopic           CommandType = 27
	TypeGetLastMessageID            CommandType = 29
	TypeGetLastMessageIDResponse    CommandType = 30
	TypeActiveConsumerChange        CommandType = 31
	TypeGetSchema                   CommandType = 34
	TypeGetSchemaResponse           CommandType = 35
	TypeAuthChallenge               CommandType = 36
	TypeAuthResponse                CommandType = 37
	TypeGetOrCreateSchema           CommandType = 39
	TypeGetOrCreateSchemaResponse   CommandType = 40
	TypeTopicMigrated               CommandType = 68
)

var typeNames = map[CommandType]string{
	TypeConnect: "CONNECT", TypeConnected: "CONNECTED", TypeSubscribe: "SUBSCRIBE",
	TypeProducer: "PRODUCER", TypeSend: "SEND", TypeSendReceipt: "SEND_RECEIPT",
	TypeSendError: "SEND_ERROR", TypeMessage: "MESSAGE", TypeAck: "ACK", TypeFlow: "FLOW",
	TypeSuccess: "SUCCESS", TypeError: "ERROR", TypeCloseProducer: "CLOSE_PRODUCER",
	TypeCloseConsumer: "CLOSE_CONSUMER", TypeProducerSuccess: "PRODUCER_SUCCESS",
	TypePing: "PING", TypePong: "PONG", TypeRedeliverUnacknowledged: "REDELIVER_UNACKNOWLEDGED_MESSAGES",
	TypePartitionedMetadata: "PARTITIONED_METADATA", TypePartitionedMetadataResponse: "PARTITIONED_METADATA_RESPONSE",
	TypeLookup: "LOOKUP", TypeLookupResponse: "LOOKUP_RESPONSE", TypeReachedEndOfTopic: "REACHED_END_OF_TOPIC",
	TypeActiveConsumerChange: "ACTIVE_CONSUMER_CHANGE", TypeAuthChallenge: "AUTH_CHALLENGE",
	TypeAuthResponse: "AUTH_RESPONSE", TypeTopicMigrated: "TOPIC_MIGRATED",
	TypeGetLastMessageID: "GET_LAST_MESSAGE_ID", TypeGetLastMessageIDResponse: "GET_LAST_MESSAGE_ID_RESPONSE",
	TypeGetSchema: "GET_SCHEMA", TypeGetSchemaResponse: "GET_SCHEMA_RESPONSE",
	TypeGetOrCreateSchema: "GET_OR_CREATE_SCHEMA", TypeGetOrCreateSchemaResponse: "GET_OR_CREATE_SCHEMA_RESPONSE",
}

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

// newBody returns an empty body for t, or nil for unknown types.
func newBody(t CommandType) Body {
	switch t {
	case TypeConnect:
		return &Connect{}
	case TypeConnected:
		return &Connected{}
	case TypeSubscribe:
		return &SubscribeCommand{}
	case TypeProducer:
		return &ProducerCommand{}
	case TypeSend:
		return &Send{}
	case TypeSendReceipt:
		return &SendReceipt{}
	case TypeSendError:
		return &SendError{}
	case TypeMessage:
		return &Message{}
	case TypeAck:
		return &Ack{}
	case TypeFlow:
		return &Flow{}
	case TypeSuccess:
		return &Success{}
	case TypeError:
		return &Error{}
	case TypeCloseProducer:
		return &CloseProducer{}
	case TypeCloseConsumer:
		return &CloseConsumer{}
	case TypeProducerSuccess:
		return &ProducerSuccess{}
	case TypePing:
		return &Ping{}
	case TypePong:
		return &Pong{}
	case TypeRedeliverUnacknowledged:
		return &RedeliverUnacknowledged{}
	case TypePartitionedMetadata:
		return &PartitionedMetadata{}
	case TypePartitionedMetadataResponse:
		return &PartitionedMetadataResponse{}
	case TypeLookup:
		return &Lookup{}
	case TypeLookupResponse:
		return &LookupResponse{}
	case TypeReachedEndOfTopic:
		return &ReachedEndOfTopic{}
	case TypeActiveConsumerChange:
		return &ActiveConsumerChange{}
	case TypeAuthChallenge:
		return &AuthChallenge{}
	case TypeAuthResponse:
		return &AuthResponse{}
	case TypeTopicMigrated:
		return &TopicMigrated{}
	case TypeGetLastMessageID:
		return &GetLastMessageID{}
	case TypeGetLastMessageIDResponse:
		return &GetLastMessageIDResponse{}
	case TypeGetSchema:
		return &GetSchema{}
	case TypeGetSchemaResponse:
		return &GetSchemaResponse{}
	case TypeGetOrCreateSchema:
		return &GetOrCreateSchema{}
	case TypeGetOrCreateSchemaResponse:
		return &GetOrCreateSchemaResponse{}
	}
	return nil
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

// MessageID identifies an entry (ledger, entry) or a message inside a batch
// entry (BatchIndex >= 0). Partition is informational.
type MessageID struct {
	Ledger     uint64
	Entry      uint64
	Partition  int32 // -1 when absent
	BatchIndex int32 // -1 when absent: the whole entry
	BatchSize  int32 // 0 when absent
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

func (id *MessageID) decode(b []byte) error {
	id.Partition, id.BatchIndex = -1, -1
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&id.Ledger, f)
		case 2:
			return setU64(&id.Entry, f)
		case 3:
			return setI32(&id.Partition, f)
		case 4:
			return setI32(&id.BatchIndex, f)
		case 6:
			return setI32(&id.BatchSize, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("MessageIdData", seen, 1, 2)
}

func (id MessageID) appendTo(b []byte) []byte {
	b = appendU64(b, 1, id.Ledger)
	b = appendU64(b, 2, id.Entry)
	if id.Partition >= 0 {
		b = appendI32(b, 3, id.Partition)
	}
	if id.BatchIndex >= 0 {
		b = appendI32(b, 4, id.BatchIndex)
	}
	if id.BatchSize > 0 {
		b = appendI32(b, 6, id.BatchSize)
	}
	return b
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

// Connected completes the handshake (CommandConnected).
type Connected struct {
	ServerVersion   string
	ProtocolVersion int32
	MaxMessageSize  int32 // 0 when the broker did not say
}

func (*Connected) Type() CommandType { return TypeConnected }

func (c *Connected) appendTo(b []byte) []byte {
	b = appendStr(b, 1, c.ServerVersion)
	b = appendI32(b, 2, c.ProtocolVersion)
	if c.MaxMessageSize > 0 {
		b = appendI32(b, 3, c.MaxMessageSize)
	}
	return b
}

func (c *Connected) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&c.ServerVersion, f)
		case 2:
			return setI32(&c.ProtocolVersion, f)
		case 3:
			return setI32(&c.MaxMessageSize, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandConnected", seen, 1)
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

// InitialPosition is where a new subscription starts.
type InitialPosition int32

// Initial positions.
const (
	Latest   InitialPosition = 0
	Earliest InitialPosition = 1
)

// SubscribeCommand creates a consumer (CommandSubscribe).
type SubscribeCommand struct {
	Topic           string
	Subscription    string
	SubType         SubType
	ConsumerID      uint64
	RequestID       uint64
	ConsumerName    string
	PriorityLevel   int32
	InitialPosition InitialPosition
	// NoTopicCreation sets force_topic_creation=false: subscribing to a
	// missing topic fails instead of creating it.
	NoTopicCreation bool
	// ConsumerEpoch announces redelivery epochs: the broker tags MESSAGE
	// with the epoch, so messages dispatched before a redelivery request
	// can be told apart.
	ConsumerEpoch uint64
	// NonDurable makes a reader: no cursor is stored.
	NonDurable bool
	// StartMessageID positions a non-durable subscription: reading starts
	// after it, or at its entry when it has a batch index.
	StartMessageID *MessageID
}

func (*SubscribeCommand) Type() CommandType { return TypeSubscribe }

func (s *SubscribeCommand) appendTo(b []byte) []byte {
	b = appendStr(b, 1, s.Topic)
	b = appendStr(b, 2, s.Subscription)
	b = appendI32(b, 3, int32(s.SubType))
	b = appendU64(b, 4, s.ConsumerID)
	b = appendU64(b, 5, s.RequestID)
	if s.ConsumerName != "" {
		b = appendStr(b, 6, s.ConsumerName)
	}
	if s.PriorityLevel != 0 {
		b = appendI32(b, 7, s.PriorityLevel)
	}
	b = appendBool(b, 8, !s.NonDurable)
	if s.StartMessageID != nil {
		b = appendMsg(b, 9, s.StartMessageID.appendTo)
	}
	b = appendI32(b, 13, int32(s.InitialPosition))
	if s.NoTopicCreation {
		b = appendBool(b, 15, false)
	}
	b = appendU64(b, 19, s.ConsumerEpoch)
	return b
}

func (s *SubscribeCommand) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&s.Topic, f)
		case 2:
			return setStr(&s.Subscription, f)
		case 3:
			return setI32((*int32)(&s.SubType), f)
		case 4:
			return setU64(&s.ConsumerID, f)
		case 5:
			return setU64(&s.RequestID, f)
		case 6:
			return setStr(&s.ConsumerName, f)
		case 7:
			return setI32(&s.PriorityLevel, f)
		case 8:
			var durable bool
			err := setBool(&durable, f)
			s.NonDurable = !durable
			return err
		case 9:
			s.StartMessageID = &MessageID{}
			return decodeSub(f, "start_message_id", s.StartMessageID.decode)
		case 13:
			return setI32((*int32)(&s.InitialPosition), f)
		case 15:
			var force bool
			err := setBool(&force, f)
			s.NoTopicCreation = !force
			return err
		case 19:
			return setU64(&s.ConsumerEpoch, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandSubscribe", seen, 1, 2, 3, 4, 5)
}

// ProducerCommand creates a producer (CommandProducer). With a ProducerName the
// broker's deduplication state for that name applies.
type ProducerCommand struct {
	Topic        string
	ProducerID   uint64
	RequestID    uint64
	ProducerName string
	// Encrypted declares that the producer may send encrypted entries: a
	// topic that requires encryption refuses a producer without it.
	Encrypted bool
}

func (*ProducerCommand) Type() CommandType { return TypeProducer }

func (p *ProducerCommand) appendTo(b []byte) []byte {
	b = appendStr(b, 1, p.Topic)
	b = appendU64(b, 2, p.ProducerID)
	b = appendU64(b, 3, p.RequestID)
	if p.ProducerName != "" {
		b = appendStr(b, 4, p.ProducerName)
	}
	if p.Encrypted {
		b = appendBool(b, 5, true)
	}
	if p.ProducerName != "" {
		b = appendBool(b, 9, true) // user_provided_producer_name
	}
	return b
}

func (p *ProducerCommand) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&p.Topic, f)
		case 2:
			return setU64(&p.ProducerID, f)
		case 3:
			return setU64(&p.RequestID, f)
		case 4:
			return setStr(&p.ProducerName, f)
		case 5:
			return setBool(&p.Encrypted, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandProducer", seen, 1, 2, 3)
}

// ProducerSuccess answers Producer (CommandProducerSuccess).
type ProducerSuccess struct {
	RequestID    uint64
	ProducerName string
	// LastSequenceID is the highest sequence id the broker persisted for
	// this producer name when deduplication is on, else -1.
	LastSequenceID int64
	SchemaVersion  []byte
	// NotReady: the producer is queued (exclusive access modes); another
	// ProducerSuccess follows when it becomes ready.
	NotReady bool
}

func (*ProducerSuccess) Type() CommandType { return TypeProducerSuccess }

func (p *ProducerSuccess) appendTo(b []byte) []byte {
	b = appendU64(b, 1, p.RequestID)
	b = appendStr(b, 2, p.ProducerName)
	b = appendI64(b, 3, p.LastSequenceID)
	if p.SchemaVersion != nil {
		b = appendBytes(b, 4, p.SchemaVersion)
	}
	if p.NotReady {
		b = appendBool(b, 6, false)
	}
	return b
}

func (p *ProducerSuccess) decode(b []byte) error {
	p.LastSequenceID = -1
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&p.RequestID, f)
		case 2:
			return setStr(&p.ProducerName, f)
		case 3:
			return setI64(&p.LastSequenceID, f)
		case 4:
			return setBytes(&p.SchemaVersion, f)
		case 6:
			var ready bool
			err := setBool(&ready, f)
			p.NotReady = !ready
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandProducerSuccess", seen, 1, 2)
}

// Send publishes one entry (CommandSend); the frame carries its metadata
// and payload. SequenceID..HighestSequenceID is the range deduplication
// checks; NumMessages is the entry's batch size.
type Send struct {
	ProducerID        uint64
	SequenceID        uint64
	NumMessages       int32
	HighestSequenceID uint64
	IsChunk           bool
	Marker            bool
}

func (*Send) Type() CommandType { return TypeSend }

func (s *Send) appendTo(b []byte) []byte {
	b = appendU64(b, 1, s.ProducerID)
	b = appendU64(b, 2, s.SequenceID)
	if s.NumMessages > 1 {
		b = appendI32(b, 3, s.NumMessages)
	}
	if s.HighestSequenceID > 0 {
		b = appendU64(b, 6, s.HighestSequenceID)
	}
	if s.IsChunk {
		b = appendBool(b, 7, true)
	}
	if s.Marker {
		b = appendBool(b, 8, true)
	}
	return b
}

func (s *Send) decode(b []byte) error {
	s.NumMessages = 1
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&s.ProducerID, f)
		case 2:
			return setU64(&s.SequenceID, f)
		case 3:
			return setI32(&s.NumMessages, f)
		case 6:
			return setU64(&s.HighestSequenceID, f)
		case 7:
			return setBool(&s.IsChunk, f)
		case 8:
			return setBool(&s.Marker, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandSend", seen, 1, 2)
}

// SendReceipt confirms a Send (CommandSendReceipt). A duplicate dropped by
// deduplication is confirmed too, with a message id the broker chooses
// (-1:-1 on Pulsar 4).
type SendReceipt struct {
	ProducerID        uint64
	SequenceID        uint64
	MessageID         MessageID
	HighestSequenceID uint64
}

func (*SendReceipt) Type() CommandType { return TypeSendReceipt }

func (r *SendReceipt) appendTo(b []byte) []byte {
	b = appendU64(b, 1, r.ProducerID)
	b = appendU64(b, 2, r.SequenceID)
	b = appendMsg(b, 3, r.MessageID.appendTo)
	if r.HighestSequenceID > 0 {
		b = appendU64(b, 4, r.HighestSequenceID)
	}
	return b
}

func (r *SendReceipt) decode(b []byte) error {
	r.MessageID = MessageID{Partition: -1, BatchIndex: -1}
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&r.ProducerID, f)
		case 2:
			return setU64(&r.SequenceID, f)
		case 3:
			return decodeSub(f, "message_id", r.MessageID.decode)
		case 4:
			return setU64(&r.HighestSequenceID, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandSendReceipt", seen, 1, 2)
}

// SendError rejects a Send (CommandSendError).
type SendError struct {
	ProducerID uint64
	SequenceID uint64
	Error      ServerError
	Message    string
}

func (*SendError) Type() CommandType { return TypeSendError }

func (e *SendError) appendTo(b []byte) []byte {
	b = appendU64(b, 1, e.ProducerID)
	b = appendU64(b, 2, e.SequenceID)
	b = appendI32(b, 3, int32(e.Error))
	return appendStr(b, 4, e.Message)
}

func (e *SendError) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&e.ProducerID, f)
		case 2:
			return setU64(&e.SequenceID, f)
		case 3:
			return setI32((*int32)(&e.Error), f)
		case 4:
			return setStr(&e.Message, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandSendError", seen, 1, 2)
}

// Message delivers one entry to a consumer (CommandMessage); the frame
// carries the entry's metadata and payload.
type Message struct {
	ConsumerID      uint64
	MessageID       MessageID
	RedeliveryCount uint32
	// ConsumerEpoch is the redelivery epoch the broker dispatched under,
	// when the consumer announced epochs (HasConsumerEpoch).
	ConsumerEpoch    uint64
	HasConsumerEpoch bool
}

func (*Message) Type() CommandType { return TypeMessage }

func (m *Message) appendTo(b []byte) []byte {
	b = appendU64(b, 1, m.ConsumerID)
	b = appendMsg(b, 2, m.MessageID.appendTo)
	if m.RedeliveryCount > 0 {
		b = appendU64(b, 3, uint64(m.RedeliveryCount))
	}
	if m.HasConsumerEpoch {
		b = appendU64(b, 5, m.ConsumerEpoch)
	}
	return b
}

func (m *Message) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&m.ConsumerID, f)
		case 2:
			return decodeSub(f, "message_id", m.MessageID.decode)
		case 3:
			return setU32(&m.RedeliveryCount, f)
		case 5:
			m.HasConsumerEpoch = true
			return setU64(&m.ConsumerEpoch, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandMessage", seen, 1, 2)
}

// AckType is individual or cumulative.
type AckType int32

// Ack types. Cumulative is allowed on Exclusive and Failover subscriptions.
const (
	AckIndividual AckType = 0
	AckCumulative AckType = 1
)

// Ack acknowledges messages (CommandAck). An entry-level id (BatchIndex
// -1) acknowledges the whole entry.
type Ack struct {
	ConsumerID uint64
	AckType    AckType
	MessageIDs []MessageID
}

func (*Ack) Type() CommandType { return TypeAck }

func (a *Ack) appendTo(b []byte) []byte {
	b = appendU64(b, 1, a.ConsumerID)
	b = appendI32(b, 2, int32(a.AckType))
	for _, id := range a.MessageIDs {
		b = appendMsg(b, 3, id.appendTo)
	}
	return b
}

func (a *Ack) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&a.ConsumerID, f)
		case 2:
			return setI32((*int32)(&a.AckType), f)
		case 3:
			var id MessageID
			if err := decodeSub(f, "message_id", id.decode); err != nil {
				return err
			}
			a.MessageIDs = append(a.MessageIDs, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandAck", seen, 1, 2)
}

// Flow grants the broker permits to push more messages (CommandFlow).
// Permits count messages, not entries: a batch entry of n messages takes n.
type Flow struct {
	ConsumerID uint64
	Permits    uint32
}

func (*Flow) Type() CommandType { return TypeFlow }

func (f *Flow) appendTo(b []byte) []byte {
	b = appendU64(b, 1, f.ConsumerID)
	return appendU64(b, 2, uint64(f.Permits))
}

func (fl *Flow) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&fl.ConsumerID, f)
		case 2:
			return setU32(&fl.Permits, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandFlow", seen, 1, 2)
}

// Success answers a request without a specific response (CommandSuccess).
type Success struct {
	RequestID uint64
}

func (*Success) Type() CommandType { return TypeSuccess }

func (s *Success) appendTo(b []byte) []byte { return appendU64(b, 1, s.RequestID) }

func (s *Success) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		if f.num == 1 {
			return setU64(&s.RequestID, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandSuccess", seen, 1)
}

// Error answers a request with a failure (CommandError).
type Error struct {
	RequestID uint64
	Error     ServerError
	Message   string
}

func (*Error) Type() CommandType { return TypeError }

func (e *Error) appendTo(b []byte) []byte {
	b = appendU64(b, 1, e.RequestID)
	b = appendI32(b, 2, int32(e.Error))
	return appendStr(b, 3, e.Message)
}

func (e *Error) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&e.RequestID, f)
		case 2:
			return setI32((*int32)(&e.Error), f)
		case 3:
			return setStr(&e.Message, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandError", seen, 1)
}

// CloseProducer closes a producer (CommandCloseProducer); from the broker
// it means "look the topic up again and re-create".
type CloseProducer struct {
	ProducerID           uint64
	RequestID            uint64
	AssignedBrokerURL    string
	AssignedBrokerURLTLS string
}

func (*CloseProducer) Type() CommandType { return TypeCloseProducer }

func (c *CloseProducer) appendTo(b []byte) []byte {
	b = appendU64(b, 1, c.ProducerID)
	b = appendU64(b, 2, c.RequestID)
	if c.AssignedBrokerURL != "" {
		b = appendStr(b, 3, c.AssignedBrokerURL)
	}
	if c.AssignedBrokerURLTLS != "" {
		b = appendStr(b, 4, c.AssignedBrokerURLTLS)
	}
	return b
}

func (c *CloseProducer) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&c.ProducerID, f)
		case 2:
			return setU64(&c.RequestID, f)
		case 3:
			return setStr(&c.AssignedBrokerURL, f)
		case 4:
			return setStr(&c.AssignedBrokerURLTLS, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandCloseProducer", seen, 1)
}

// CloseConsumer closes a consumer (CommandCloseConsumer); from the broker
// it means "look the topic up again and re-subscribe".
type CloseConsumer struct {
	ConsumerID           uint64
	RequestID            uint64
	AssignedBrokerURL    string
	AssignedBrokerURLTLS string
}

func (*CloseConsumer) Type() CommandType { return TypeCloseConsumer }

func (c *CloseConsumer) appendTo(b []byte) []byte {
	b = appendU64(b, 1, c.ConsumerID)
	b = appendU64(b, 2, c.RequestID)
	if c.AssignedBrokerURL != "" {
		b = appendStr(b, 3, c.AssignedBrokerURL)
	}
	if c.AssignedBrokerURLTLS != "" {
		b = appendStr(b, 4, c.AssignedBrokerURLTLS)
	}
	return b
}

func (c *CloseConsumer) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&c.ConsumerID, f)
		case 2:
			return setU64(&c.RequestID, f)
		case 3:
			return setStr(&c.AssignedBrokerURL, f)
		case 4:
			return setStr(&c.AssignedBrokerURLTLS, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandCloseConsumer", seen, 1)
}

// Ping probes the connection; the peer answers Pong.
type Ping struct{}

func (*Ping) Type() CommandType        { return TypePing }
func (*Ping) appendTo(b []byte) []byte { return b }
func (*Ping) decode(b []byte) error {
	_, err := forEachField(b, func(field) error { return nil })
	return err
}

// Pong answers Ping.
type Pong struct{}

func (*Pong) Type() CommandType        { return TypePong }
func (*Pong) appendTo(b []byte) []byte { return b }
func (*Pong) decode(b []byte) error {
	_, err := forEachField(b, func(field) error { return nil })
	return err
}

// RedeliverUnacknowledged asks the broker to send again the consumer's
// unacknowledged messages (all of them when MessageIDs is empty).
type RedeliverUnacknowledged struct {
	ConsumerID    uint64
	MessageIDs    []MessageID
	ConsumerEpoch uint64 // the new epoch; sent when > 0
}

func (*RedeliverUnacknowledged) Type() CommandType { return TypeRedeliverUnacknowledged }

func (r *RedeliverUnacknowledged) appendTo(b []byte) []byte {
	b = appendU64(b, 1, r.ConsumerID)
	for _, id := range r.MessageIDs {
		b = appendMsg(b, 2, id.appendTo)
	}
	if r.ConsumerEpoch > 0 {
		b = appendU64(b, 3, r.ConsumerEpoch)
	}
	return b
}

func (r *RedeliverUnacknowledged) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&r.ConsumerID, f)
		case 2:
			var id MessageID
			if err := decodeSub(f, "message_ids", id.decode); err != nil {
				return err
			}
			r.MessageIDs = append(r.MessageIDs, id)
		case 3:
			return setU64(&r.ConsumerEpoch, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandRedeliverUnacknowledgedMessages", seen, 1)
}

// PartitionedMetadata asks for a topic's partition count.
type PartitionedMetadata struct {
	Topic     string
	RequestID uint64
}

func (*PartitionedMetadata) Type() CommandType { return TypePartitionedMetadata }

func (p *PartitionedMetadata) appendTo(b []byte) []byte {
	b = appendStr(b, 1, p.Topic)
	return appendU64(b, 2, p.RequestID)
}

func (p *PartitionedMetadata) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&p.Topic, f)
		case 2:
			return setU64(&p.RequestID, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandPartitionedTopicMetadata", seen, 1, 2)
}

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

// Lookup asks which broker serves a topic (CommandLookupTopic).
type Lookup struct {
	Topic         string
	RequestID     uint64
	Authoritative bool
}

func (*Lookup) Type() CommandType { return TypeLookup }

func (l *Lookup) appendTo(b []byte) []byte {
	b = appendStr(b, 1, l.Topic)
	b = appendU64(b, 2, l.RequestID)
	return appendBool(b, 3, l.Authoritative)
}

func (l *Lookup) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&l.Topic, f)
		case 2:
			return setU64(&l.RequestID, f)
		case 3:
			return setBool(&l.Authoritative, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandLookupTopic", seen, 1, 2)
}

// LookupKind is the answer of a lookup.
type LookupKind int32

// Lookup answers: ask again at the given broker, connect to it, or fail.
const (
	LookupRedirect LookupKind = 0
	LookupConnect  LookupKind = 1
	LookupFailed   LookupKind = 2
)

// LookupResponse answers Lookup (CommandLookupTopicResponse).
type LookupResponse struct {
	RequestID           uint64
	Kind                LookupKind
	BrokerServiceURL    string
	BrokerServiceURLTLS string
	Authoritative       bool
	// ProxyThroughServiceURL: keep connecting to the service URL (a proxy)
	// and name the broker in CONNECT's proxy_to_broker_url.
	ProxyThroughServiceURL bool
	Error                  ServerError
	Message                string
}

func (*LookupResponse) Type() CommandType { return TypeLookupResponse }

func (l *LookupResponse) appendTo(b []byte) []byte {
	if l.BrokerServiceURL != "" {
		b = appendStr(b, 1, l.BrokerServiceURL)
	}
	if l.BrokerServiceURLTLS != "" {
		b = appendStr(b, 2, l.BrokerServiceURLTLS)
	}
	b = appendI32(b, 3, int32(l.Kind))
	b = appendU64(b, 4, l.RequestID)
	if l.Authoritative {
		b = appendBool(b, 5, true)
	}
	if l.Kind == LookupFailed {
		b = appendI32(b, 6, int32(l.Error))
		b = appendStr(b, 7, l.Message)
	}
	if l.ProxyThroughServiceURL {
		b = appendBool(b, 8, true)
	}
	return b
}

func (l *LookupResponse) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&l.BrokerServiceURL, f)
		case 2:
			return setStr(&l.BrokerServiceURLTLS, f)
		case 3:
			return setI32((*int32)(&l.Kind), f)
		case 4:
			return setU64(&l.RequestID, f)
		case 5:
			return setBool(&l.Authoritative, f)
		case 6:
			return setI32((*int32)(&l.Error), f)
		case 7:
			return setStr(&l.Message, f)
		case 8:
			return setBool(&l.ProxyThroughServiceURL, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandLookupTopicResponse", seen, 4)
}

// ReachedEndOfTopic tells a consumer its topic was terminated and fully
// read.
type ReachedEndOfTopic struct {
	ConsumerID uint64
}

func (*ReachedEndOfTopic) Type() CommandType { return TypeReachedEndOfTopic }

func (r *ReachedEndOfTopic) appendTo(b []byte) []byte { return appendU64(b, 1, r.ConsumerID) }

func (r *ReachedEndOfTopic) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		if f.num == 1 {
			return setU64(&r.ConsumerID, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandReachedEndOfTopic", seen, 1)
}

// ActiveConsumerChange tells a Failover consumer whether it is now the
// active one (the one the broker dispatches to).
type ActiveConsumerChange struct {
	ConsumerID uint64
	IsActive   bool
}

func (*ActiveConsumerChange) Type() CommandType { return TypeActiveConsumerChange }

func (a *ActiveConsumerChange) appendTo(b []byte) []byte {
	b = appendU64(b, 1, a.ConsumerID)
	return appendBool(b, 2, a.IsActive)
}

func (a *ActiveConsumerChange) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&a.ConsumerID, f)
		case 2:
			return setBool(&a.IsActive, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandActiveConsumerChange", seen, 1)
}

// AuthData is a method name and its credentials.
type AuthData struct {
	MethodName string
	Data       []byte
}

func (a *AuthData) appendTo(b []byte) []byte {
	if a.MethodName != "" {
		b = appendStr(b, 1, a.MethodName)
	}
	return appendBytes(b, 2, a.Data)
}

func (a *AuthData) decode(b []byte) error {
	_, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&a.MethodName, f)
		case 2:
			return setBytes(&a.Data, f)
		}
		return nil
	})
	return err
}

// AuthChallenge asks for fresh credentials (token refresh, or a step of a
// multi-round method).
type AuthChallenge struct {
	ServerVersion   string
	Challenge       AuthData
	ProtocolVersion int32
}

func (*AuthChallenge) Type() CommandType { return TypeAuthChallenge }

func (a *AuthChallenge) appendTo(b []byte) []byte {
	if a.ServerVersion != "" {
		b = appendStr(b, 1, a.ServerVersion)
	}
	b = appendMsg(b, 2, a.Challenge.appendTo)
	return appendI32(b, 3, a.ProtocolVersion)
}

func (a *AuthChallenge) decode(b []byte) error {
	_, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&a.ServerVersion, f)
		case 2:
			return decodeSub(f, "challenge", a.Challenge.decode)
		case 3:
			return setI32(&a.ProtocolVersion, f)
		}
		return nil
	})
	return err
}

// AuthResponse answers AuthChallenge.
type AuthResponse struct {
	ClientVersion   string
	Response        AuthData
	ProtocolVersion int32
}

func (*AuthResponse) Type() CommandType { return TypeAuthResponse }

func (a *AuthResponse) appendTo(b []byte) []byte {
	b = appendStr(b, 1, a.ClientVersion)
	b = appendMsg(b, 2, a.Response.appendTo)
	return appendI32(b, 3, a.ProtocolVersion)
}

func (a *AuthResponse) decode(b []byte) error {
	_, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setStr(&a.ClientVersion, f)
		case 2:
			return decodeSub(f, "response", a.Response.decode)
		case 3:
			return setI32(&a.ProtocolVersion, f)
		}
		return nil
	})
	return err
}

// TopicMigrated tells a producer (ResourceType 0) or consumer (1) that its
// topic moved to another cluster (blue-green migration).
type TopicMigrated struct {
	ResourceID          uint64
	ResourceType        int32
	BrokerServiceURL    string
	BrokerServiceURLTLS string
}

func (*TopicMigrated) Type() CommandType { return TypeTopicMigrated }

func (t *TopicMigrated) appendTo(b []byte) []byte {
	b = appendU64(b, 1, t.ResourceID)
	b = appendI32(b, 2, t.ResourceType)
	if t.BrokerServiceURL != "" {
		b = appendStr(b, 3, t.BrokerServiceURL)
	}
	if t.BrokerServiceURLTLS != "" {
		b = appendStr(b, 4, t.BrokerServiceURLTLS)
	}
	return b
}

func (t *TopicMigrated) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&t.ResourceID, f)
		case 2:
			return setI32(&t.ResourceType, f)
		case 3:
			return setStr(&t.BrokerServiceURL, f)
		case 4:
			return setStr(&t.BrokerServiceURLTLS, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandTopicMigrated", seen, 1, 2)
}

// GetLastMessageID asks for the id of a topic's last stored entry, through
// one of its consumers.
type GetLastMessageID struct {
	ConsumerID uint64
	RequestID  uint64
}

func (*GetLastMessageID) Type() CommandType { return TypeGetLastMessageID }

func (g *GetLastMessageID) appendTo(b []byte) []byte {
	b = appendU64(b, 1, g.ConsumerID)
	return appendU64(b, 2, g.RequestID)
}

func (g *GetLastMessageID) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return setU64(&g.ConsumerID, f)
		case 2:
			return setU64(&g.RequestID, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandGetLastMessageId", seen, 1, 2)
}

// GetLastMessageIDResponse answers GetLastMessageID. An empty topic answers
// an entry id of -1 (all ones).
type GetLastMessageIDResponse struct {
	RequestID     uint64
	LastMessageID MessageID
	// MarkDelete is the asking consumer's subscription's mark-delete
	// position (field 3), when HasMarkDelete: brokers send it since 2.8.
	MarkDelete    MessageID
	HasMarkDelete bool
}

func (*GetLastMessageIDResponse) Type() CommandType { return TypeGetLastMessageIDResponse }

func (g *GetLastMessageIDResponse) appendTo(b []byte) []byte {
	b = appendMsg(b, 1, g.LastMessageID.appendTo)
	b = appendU64(b, 2, g.RequestID)
	if g.HasMarkDelete {
		b = appendMsg(b, 3, g.MarkDelete.appendTo)
	}
	return b
}

func (g *GetLastMessageIDResponse) decode(b []byte) error {
	seen, err := forEachField(b, func(f field) error {
		switch f.num {
		case 1:
			return decodeSub(f, "last_message_id", g.LastMessageID.decode)
		case 2:
			return setU64(&g.RequestID, f)
		case 3:
			g.HasMarkDelete = true
			return decodeSub(f, "consumer_mark_delete_position", g.MarkDelete.decode)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return need("CommandGetLastMessageIdResponse", seen, 1, 2)
}
