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
	skipAlreadyCopied   = "already-copied"
)

// position is a message id in one partition: ledger, entry, batch index
// (-1 for a message that is not in a batch).
type position struct {
	ledger, entry int64
	batch         int32
}

func positionOf(id pulsar.MessageID) position {
	return position{id.LedgerID(), id.EntryID(), id.BatchIdx()}
}

// after reports whether p comes after q in the partition.
func (p position) after(q position) bool {
	if p.ledger != q.ledger {
		return p.ledger > q.ledger
	}
	if p.entry != q.entry {
		return p.entry > q.entry
	}
	return p.batch > q.batch
}

// parsePosition reads the "ledger:entry:batch" form of PropOriginID.
func parsePosition(s string) (position, bool) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return position{}, false
	}
	l, err1 := strconv.ParseInt(f[0], 10, 64)
	e, err2 := strconv.ParseInt(f[1], 10, 64)
	b, err3 := strconv.ParseInt(f[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return position{}, false
	}
	return position{l, e, int32(b)}, true
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
	props[PropOriginID] = formatID(msg.ID())
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

// formatID writes id as "ledger:entry:batch". It runs once per copied
// message, so it appends into one small buffer instead of using fmt.
func formatID(id pulsar.MessageID) string {
	b := make([]byte, 0, 48)
	b = strconv.AppendInt(b, id.LedgerID(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, id.EntryID(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(id.BatchIdx()), 10)
	return string(b)
}
