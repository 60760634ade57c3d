// Package wire is the small subset of the Pulsar binary protocol that the
// replication data path needs: lookups, a Failover consumer that hands over
// stored entries whole (message id, metadata bytes, payload bytes, batches
// left packed and compressed), and a producer that sends such an entry as
// one SEND. It exists because pulsar-client-go always unpacks and
// re-encodes messages and keeps its connection layer internal, so copying
// an entry byte for byte has to speak the protocol itself.
//
// The code is written from the protocol's documented frames and field
// numbers with protowire; there are deliberately no generated protobuf
// types (a second "pulsar.proto" package would clash with pulsar-client-go's
// registration). Authentication reuses pulsar-client-go's exported
// pulsar/auth providers (token, TLS, OAuth2, Athenz, basic).
//
// Layers, from the bottom: frame.go (frames, CRC-32C, size limits),
// proto.go and command.go (BaseCommand and the commands used, most of them
// generated from the table commands.txt into command_gen.go), metadata.go
// (MessageMetadata: parse the fields that matter, patch by appending),
// schema.go, conn.go (one multiplexed connection per broker: reader,
// writer and keep-alive goroutines), client.go (connection pool, lookup
// cache, redirects, proxies), consumer.go (with its receive accounting,
// permits and budget bytes, in credit.go) and producer.go with the
// reconnect loop they share (reconnect.go), and move.go
// (a subscription's mark-delete position moved by a consumer that attaches
// for one acknowledgement). Consumers and producers cost no goroutine or
// timer while idle. A fake broker for tests of code over this package is
// in wiretest.
//
// Broker behaviours a user of this package must design around (seen on
// Pulsar 4.0.7, pinned by e2e/wire_test.go):
//
//   - Deduplication state after a topic reload is rebuilt from the
//     producer_name and sequence_id stored in the entries' metadata, not
//     from the producer's name and the SENDs' sequence ids. Forwarded
//     entries keep the origin's, so after a reload of the target topic
//     LastSequenceID of the sidecar's producer is -1 and resends are stored
//     twice. Patch.Identity stores the sidecar's name and sequence ids in
//     the metadata and makes LastSequenceID authoritative across reloads
//     (consumers then see the sidecar's producer name).
//   - At a topic unload the broker sends CLOSE_PRODUCER first and then,
//     under the closed producer's id, the receipts of the sends it had
//     handed to storage. The Producer takes them (until the broker closes
//     a later session of it), so the next session resends only what was
//     not stored: the reloaded topic's deduplication record for the
//     sidecar's name can be below those entries (see the item above) and
//     would store them twice.
//   - A duplicate dropped by deduplication is confirmed with message id and
//     highest sequence id -1 (all ones as uint64).
//   - Batch-level properties (Patch.Properties) are visible to clients only
//     for non-batched entries; clients read a batch's messages' properties
//     from the batch payload. Raw readers (this package) see them always.
//   - Individual acknowledgements reach the cursor asynchronously: after an
//     unload or a crash, recently acknowledged entries can come again.
//   - A Failover subscription delays the first dispatch to a newly active
//     consumer by about a second (activeConsumerFailoverDelay).
//   - pulsar-client-go v0.21 leaves schema_version out of non-batched
//     messages and drops a non-batched message with an empty (not null)
//     payload on receive.
package wire
