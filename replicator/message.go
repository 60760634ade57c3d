package replicator

import (
	"strconv"
	"strings"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Properties that geo-sidecar sets on every copy, and the one applications
// may set to restrict where a message goes. They are the provenance that
// keeps topologies loop-free: a message carrying PropOriginCluster is never
// forwarded again.
const (
	// PropOriginCluster names the cluster where the message was produced.
	PropOriginCluster = "geo-sidecar.origin-cluster"
	// PropOriginID is the message id in the origin partition,
	// "ledger:entry:batch".
	PropOriginID = "geo-sidecar.origin-id"
	// PropOriginPublishTime is the origin publish time, Unix milliseconds.
	PropOriginPublishTime = "geo-sidecar.origin-publish-time"
	// PropReplicateTo, set by an application, is a comma-separated list of
	// cluster names: the message is copied only to those remotes. An empty
	// value means "replicate nowhere".
	PropReplicateTo = "geo-sidecar.replicate-to"
)

// Skip reasons, the bounded label values of the skipped-messages metric.
const (
	skipRemoteOrigin    = "remote-origin"
	skipBrokerReplica   = "broker-replicated"
	skipMarker          = "marker"
	skipReplicateTo     = "replicate-to"
	skipRejectedTooBig  = "rejected-too-large"
	skipRejectedInvalid = "rejected-invalid"
	// The target's broker refuses the entry for good: NotAllowed (a
	// namespace maxMessageSize below the broker's, encryption required)
	// or IncompatibleSchema (the schema cannot be registered there).
	skipRejectedNotAllowed = "rejected-not-allowed"
	skipRejectedSchema     = "rejected-schema"
	skipAlreadyCopied      = "already-copied"
)

// positionOf is where a message read by pulsar-client-go sits in its
// partition.
func positionOf(id pulsar.MessageID) marker.Position {
	return marker.Position{Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
}

// decide says whether msg, read from the local cluster, is forwarded to
// remote. It returns "" to forward, or the reason to skip. Markers are
// skipped here; the replicated-subscription protocol handles them apart.
func decide(msg pulsar.Message, remote string) string {
	props := msg.Properties()
	if marker.Is(msg) {
		return skipMarker
	}
	if _, ok := props[PropOriginCluster]; ok {
		return skipRemoteOrigin
	}
	if msg.IsReplicated() {
		return skipBrokerReplica
	}
	if to, ok := props[PropReplicateTo]; ok && !listHas(to, remote) {
		return skipReplicateTo
	}
	return ""
}

func listHas(list, name string) bool {
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}

// copyOf builds the message to send to the remote: payload (empty stays
// empty, null stays null), key, ordering key, properties and event
// time, plus the origin properties. The sequence id is left to the
// producer (see partition.session).
func copyOf(msg pulsar.Message, origin string) *pulsar.ProducerMessage {
	props := make(map[string]string, len(msg.Properties())+3)
	for k, v := range msg.Properties() {
		props[k] = v
	}
	props[PropOriginCluster] = origin
	props[PropOriginID] = positionOf(msg.ID()).String()
	props[PropOriginPublishTime] = strconv.FormatInt(msg.PublishTime().UnixMilli(), 10)
	// A nil payload is sent as a null (tombstone) message, so only a null
	// at the origin may stay nil.
	payload := msg.Payload()
	if payload == nil && !msg.IsNullValue() {
		payload = []byte{}
	}
	pm := &pulsar.ProducerMessage{
		Payload:     payload,
		Key:         msg.Key(),
		OrderingKey: msg.OrderingKey(),
		Properties:  props,
	}
	// pulsar-client-go reads an unset event time back as Unix 0.
	if et := msg.EventTime(); !et.IsZero() && et.UnixMilli() != 0 {
		pm.EventTime = et
	}
	return pm
}
