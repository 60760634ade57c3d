// Switchover is the application of e2e/switchover_test.go
// (TestSwitchoverJava), written with Pulsar's Java client:
//
//   consume SERVICE_URL TOPIC SUB TYPE N HOLD_EVERY
//       receives N messages "order-<i>" of SUB (TYPE: Shared, Failover,
//       Exclusive, Key_Shared), acknowledges each but those whose i is a
//       multiple of HOLD_EVERY (held back, never acknowledged), and closes;
//       prints {"held": [i...], "markers": k}
//   drain SERVICE_URL TOPIC SUB TYPE IDLE_SECONDS
//       receives and acknowledges every message of SUB until none came for
//       IDLE_SECONDS, and closes; prints {"received": [i...], "markers": k}
//
// Copies of geo-sidecar's markers (property geo-sidecar.marker; only
// where the marker entry filter is not loaded) are acknowledged and
// counted apart. Acknowledgements wait for the broker's receipt, so what
// the program acknowledged is on the broker when it exits.
//
// Run as a single-file program with the test bed's classpath (see
// Fidelity.java).
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public class Switchover {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String MARKER = "geo-sidecar.marker";
    static final String PREFIX = "order-";

    public static void main(String[] args) throws Exception {
        boolean consume = args.length == 7 && args[0].equals("consume");
        boolean drain = args.length == 6 && args[0].equals("drain");
        if (!consume && !drain) {
            System.err.println("usage: Switchover consume SERVICE_URL TOPIC SUB TYPE N HOLD_EVERY | drain SERVICE_URL TOPIC SUB TYPE IDLE_SECONDS");
            System.exit(2);
        }
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build();
                Consumer<byte[]> c = client.newConsumer().topic(args[2]).subscriptionName(args[3])
                        .subscriptionType(SubscriptionType.valueOf(args[4]))
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .isAckReceiptEnabled(true).subscribe()) {
            Map<String, Object> out = new LinkedHashMap<>();
            List<Integer> seen = new ArrayList<>();
            int markers = 0;
            if (consume) {
                int n = Integer.parseInt(args[5]), every = Integer.parseInt(args[6]);
                while (seen.size() < n) {
                    Message<byte[]> m = c.receive(60, TimeUnit.SECONDS);
                    if (m == null) {
                        throw new IllegalStateException("no message within 60 s after " + seen.size() + " of " + n);
                    }
                    if (m.hasProperty(MARKER)) {
                        markers++;
                        c.acknowledge(m);
                        continue;
                    }
                    int i = index(m);
                    seen.add(i);
                    if (i % every == 0) {
                        continue; // held back
                    }
                    c.acknowledge(m);
                }
                List<Integer> held = new ArrayList<>();
                for (int i : seen) {
                    if (i % every == 0) {
                        held.add(i);
                    }
                }
                out.put("held", held);
            } else {
                int idle = Integer.parseInt(args[5]);
                for (Message<byte[]> m; (m = c.receive(idle, TimeUnit.SECONDS)) != null; ) {
                    c.acknowledge(m);
                    if (m.hasProperty(MARKER)) {
                        markers++;
                        continue;
                    }
                    seen.add(index(m));
                }
                out.put("received", seen);
            }
            out.put("markers", markers);
            System.out.println(JSON.writeValueAsString(out));
        }
    }

    static int index(Message<byte[]> m) {
        String s = new String(m.getData(), StandardCharsets.UTF_8);
        if (!s.startsWith(PREFIX)) {
            throw new IllegalStateException("unexpected message " + s);
        }
        return Integer.parseInt(s.substring(PREFIX.length()));
    }
}
