// Package marker is the wire format of geo-sidecar's in-band markers: the
// messages that replicated subscriptions write into replicated topics
// (snapshot request, response, snapshot, update). Pulsar's broker hides its
// own markers from consumers; ours are ordinary messages, so every consumer
// must be able to recognise and skip them. Bytes in, values out; no network.
package marker

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
