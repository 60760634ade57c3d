package io.geosidecar.positions;

import java.io.BufferedReader;
import java.io.IOException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.common.api.proto.CommandAck.AckType;
import org.apache.pulsar.common.naming.TopicName;

/**
 * Moves subscriptions forward the way Pulsar's own replicated subscriptions
 * do when an update arrives from another cluster: a cumulative
 * acknowledgement of the position on the subscription, whatever its type,
 * with or without consumers attached (ReplicatedSubscriptionsController).
 *
 * <p>Without it geo-sidecar moves a remote subscription over the binary
 * protocol (a consumer of its own, only for types that admit one beside the
 * applications') or with the admin API's reset-cursor (one request per
 * update, and it disconnects consumers, so never with any attached). Here
 * many updates cost one request per broker, and an Exclusive or Key_Shared
 * STICKY application's subscription moves with its consumers attached,
 * exactly as the broker's own replication moves it.
 *
 * <p>Request ({@code POST /geo-sidecar/acknowledge}, text/plain, one line
 * per subscription, at most {@value #MAX_ACKS}): {@code TOPIC SUBSCRIPTION
 * LEDGER ENTRY}, topic and subscription URL-encoded (UTF-8), separated by
 * single spaces. Everything up to and including LEDGER:ENTRY is
 * acknowledged; entry -1 (nothing of that ledger) is allowed.
 *
 * <p>Never backwards, never past the topic's last entry: a target at or
 * before the mark-delete position is "not-forward", one after the last
 * confirmed entry "beyond-end", and nothing is done for either. A topic
 * this broker has not loaded is "not-here" (it may be owned elsewhere); a
 * subscription it lacks "no-subscription" (the sidecar creates it with the
 * admin API). Each result carries the mark-delete position read after.
 */
final class Acknowledger {

    static final int MAX_ACKS = 1000;
    static final int MAX_BODY = 1 << 20;

    /** One line of a request. */
    record Ack(String topic, String subscription, long ledger, long entry) {
    }

    /** What one acknowledgement did; markDelete is null when not read. */
    record Result(Ack ack, String outcome, long[] markDelete) {
    }

    private Acknowledger() {
    }

    /**
     * Parses a request body; throws IllegalArgumentException naming the
     * line when it is not exactly the format (the whole request is then
     * refused: nothing of it is applied).
     */
    static List<Ack> parse(BufferedReader in) throws IOException {
        List<Ack> out = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        String line;
        int n = 0;
        long size = 0;
        while ((line = in.readLine()) != null) {
            n++;
            size += line.length() + 1;
            if (size > MAX_BODY) {
                throw new IllegalArgumentException("request larger than " + MAX_BODY + " bytes");
            }
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split(" ", -1);
            if (f.length != 4) {
                throw new IllegalArgumentException("line " + n + ": want TOPIC SUBSCRIPTION LEDGER ENTRY");
            }
            String topic = URLDecoder.decode(f[0], StandardCharsets.UTF_8);
            String sub = URLDecoder.decode(f[1], StandardCharsets.UTF_8);
            long ledger;
            long entry;
            try {
                ledger = Long.parseLong(f[2]);
                entry = Long.parseLong(f[3]);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("line " + n + ": ledger and entry must be numbers");
            }
            if (ledger < 0 || entry < -1) {
                throw new IllegalArgumentException("line " + n + ": ledger must be >= 0 and entry >= -1");
            }
            if (sub.isEmpty()) {
                throw new IllegalArgumentException("line " + n + ": empty subscription");
            }
            TopicName tn;
            try {
                tn = TopicName.get(topic);
            } catch (RuntimeException e) {
                throw new IllegalArgumentException("line " + n + ": not a topic name");
            }
            if (!tn.isPersistent() || !tn.toString().equals(topic)) {
                throw new IllegalArgumentException("line " + n + ": not a full persistent topic name");
            }
            if (!seen.add(topic + "\n" + sub)) {
                throw new IllegalArgumentException("line " + n + ": subscription listed twice");
            }
            out.add(new Ack(topic, sub, ledger, entry));
            if (out.size() > MAX_ACKS) {
                throw new IllegalArgumentException("more than " + MAX_ACKS + " acknowledgements");
            }
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException("no acknowledgement");
        }
        return out;
    }

    /** Looks up loaded topics; the broker's, or a test's. */
    interface Topics {
        Optional<Topic> loaded(String topic);
    }

    /** Applies each acknowledgement in turn. */
    static List<Result> apply(Topics topics, List<Ack> acks) {
        List<Result> out = new ArrayList<>(acks.size());
        for (Ack a : acks) {
            out.add(applyOne(topics, a));
        }
        return out;
    }

    private static Result applyOne(Topics topics, Ack a) {
        Optional<Topic> t = topics.loaded(a.topic());
        if (t.isEmpty() || !(t.get() instanceof PersistentTopic pt)) {
            return new Result(a, "not-here", null);
        }
        PersistentSubscription sub = pt.getSubscription(a.subscription());
        if (sub == null || sub.getCursor() == null || !sub.getCursor().isDurable()) {
            return new Result(a, "no-subscription", null);
        }
        Position target = PositionFactory.create(a.ledger(), a.entry());
        Position md = sub.getCursor().getMarkDeletedPosition();
        if (md != null && target.compareTo(md) <= 0) {
            return new Result(a, "not-forward", pos(md));
        }
        Position last = pt.getManagedLedger().getLastConfirmedEntry();
        if (last != null && target.compareTo(last) > 0) {
            return new Result(a, "beyond-end", pos(md));
        }
        try {
            // What the broker's own replicated subscriptions do with an
            // update: the mark-delete moves in memory at once (persisted
            // later, as for any acknowledgement).
            sub.acknowledgeMessage(List.of(target), AckType.Cumulative, java.util.Map.of());
        } catch (RuntimeException e) {
            return new Result(a, "failed", pos(sub.getCursor().getMarkDeletedPosition()));
        }
        Position after = sub.getCursor().getMarkDeletedPosition();
        if (after == null || after.compareTo(target) < 0) {
            return new Result(a, "pending", pos(after));
        }
        return new Result(a, "moved", pos(after));
    }

    private static long[] pos(Position p) {
        return p == null ? null : new long[] {p.getLedgerId(), p.getEntryId()};
    }
}
