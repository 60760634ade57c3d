package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ServerError is the broker's error code (ServerError in the protocol).
type ServerError int32

// The broker error codes this package tells apart.
const (
	UnknownError                          ServerError = 0
	MetadataError                         ServerError = 1
	PersistenceError                      ServerError = 2
	AuthenticationError                   ServerError = 3
	AuthorizationError                    ServerError = 4
	ConsumerBusy                          ServerError = 5
	ServiceNotReady                       ServerError = 6
	ProducerBlockedQuotaExceededError     ServerError = 7
	ProducerBlockedQuotaExceededException ServerError = 8
	ChecksumError                         ServerError = 9
	UnsupportedVersionError               ServerError = 10
	TopicNotFound                         ServerError = 11
	SubscriptionNotFound                  ServerError = 12
	ConsumerNotFound                      ServerError = 13
	TooManyRequests                       ServerError = 14
	TopicTerminatedError                  ServerError = 15
	ProducerBusy                          ServerError = 16
	InvalidTopicName                      ServerError = 17
	IncompatibleSchema                    ServerError = 18
	ConsumerAssignError                   ServerError = 19
	NotAllowedError                       ServerError = 22
	ProducerFenced                        ServerError = 25
)

var serverErrorNames = map[ServerError]string{
	UnknownError: "UnknownError", MetadataError: "MetadataError", PersistenceError: "PersistenceError",
	AuthenticationError: "AuthenticationError", AuthorizationError: "AuthorizationError",
	ConsumerBusy: "ConsumerBusy", ServiceNotReady: "ServiceNotReady",
	ProducerBlockedQuotaExceededError:     "ProducerBlockedQuotaExceededError",
	ProducerBlockedQuotaExceededException: "ProducerBlockedQuotaExceededException",
	ChecksumError:                         "ChecksumError", UnsupportedVersionError: "UnsupportedVersionError",
	TopicNotFound: "TopicNotFound", SubscriptionNotFound: "SubscriptionNotFound",
	ConsumerNotFound: "ConsumerNotFound", TooManyRequests: "TooManyRequests",
	TopicTerminatedError: "TopicTerminatedError", ProducerBusy: "ProducerBusy",
	InvalidTopicName: "InvalidTopicName", IncompatibleSchema: "IncompatibleSchema",
	ConsumerAssignError: "ConsumerAssignError", NotAllowedError: "NotAllowedError",
	ProducerFenced: "ProducerFenced",
}

func (e ServerError) String() string {
	if s, ok := serverErrorNames[e]; ok {
		return s
	}
	return fmt.Sprintf("ServerError(%d)", int32(e))
}

// BrokerError is a failure the broker reported (ERROR, SEND_ERROR, a failed
// lookup). Use errors.As to inspect the code.
type BrokerError struct {
	Op      string // what was being attempted, e.g. "subscribe"
	Code    ServerError
	Message string
}

func (e *BrokerError) Error() string {
	return fmt.Sprintf("wire: %s: broker error %v: %s", e.Op, e.Code, e.Message)
}

// Retryable reports whether the same request may succeed later (possibly
// after a new lookup). Authentication, authorization, invalid names,
// terminated topics, fenced producers and incompatible schemas are terminal.
func (e *BrokerError) Retryable() bool {
	switch e.Code {
	case AuthenticationError, AuthorizationError, InvalidTopicName, TopicTerminatedError,
		ProducerFenced, IncompatibleSchema, UnsupportedVersionError, NotAllowedError,
		ChecksumError:
		return false
	}
	return true
}

// ErrClosed is returned by operations on a closed connection, consumer or
// producer, and by operations whose connection closed while waiting.
var ErrClosed = errors.New("wire: closed")

// ErrTooLarge is returned by Producer.Send for an entry larger than the
// broker's message size limit (from CONNECTED): the broker could never
// take it, so it is refused before it is written. An entry sent under a
// higher limit that the broker of a later connection has lowered fails
// with it in its done callback, in its turn.
var ErrTooLarge = errors.New("wire: entry exceeds the broker's message size limit")

// ErrInDoubt fails a producer's unconfirmed entries, and the producer,
// when a reconnect finds that the broker's deduplication record for its
// name went back (a broker that crashed rebuilt it without them; see
// Producer.inDoubt): the entries may be stored already, and sent again
// they would be stored twice. It is retryable: the caller reads the
// topic back to find which are there, and opens a new producer for the
// rest.
var ErrInDoubt = errors.New("wire: unconfirmed entries in doubt: the broker's deduplication record went back")

// ErrSilent is why the keep-alive closed a connection: nothing arrived
// from the broker within ConnOptions.KeepAlive, pings included. On a
// half-open link (packets dropped, no close ever arriving) it is the only
// sign of trouble.
var ErrSilent = errors.New("no data from the broker within the keep-alive")

// ConnError reports a connection lost underneath an operation; it is always
// retryable (on a new connection).
type ConnError struct {
	Addr string
	Err  error
}

func (e *ConnError) Error() string { return fmt.Sprintf("wire: connection to %s: %v", e.Addr, e.Err) }
func (e *ConnError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is worth retrying: a lost connection, a
// timeout, or a broker error that is not terminal. Malformed frames are
// retryable too (on a new connection), because the sender may be a proxy
// that misbehaved once.
func IsRetryable(err error) bool {
	var be *BrokerError
	if errors.As(err, &be) {
		return be.Retryable()
	}
	// A certificate the broker's name or our trust store rejects stays
	// rejected until someone changes the configuration.
	var (
		verr *tls.CertificateVerificationError
		herr x509.HostnameError
		uerr x509.UnknownAuthorityError
	)
	if errors.As(err, &verr) || errors.As(err, &herr) || errors.As(err, &uerr) {
		return false
	}
	return err != nil
}
