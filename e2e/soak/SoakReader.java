// SoakReader is the soak's checker's eyes: it reads partitions to their end
// with Pulsar's Java client, which shares no code with geo-sidecar's wire
// client, and prints one JSON line per message the soak's load generator
// tagged (its soak-origin, soak-producer and soak-seq properties, the
// publish time and the position), then one line per partition with how
// many it read and how many had no tag (geo-sidecar's markers).
//
//   java -cp CLASSPATH e2e/soak/SoakReader.java SERVICE_URL PARTITION...
//
// A partition is read from the earliest message while the broker says
// more is available; a read that times out (30 s) is an error, exit 1, so
// that the checker never counts a partition it did not read to its end.
// CLASSPATH is the test bed's: "$(cat "$(e2e/pulsar/cluster.sh classpath)")".
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.PulsarClient;

public class SoakReader {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: SoakReader SERVICE_URL PARTITION...");
            System.exit(2);
        }
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0])
                .operationTimeout(30, TimeUnit.SECONDS).build()) {
            for (int i = 1; i < args.length; i++) {
                read(client, args[i]);
            }
        }
    }

    static void read(PulsarClient client, String partition) throws Exception {
        long read = 0, untagged = 0;
        try (org.apache.pulsar.client.api.Reader<byte[]> r = client.newReader().topic(partition)
                .startMessageId(MessageId.earliest).receiverQueueSize(2000).create()) {
            while (r.hasMessageAvailable()) {
                Message<byte[]> m = r.readNext(30, TimeUnit.SECONDS);
                if (m == null) {
                    throw new IllegalStateException("no message within 30 s on " + partition + " after " + read
                            + " though the broker said more were available");
                }
                read++;
                String seq = m.getProperty("soak-seq");
                if (seq == null) {
                    untagged++;
                    continue;
                }
                MessageIdAdv id = (MessageIdAdv) m.getMessageId();
                Map<String, Object> d = new LinkedHashMap<>();
                d.put("p", partition);
                d.put("o", m.getProperty("soak-origin"));
                d.put("pr", m.getProperty("soak-producer"));
                d.put("s", Long.parseLong(seq));
                d.put("t", m.getPublishTime());
                d.put("pos", id.getLedgerId() + ":" + id.getEntryId() + ":" + id.getBatchIndex());
                // A sidecar's copy carries its origin properties; a message
                // its producer sent here does not.
                if (m.getProperty("geo-sidecar.origin-cluster") != null) {
                    d.put("c", true);
                }
                System.out.println(JSON.writeValueAsString(d));
            }
        }
        Map<String, Object> done = new LinkedHashMap<>();
        done.put("done", partition);
        done.put("read", read);
        done.put("untagged", untagged);
        System.out.println(JSON.writeValueAsString(done));
    }
}
