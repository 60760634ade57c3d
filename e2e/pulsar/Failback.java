// Failback is the application of e2e/failback_test.go
// (TestFailbackJava), written with Pulsar's Java client:
//
//   consume SERVICE_URL TOPIC SUB IDLE_SECONDS HOLD_EVERY
//       receives every message of SUB (Shared) until none came for
//       IDLE_SECONDS, acknowledges each but the messages "w-<i>" whose i
//       is a multiple of HOLD_EVERY (held back; 0: none held), and closes;
//       prints {"received": [payload...], "held": [payload...],
//       "late": [payload...]}, late being those that carry
//       geo-sidecar.replayed-late=true (copied late by geo-sidecar
//       failback --replay): what an application checks to tell them.
//
//   produce SERVICE_URL TOPIC PREFIX FROM COUNT COMPRESSION
//       sends "<PREFIX>-<FROM>" .. "<PREFIX>-<FROM+COUNT-1>" with a
//       batching producer compressed with COMPRESSION (LZ4, ZLIB, ZSTD,
//       SNAPPY, NONE), all at once then flushed, so that they are stored
//       as batches, as an application sends; prints {"sent": COUNT}.
//
//   typed SERVICE_URL IDLE_SECONDS TOPIC...
//       reads each TOPIC from its first message with a Reader of
//       Schema.AUTO_CONSUME(): every message decoded with the schema its
//       own schema version names on that cluster, as a typed application
//       would (TestFailbackSchema: the late copies of entries written
//       with a schema); prints one line per message, {"topic": TOPIC,
//       "fields": {name: value...}, "schema_version": n, "late": bool}
//       ("error" instead of "fields" when it does not decode), until none
//       came for IDLE_SECONDS.
//
// Copies of geo-sidecar's markers (property geo-sidecar.marker) are
// acknowledged and left out. Acknowledgements wait for the broker's
// receipt, so what the program acknowledged is on the broker when it
// exits. Run as a single-file program with the test bed's classpath (see
// Fidelity.java).

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.schema.Field;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public class Failback {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String MARKER = "geo-sidecar.marker";
    static final String LATE = "geo-sidecar.replayed-late";

    public static void main(String[] args) throws Exception {
        if (args.length >= 4 && args[0].equals("typed")) {
            typed(args);
            return;
        }
        if (args.length == 7 && args[0].equals("produce")) {
            produce(args);
            return;
        }
        if (args.length != 6 || !args[0].equals("consume")) {
            System.err.println("usage: Failback consume SERVICE_URL TOPIC SUB IDLE_SECONDS HOLD_EVERY | produce SERVICE_URL TOPIC PREFIX FROM COUNT COMPRESSION | typed SERVICE_URL IDLE_SECONDS TOPIC...");
            System.exit(2);
        }
        int idle = Integer.parseInt(args[4]), every = Integer.parseInt(args[5]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build();
                Consumer<byte[]> c = client.newConsumer().topic(args[2]).subscriptionName(args[3])
                        .subscriptionType(SubscriptionType.Shared)
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .isAckReceiptEnabled(true).subscribe()) {
            List<String> received = new ArrayList<>(), held = new ArrayList<>(), late = new ArrayList<>();
            for (Message<byte[]> m; (m = c.receive(idle, TimeUnit.SECONDS)) != null; ) {
                if (m.hasProperty(MARKER)) {
                    c.acknowledge(m);
                    continue;
                }
                String s = new String(m.getData(), StandardCharsets.UTF_8);
                received.add(s);
                if ("true".equals(m.getProperty(LATE))) {
                    late.add(s);
                }
                if (every > 0 && s.startsWith("w-") && Integer.parseInt(s.substring(2)) % every == 0) {
                    held.add(s);
                    continue;
                }
                c.acknowledge(m);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("received", received);
            out.put("held", held);
            out.put("late", late);
            System.out.println(JSON.writeValueAsString(out));
        }
    }

    static void produce(String[] args) throws Exception {
        int from = Integer.parseInt(args[4]), count = Integer.parseInt(args[5]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build();
                Producer<byte[]> p = client.newProducer().topic(args[2]).enableBatching(true)
                        .batchingMaxPublishDelay(1, TimeUnit.SECONDS).batchingMaxMessages(1000)
                        .compressionType(CompressionType.valueOf(args[6])).create()) {
            List<CompletableFuture<MessageId>> sent = new ArrayList<>();
            for (int i = from; i < from + count; i++) {
                sent.add(p.sendAsync((args[3] + "-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            p.flush();
            for (CompletableFuture<MessageId> f : sent) {
                f.get(30, TimeUnit.SECONDS);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("sent", count);
            System.out.println(JSON.writeValueAsString(out));
        }
    }

    static void typed(String[] args) throws Exception {
        int idle = Integer.parseInt(args[2]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build()) {
            for (int t = 3; t < args.length; t++) {
                try (Reader<GenericRecord> r = client.newReader(Schema.AUTO_CONSUME()).topic(args[t])
                        .startMessageId(MessageId.earliest).create()) {
                    for (Message<GenericRecord> m; (m = r.readNext(idle, TimeUnit.SECONDS)) != null; ) {
                        if (m.hasProperty(MARKER)) {
                            continue;
                        }
                        Map<String, Object> out = new LinkedHashMap<>();
                        out.put("topic", args[t]);
                        byte[] v = m.getSchemaVersion();
                        out.put("schema_version", v == null || v.length != 8 ? -1 : java.nio.ByteBuffer.wrap(v).getLong());
                        out.put("late", "true".equals(m.getProperty(LATE)));
                        try {
                            GenericRecord rec = m.getValue();
                            Map<String, Object> fields = new LinkedHashMap<>();
                            for (Field f : rec.getFields()) {
                                Object x = rec.getField(f);
                                fields.put(f.getName(), x instanceof Number ? x : String.valueOf(x));
                            }
                            out.put("fields", fields);
                        } catch (RuntimeException e) {
                            out.put("error", e.toString());
                        }
                        System.out.println(JSON.writeValueAsString(out));
                    }
                }
            }
        }
    }
}
