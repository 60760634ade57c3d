package marker_test

import (
	"fmt"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// message and consumer stand in for pulsar.Message and pulsar.Consumer.
type message struct {
	props   map[string]string
	payload string
}

func (m message) Properties() map[string]string { return m.props }

type consumer struct{ msgs []message }

func (c *consumer) Receive() (message, bool) {
	if len(c.msgs) == 0 {
		return message{}, false
	}
	m := c.msgs[0]
	c.msgs = c.msgs[1:]
	return m, true
}

func (c *consumer) Ack(message) {}

// An application consuming a replicated topic acknowledges and skips the
// markers that geo-sidecar writes into it.
func Example() {
	c := &consumer{msgs: []message{
		{payload: "order 1"},
		{props: marker.Properties(marker.KindSnapshotRequest), payload: "\x01\x0a..."},
		{props: map[string]string{"geo-sidecar.origin-cluster": "west"}, payload: "order 2"},
		{props: marker.Properties(marker.KindUpdate), payload: "\x01\x0d..."},
	}}
	for {
		msg, ok := c.Receive()
		if !ok {
			break
		}
		if marker.Is(msg) {
			c.Ack(msg)
			continue
		}
		fmt.Println(msg.payload)
		c.Ack(msg)
	}
	// Output:
	// order 1
	// order 2
}

// A sidecar writes a marker as a message with Properties(kind) and the
// encoded payload, and reads it back with KindOf and Decode.
func ExampleEncode() {
	key := []byte("a key shared by all the sidecars")
	payload, err := marker.Encode(marker.Marker{
		Kind:         marker.KindUpdate,
		From:         "east",
		To:           "west",
		Topic:        "persistent://acme/orders/orders-partition-0",
		Remote:       marker.Position{Ledger: 17, Entry: 4, Batch: -1},
		Subscription: "billing",
		Time:         1733130000000,
	}, key)
	if err != nil {
		panic(err)
	}
	props := marker.Properties(marker.KindUpdate)

	// On the receiving side:
	if kind, ok := marker.KindOf(props); ok {
		m, err := marker.Decode(payload, key)
		if err != nil {
			fmt.Println("skipped:", marker.Reason(err))
			return
		}
		fmt.Println(kind, m.From, "->", m.To, m.Subscription, m.Remote)
	}
	// Output:
	// update east -> west billing 17:4:-1
}
