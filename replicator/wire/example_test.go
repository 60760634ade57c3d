package wire_test

import (
	"context"
	"log"

	"github.com/apache/pulsar-client-go/pulsar/auth"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// sequenceFor maps a source position to the SEND's sequence id. It must
// increase with the position and give a redelivered entry the same id, also
// across restarts and ledger roll-overs; how (packing ledger and entry
// bits overflows, see e2e/dedup_test.go) is the pipeline's decision.
var sequenceFor func(wire.MessageID) uint64

// Forwarding one partition's entries from east to west, byte for byte,
// acknowledging each at the source once west confirmed it. The sequence id
// must come from the source position (so that a redelivered entry gets the
// same one); Patch.Identity makes the target's deduplication survive
// reloads of the target topic.
func Example() {
	ctx := context.Background()
	token := auth.NewAuthenticationToken("...")
	east, err := wire.NewClient(wire.ClientOptions{ServiceURL: "pulsar://east:6650"})
	if err != nil {
		log.Fatal(err)
	}
	defer east.Close()
	west, err := wire.NewClient(wire.ClientOptions{ServiceURL: "pulsar+ssl://west:6651", Conn: wire.ConnOptions{Auth: token}})
	if err != nil {
		log.Fatal(err)
	}
	defer west.Close()

	const part = "persistent://shop/orders/orders-partition-0"
	cursor, err := wire.Subscribe(ctx, east, wire.ConsumerOptions{
		Topic: part, Subscription: "geo-sidecar.repl.west", Name: "instance-1",
		InitialPosition: wire.Earliest, Permits: 1000,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cursor.Close()
	const name = "geo-sidecar.east.orders-partition-0"
	target, err := wire.CreateProducer(ctx, west, wire.ProducerOptions{Topic: part, Name: name})
	if err != nil {
		log.Fatal(err)
	}
	defer target.Close()
	resumeAfter := target.LastSequenceID() // what west already holds from us

	for {
		e, err := cursor.Receive(ctx)
		if err != nil {
			log.Fatal(err)
		}
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			log.Fatal(err) // a malformed entry: skip and count it, in real code
		}
		if md.ReplicatedFrom != "" { // a copy: never forwarded again
			cursor.Ack(e.ID)
			cursor.Release(e)
			continue
		}
		seq := sequenceFor(e.ID)
		if int64(seq) <= resumeAfter {
			cursor.Ack(e.ID) // already on west
			cursor.Release(e)
			continue
		}
		patched, err := wire.PatchMetadata(nil, e.Metadata, wire.Patch{
			ReplicatedFrom: "east",
			Properties:     []wire.KeyValue{{Key: "geo-sidecar.origin-id", Value: e.ID.String()}},
			DropTxn:        md.HasTxnID,
			Identity:       &wire.Identity{ProducerName: name, SequenceID: seq},
		})
		if err != nil {
			log.Fatal(err)
		}
		err = target.Send(ctx, wire.Outgoing{Metadata: patched, Payload: e.Payload, NumMessages: e.NumMessages,
			SequenceID: seq, IsChunk: md.HasChunk},
			func(_ wire.Receipt, err error) {
				if err != nil {
					return // redelivered after a reconnect or RedeliverUnacknowledged
				}
				cursor.Ack(e.ID)
				cursor.Release(e)
			})
		if err != nil {
			log.Fatal(err)
		}
	}
}
