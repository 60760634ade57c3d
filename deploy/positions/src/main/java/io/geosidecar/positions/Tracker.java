package io.geosidecar.positions;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Numbers the states of subscriptions as a broker's scans see them, so a
 * caller can ask for "what changed since the answer I last had".
 *
 * <p>The broker has no counter of cursor changes, and acknowledgements are
 * not the only thing that moves a cursor (reset-cursor, skip, clear-backlog
 * and message expiry move it too, and reset-cursor moves it back). So the
 * tracker compares states, not events: each poll reads the mark-delete
 * position and the individually acknowledged ranges of every subscription
 * in scope and gives a subscription a new sequence number whenever what it
 * reads differs from what the previous poll read. An answer "since N" then
 * holds every subscription in scope whose sequence number is above N: its
 * state as this poll read it, or that it is gone (its topic left this
 * broker, or the subscription was deleted).
 *
 * <p>The numbers belong to one tracker, named by its epoch (random per
 * broker start). A caller holding another epoch, or asking since a number
 * older than the forgotten tombstones, gets a full answer: every
 * subscription in scope, and anything it knew that is not listed is gone.
 *
 * <p>Thread-safety: {@link #poll} is synchronized and reads the broker
 * inside the lock. Reading outside it would let two polls read a cursor
 * at different moments and store the older reading last, under the newer
 * number (after a reset-cursor, a position the subscription left).
 */
final class Tracker {

    /** One subscription as one scan read it. */
    record Observation(String topic, String namespace, String subscription,
                       long markDeleteLedger, long markDeleteEntry, long[] ranges, boolean truncated) {
    }

    /** What a poll covers: these namespaces, these subscription names. */
    record Scope(Set<String> namespaces, Set<String> subscriptions) {
        boolean covers(String namespace, String subscription) {
            return namespaces.contains(namespace) && subscriptions.contains(subscription);
        }
    }

    /** One subscription of an answer: its state, or gone. */
    record Item(String topic, String subscription, long seq, boolean gone,
                long markDeleteLedger, long markDeleteEntry, long[] ranges, boolean truncated) {
    }

    /** One answer: the tracker's numbers and the subscriptions that changed. */
    record Answer(String epoch, long seq, boolean full, List<Item> items) {
    }

    private static final class Entry {
        final String topic;
        final String namespace;
        final String subscription;
        long markDeleteLedger;
        long markDeleteEntry;
        long[] ranges;
        boolean truncated;
        boolean gone;
        long seq;
        long goneAtMillis;

        Entry(Observation o) {
            this.topic = o.topic();
            this.namespace = o.namespace();
            this.subscription = o.subscription();
        }

        boolean sameAs(Observation o) {
            return !gone && markDeleteLedger == o.markDeleteLedger() && markDeleteEntry == o.markDeleteEntry()
                    && truncated == o.truncated() && Arrays.equals(ranges, o.ranges());
        }

        void set(Observation o, long seq) {
            markDeleteLedger = o.markDeleteLedger();
            markDeleteEntry = o.markDeleteEntry();
            ranges = o.ranges();
            truncated = o.truncated();
            gone = false;
            this.seq = seq;
        }

        Item item() {
            return new Item(topic, subscription, seq, gone, markDeleteLedger, markDeleteEntry, ranges, truncated);
        }
    }

    private final String epoch;
    private final long tombstoneMillis;
    private final Map<String, Entry> entries = new HashMap<>();
    private long seq;
    // Tombstones numbered at or below it were forgotten: an answer since an
    // older number could miss a gone subscription, so it is a full answer.
    private long horizon;

    Tracker(String epoch, long tombstoneMillis) {
        this.epoch = epoch;
        this.tombstoneMillis = tombstoneMillis;
    }

    String epoch() {
        return epoch;
    }

    /**
     * Reads the subscriptions in scope (scan is iterated once, inside the
     * lock), numbers what changed and answers what the caller lacks.
     *
     * @param askedEpoch the epoch of the caller's last answer ("" for none)
     * @param since      the seq of the caller's last answer (0 for none)
     */
    synchronized Answer poll(Scope scope, Iterable<Observation> scan, String askedEpoch, long since, long nowMillis) {
        Set<String> seen = new HashSet<>();
        for (Observation o : scan) {
            if (!scope.covers(o.namespace(), o.subscription())) {
                continue;
            }
            String key = key(o.topic(), o.subscription());
            if (!seen.add(key)) {
                continue;
            }
            Entry e = entries.get(key);
            if (e == null) {
                e = new Entry(o);
                entries.put(key, e);
            } else if (e.sameAs(o)) {
                continue;
            }
            e.set(o, ++seq);
        }
        for (Iterator<Entry> it = entries.values().iterator(); it.hasNext(); ) {
            Entry e = it.next();
            if (e.gone) {
                if (nowMillis - e.goneAtMillis > tombstoneMillis) {
                    horizon = Math.max(horizon, e.seq);
                    it.remove();
                }
                continue;
            }
            if (scope.covers(e.namespace, e.subscription) && !seen.contains(key(e.topic, e.subscription))) {
                e.gone = true;
                e.goneAtMillis = nowMillis;
                e.ranges = null;
                e.seq = ++seq;
            }
        }
        boolean full = !epoch.equals(askedEpoch) || since <= 0 || since < horizon || since > seq;
        List<Item> items = new ArrayList<>();
        for (Entry e : entries.values()) {
            if (!scope.covers(e.namespace, e.subscription)) {
                continue;
            }
            if (full ? !e.gone : e.seq > since) {
                items.add(e.item());
            }
        }
        items.sort((a, b) -> Long.compare(a.seq(), b.seq()));
        return new Answer(epoch, seq, full, items);
    }

    private static String key(String topic, String subscription) {
        return topic + '\n' + subscription;
    }
}
