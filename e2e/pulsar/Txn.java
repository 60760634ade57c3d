// Txn produces, with Pulsar's Java client and transactions enabled, the
// messages e2e/txn_test.go (TestTransactionsNorthToEast) copies from north
// (the test bed's cluster with a transaction coordinator) to east:
//
//   committed-0..9            a transaction, committed at once (one batch)
//   aborted-0..9              a transaction, aborted (a batch and singles)
//   open-0..4                 a transaction left open for HOLD seconds ...
//   plain-after-open-0..4     ... with plain messages written after it,
//                             then the transaction commits
//   timedout-0..4             a transaction with a TIMEOUT-second timeout,
//                             never committed: the coordinator aborts it
//   plain-after-timeout-0..4  plain messages written while it is open
//   plain-final-0..4          plain messages once it is gone
//
// Keys name the group ("committed", "aborted", ...). One JSON line per step
// on stdout: {"event": ..., "at": Unix ms, "payloads": [...]}, so the test
// can tell when each group was written (after its receipts), when each
// transaction began or ended, and what a commit of the timed-out one
// answered ("error").
//
//   produce SERVICE_URL TOPIC HOLD_SECONDS TIMEOUT_SECONDS
//
// Run as a single-file program with the test bed's classpath (see
// Fidelity.java):
//   java -cp "$(cat "$(e2e/pulsar/cluster.sh classpath)")" e2e/pulsar/Txn.java produce pulsar://127.0.0.1:6670 persistent://t/ns/x 10 5
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.transaction.Transaction;

public class Txn {
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        if (args.length != 5 || !args[0].equals("produce")) {
            System.err.println("usage: Txn produce SERVICE_URL TOPIC HOLD_SECONDS TIMEOUT_SECONDS");
            System.exit(2);
        }
        String topic = args[2];
        int hold = Integer.parseInt(args[3]), timeout = Integer.parseInt(args[4]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).enableTransaction(true).build();
                // Transactional sends need the send timeout off.
                Producer<byte[]> batched = client.newProducer().topic(topic).producerName("txn-batched")
                        .enableBatching(true).batchingMaxMessages(100).batchingMaxPublishDelay(1, TimeUnit.SECONDS)
                        .sendTimeout(0, TimeUnit.SECONDS).create();
                Producer<byte[]> single = client.newProducer().topic(topic).producerName("txn-single")
                        .enableBatching(false).sendTimeout(0, TimeUnit.SECONDS).create();
                Producer<byte[]> plain = client.newProducer().topic(topic).producerName("plain")
                        .enableBatching(false).create()) {

            // Committed: one batch inside the transaction.
            Transaction t1 = newTxn(client, 600);
            List<String> p = send(batched, t1, "committed", 0, 10);
            t1.commit().get();
            event("committed", p);

            // Aborted: a batch and single messages.
            Transaction t2 = newTxn(client, 600);
            p = send(batched, t2, "aborted", 0, 5);
            p.addAll(send(single, t2, "aborted", 5, 10));
            t2.abort().get();
            event("aborted", p);

            // Open for HOLD seconds, with plain messages after it.
            Transaction t3 = newTxn(client, 600);
            event("open-sent", send(single, t3, "open", 0, 5));
            event("plain-after-open-sent", send(plain, null, "plain-after-open", 0, 5));
            Thread.sleep(hold * 1000L);
            event("open-committing", List.of());
            t3.commit().get();
            event("open-committed", List.of());

            // Timed out: the coordinator aborts it after TIMEOUT seconds.
            Transaction t4 = newTxn(client, timeout);
            event("timedout-begun", List.of());
            event("timedout-sent", send(single, t4, "timedout", 0, 5));
            event("plain-after-timeout-sent", send(plain, null, "plain-after-timeout", 0, 5));
            Thread.sleep((timeout + 3) * 1000L);
            String err = "committed, unexpectedly";
            try {
                t4.commit().get();
            } catch (ExecutionException e) {
                err = e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
            }
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("event", "timedout-commit-refused");
            line.put("at", System.currentTimeMillis());
            line.put("error", err);
            System.out.println(JSON.writeValueAsString(line));

            event("plain-final-sent", send(plain, null, "plain-final", 0, 5));
        }
    }

    static Transaction newTxn(PulsarClient client, int timeoutSeconds) throws Exception {
        return client.newTransaction().withTransactionTimeout(timeoutSeconds, TimeUnit.SECONDS).build().get();
    }

    // send writes "<group>-<from>".."<group>-<to-1>" with key group, in txn
    // (or none), and waits for every receipt.
    static List<String> send(Producer<byte[]> p, Transaction txn, String group, int from, int to) throws Exception {
        List<String> payloads = new ArrayList<>();
        List<CompletableFuture<MessageId>> sends = new ArrayList<>();
        for (int i = from; i < to; i++) {
            String v = group + "-" + i;
            payloads.add(v);
            var m = txn == null ? p.newMessage() : p.newMessage(txn);
            sends.add(m.key(group).value(v.getBytes(StandardCharsets.UTF_8)).sendAsync());
        }
        p.flush();
        for (CompletableFuture<MessageId> f : sends) {
            f.get(30, TimeUnit.SECONDS);
        }
        return payloads;
    }

    static void event(String name, List<String> payloads) throws Exception {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("event", name);
        line.put("at", System.currentTimeMillis());
        line.put("payloads", payloads);
        System.out.println(JSON.writeValueAsString(line));
    }
}
