// Fidelity writes, with Pulsar's Java client, the messages the entry-path
// fidelity test needs that pulsar-client-go cannot write (SNAPPY, binary
// keys that are not UTF-8, delivery times), and dumps a topic as one JSON
// line per message, so that e2e/fidelity_java_test.go
// (TestEntryPipeJavaFidelity) can compare the origin and the copy field by
// field.
//
//   produce SERVICE_URL TOPIC           write the test's messages; print one
//                                       JSON line: how many were written
//                                       and how many must stay local
//   dump SERVICE_URL TOPIC N SECONDS    read TOPIC from the start with a
//                                       Reader until N messages came or
//                                       SECONDS passed, then whatever else
//                                       comes within 2 s; one JSON line per
//                                       message
//
// A Reader is not held back by delivery times (only Shared and Key_Shared
// subscriptions are), so the dump shows delayed messages at once, with
// their deliver_at_time from the entry's metadata (MessageImpl, because
// the Message interface does not expose it).
//
// Run as a single-file program with the test bed's classpath:
//   java -cp "$(cat "$(e2e/pulsar/cluster.sh classpath)")" e2e/pulsar/Fidelity.java produce pulsar://127.0.0.1:6650 persistent://t/ns/x
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.impl.MessageImpl;

public class Fidelity {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "";
        if (!(mode.equals("produce") && args.length == 3 || mode.equals("dump") && args.length == 5)) {
            System.err.println("usage: Fidelity produce SERVICE_URL TOPIC | dump SERVICE_URL TOPIC N SECONDS");
            System.exit(2);
        }
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build()) {
            if (mode.equals("produce")) {
                produce(client, args[2]);
            } else {
                dump(client, args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            }
        }
    }

    static Producer<byte[]> producer(PulsarClient client, String topic, String name, boolean batched,
            CompressionType compression) throws Exception {
        return client.newProducer().topic(topic).producerName(name).enableBatching(batched)
                .batchingMaxMessages(1000).batchingMaxPublishDelay(10, TimeUnit.SECONDS)
                .compressionType(compression).create();
    }

    static int produced, localOnly; // messages east accepted; of those, the ones for east only

    static void produce(PulsarClient client, String topic) throws Exception {
        long eventTime = 1_700_000_000_456L;
        String filler = "abcdefgh".repeat(40); // something for SNAPPY to shrink

        // SNAPPY, batched: 20 messages sent together, flushed as one batch.
        try (Producer<byte[]> p = producer(client, topic, "java-snappy-batched", true, CompressionType.SNAPPY)) {
            List<CompletableFuture<MessageId>> sends = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                sends.add(p.newMessage().value(bytes("snappy-batched-" + i + "-" + filler)).key("s" + i % 4)
                        .property("codec", "snappy").property("i", "" + i).eventTime(eventTime + i).sendAsync());
            }
            p.flush();
            wait(sends);
        }
        // SNAPPY, not batched.
        try (Producer<byte[]> p = producer(client, topic, "java-snappy-single", false, CompressionType.SNAPPY)) {
            for (int i = 0; i < 2; i++) {
                send(p.newMessage().value(bytes("snappy-single-" + i + "-" + filler)).key("ss" + i));
            }
        }
        // Binary keys and ordering keys, including bytes that are not UTF-8,
        // in a batch (per-message metadata) and alone (entry metadata).
        byte[][] keys = {{(byte) 0xff, (byte) 0xfe, 0, 1}, {(byte) 0xc3, 0x28}, {(byte) 0x80}, {0, 0, 0},
            "plain".getBytes(StandardCharsets.UTF_8)};
        for (boolean batched : new boolean[] {true, false}) {
            String kind = batched ? "batched" : "single";
            try (Producer<byte[]> p = producer(client, topic, "java-binkey-" + kind, batched, CompressionType.NONE)) {
                List<CompletableFuture<MessageId>> sends = new ArrayList<>();
                for (int i = 0; i < keys.length; i++) {
                    sends.add(p.newMessage().value(bytes("binkey-" + kind + "-" + i)).keyBytes(keys[i])
                            .orderingKey(new byte[] {(byte) 0xfd, (byte) i, (byte) 0xe0}).sendAsync());
                }
                p.flush();
                wait(sends);
            }
        }
        // Delivery times. The Java producer sends a message with a delivery
        // time outside any batch, even when batching is on.
        try (Producer<byte[]> p = producer(client, topic, "java-delayed", true, CompressionType.NONE)) {
            long now = System.currentTimeMillis();
            List<CompletableFuture<MessageId>> sends = new ArrayList<>();
            sends.add(p.newMessage().value(bytes("delayed-at-20s")).key("d").deliverAt(now + 20_000).sendAsync());
            sends.add(p.newMessage().value(bytes("delayed-after-20s")).key("d").deliverAfter(20, TimeUnit.SECONDS)
                    .sendAsync());
            sends.add(p.newMessage().value(bytes("delayed-after-1h")).deliverAfter(1, TimeUnit.HOURS).sendAsync());
            sends.add(p.newMessage().value(bytes("delayed-not")).key("d").sendAsync());
            p.flush();
            wait(sends);
        }
        // replicate_to: the first two must stay on east, the third names
        // west and must be copied.
        try (Producer<byte[]> p = producer(client, topic, "java-replicate-to", false, CompressionType.NONE)) {
            send(p.newMessage().value(bytes("local-disabled")).disableReplication());
            send(p.newMessage().value(bytes("local-east")).replicationClusters(List.of("east")));
            send(p.newMessage().value(bytes("to-west")).replicationClusters(List.of("west")));
            localOnly = 2;
        }
        // An ordinary batch: keys, properties, event time.
        try (Producer<byte[]> p = producer(client, topic, "java-normal", true, CompressionType.NONE)) {
            List<CompletableFuture<MessageId>> sends = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                sends.add(p.newMessage().value(bytes("normal-" + i)).key("n" + i % 3)
                        .properties(Map.of("app", "java", "i", "" + i)).eventTime(eventTime + 1000 + i).sendAsync());
            }
            p.flush();
            wait(sends);
        }
        System.out.println(JSON.writeValueAsString(Map.of("produced", produced, "localOnly", localOnly)));
    }

    static void send(TypedMessageBuilder<byte[]> m) throws Exception {
        m.send();
        produced++;
    }

    static void wait(List<CompletableFuture<MessageId>> sends) throws Exception {
        for (CompletableFuture<MessageId> f : sends) {
            f.get(30, TimeUnit.SECONDS);
            produced++;
        }
    }

    static void dump(PulsarClient client, String topic, int n, int seconds) throws Exception {
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        try (Reader<byte[]> r = client.newReader().topic(topic).startMessageId(MessageId.earliest).create()) {
            int got = 0;
            while (true) {
                long left = got < n ? deadline - System.currentTimeMillis() : 2000;
                if (left <= 0) {
                    break;
                }
                Message<byte[]> m = r.readNext((int) left, TimeUnit.MILLISECONDS);
                if (m == null) {
                    break;
                }
                System.out.println(JSON.writeValueAsString(describe(m)));
                got++;
            }
        }
    }

    static Map<String, Object> describe(Message<byte[]> m) throws Exception {
        Map<String, Object> d = new LinkedHashMap<>();
        byte[] v = m.getData();
        d.put("head", new String(v, 0, Math.min(v.length, 24), StandardCharsets.UTF_8));
        d.put("sha256", HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(v)));
        d.put("size", v.length);
        d.put("hasKey", m.hasKey());
        d.put("key", m.hasKey() ? m.getKey() : null);
        d.put("keyBytes", m.hasKey() ? Base64.getEncoder().encodeToString(m.getKeyBytes()) : null);
        d.put("hasBase64EncodedKey", m.hasBase64EncodedKey());
        d.put("orderingKey", m.hasOrderingKey() ? Base64.getEncoder().encodeToString(m.getOrderingKey()) : null);
        d.put("properties", new TreeMap<>(m.getProperties()));
        d.put("eventTime", m.getEventTime());
        d.put("publishTime", m.getPublishTime());
        d.put("producerName", m.getProducerName());
        d.put("sequenceId", m.getSequenceId());
        d.put("replicatedFrom", m.isReplicated() ? m.getReplicatedFrom() : "");
        MessageIdAdv id = (MessageIdAdv) m.getMessageId();
        d.put("ledger", id.getLedgerId());
        d.put("entry", id.getEntryId());
        d.put("batchIndex", id.getBatchIndex());
        d.put("batchSize", id.getBatchSize());
        // The entry's metadata, as this client parsed it.
        var md = ((MessageImpl<?>) m).getMessageBuilder();
        d.put("deliverAt", md.hasDeliverAtTime() ? md.getDeliverAtTime() : 0);
        d.put("compression", md.getCompression().name());
        d.put("replicateTo", md.getReplicateTosList());
        return d;
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
