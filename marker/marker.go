// Package marker is the wire format of geo-sidecar's in-band markers: the
// messages that replicated subscriptions write into replicated topics
// (snapshot request, response, snapshot, update; see [Kind]). A marker sits
// in the topic partition in order with the data, and that order is what makes
// a snapshot consistent. Bytes in, values out; no network.
//
// # Skipping markers
//
// Pulsar's broker hides its own markers from consumers; ours are ordinary
// messages, so every consumer of a replicated topic receives them and must
// skip them. A marker carries the message property [Property]
// ("geo-sidecar.marker"), whose value is its kind in decimal ("10" to "14");
// its payload is the signed encoding described at [Encode]. In Go, [Is] is
// the one-line test (see the example). In any other client, acknowledge and
// skip every message whose properties contain that key, whatever its value:
//
//	Java:   if (msg.hasProperty("geo-sidecar.marker")) { consumer.acknowledge(msg); continue; }
//	Python: if "geo-sidecar.marker" in msg.properties(): consumer.acknowledge(msg); continue
//
// # Why markers are signed
//
// Anyone allowed to publish to a replicated topic could otherwise write an
// update marker and make the sidecar move a subscription on a remote cluster
// forward, past messages its consumers never read: those messages would be
// lost to that subscription. So every payload ends with an HMAC-SHA256 tag
// under a key shared by the sidecars. [Decode] checks the tag before it
// trusts any field; a marker that fails to verify or decode is ignored and
// counted (see [Reason]), never acted on, and never stops replication.
//
// The tag proves that a sidecar wrote the marker, not where: a signed marker
// copied by hand into another topic still verifies. That is why the topic
// partition is one of the signed fields ([Marker.Topic]) and readers must
// compare it with the partition they read the marker from. Inside its own
// partition a replayed marker gains nothing: an update never moves a
// subscription backwards, and a stale snapshot pair is only more cautious.
// Payloads are signed, not encrypted.
package marker

import (
	"errors"
	"strconv"
)

// Property is the reserved message property that tags a geo-sidecar marker.
// Consumers in any language skip messages that carry it.
const Property = "geo-sidecar.marker"

// PropertyReader is what Is needs of a message; pulsar.Message satisfies it.
type PropertyReader interface {
	Properties() map[string]string
}

// Is reports whether msg is a geo-sidecar marker, which applications should
// acknowledge and otherwise ignore:
//
//	if marker.Is(msg) { consumer.Ack(msg); continue }
func Is(msg PropertyReader) bool {
	_, ok := msg.Properties()[Property]
	return ok
}

// Kind says what a marker does in the replicated-subscription protocol. Its
// numeric value is the value of [Property] and the kind byte of the wire
// format. In the comments below, A is the cluster holding the subscription
// being replicated and B a remote cluster.
type Kind uint8

// The marker kinds. The numbers follow Pulsar's own marker types 10 to 13,
// which play the same roles inside the broker; 14 is geo-sidecar's own.
const (
	// KindSnapshotRequest is written by S_A into A's partition, addressed to
	// B, and forwarded to B in order with A's data.
	KindSnapshotRequest Kind = 10
	// KindSnapshotResponse is written by S_B into B's partition, addressed to
	// A, when S_B reads a request: it carries b, the position where the
	// request was read, and the watermarks of third origins.
	KindSnapshotResponse Kind = 11
	// KindSnapshot is written by S_A into its own partition when a snapshot
	// completes: the pair (a, b), so that the snapshot cache survives a
	// restart. It is never forwarded.
	KindSnapshot Kind = 12
	// KindUpdate is written by S_A, addressed to B: move subscription
	// Subscription on B forward to position Remote.
	KindUpdate Kind = 13
	// KindAcked is written by S_A, addressed to B: subscription
	// Subscription on A has acknowledged every entry of the ranges Acked
	// (positions in A's partition), past its mark-delete position Local
	// (its ack holes). S_B acknowledges on B, one by one, the copies of
	// those entries that it read itself with a signed origin; the update
	// (KindUpdate) moves the mark-delete position, this kind never does.
	// Pulsar has no marker of this number: a sidecar of an earlier
	// version counts it as malformed and skips it, and the updates it
	// accompanies still go. The broker's entry filter hides it from
	// applications by its writer's producer name (MarkerProducers), as
	// every marker the sidecar writes, and its copies, which keep it.
	KindAcked Kind = 14
)

// String returns the kind's name ("snapshot-request", "snapshot-response",
// "snapshot", "update", "acked"), or "Kind(n)" for an unknown kind. The five names
// are bounded, so they may be used as metric label values.
func (k Kind) String() string {
	switch k {
	case KindSnapshotRequest:
		return "snapshot-request"
	case KindSnapshotResponse:
		return "snapshot-response"
	case KindSnapshot:
		return "snapshot"
	case KindUpdate:
		return "update"
	case KindAcked:
		return "acked"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

func (k Kind) valid() bool { return k >= KindSnapshotRequest && k <= KindAcked }

// Properties returns the message properties of a marker of kind k, a new map
// the caller may extend: {Property: "10"} for a snapshot request, and so on.
// The value is the decimal kind even for an unknown kind, so that a message
// built from it is still recognised as a marker and skipped by consumers.
func Properties(k Kind) map[string]string {
	return map[string]string{Property: strconv.Itoa(int(k))}
}

// KindOf returns the marker kind named by the properties of a message. It
// returns false when [Property] is absent or its value is not exactly one of
// "10", "11", "12", "13", "14". A message for which [Is] is true but KindOf is
// false is a marker this version does not understand: skip it.
func KindOf(props map[string]string) (Kind, bool) {
	v, ok := props[Property]
	if !ok {
		return 0, false
	}
	switch v {
	case "10":
		return KindSnapshotRequest, true
	case "11":
		return KindSnapshotResponse, true
	case "12":
		return KindSnapshot, true
	case "13":
		return KindUpdate, true
	case "14":
		return KindAcked, true
	}
	return 0, false
}

// Reason returns the label value under which a caller counts a marker it
// skipped because [Decode] failed with err: "signature", "version",
// "malformed", or "other" for anything else (including a nil err and
// [ErrNoKey]). The set is bounded, fit for a metric label.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrBadSignature):
		return "signature"
	case errors.Is(err, ErrUnsupportedVersion):
		return "version"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	}
	return "other"
}
