package io.geosidecar.entryfilter;

import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.pulsar.broker.service.BrokerService;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.plugin.EntryFilter;
import org.apache.pulsar.broker.service.plugin.FilterContext;
import org.apache.pulsar.common.api.proto.KeyValue;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hides geo-sidecar's marker messages from applications.
 *
 * <p>geo-sidecar keeps replicated subscriptions in step with signed marker
 * messages written into the replicated topics themselves (kinds 10 to 13:
 * snapshot request, response, snapshot, update). The sidecar's own cursors
 * must read them; an application's consumer should never see them. Without
 * this filter every application has to skip them in code (the
 * {@code geo-sidecar.marker} property); with it the broker does so: a marker
 * entry is REJECTed for every subscription whose name does not start with
 * one of the configured prefixes, and Pulsar acknowledges a rejected entry
 * for that subscription, so it neither reaches the consumer nor stays in the
 * backlog. Every other entry is ACCEPTed.
 *
 * <p>A marker entry is one whose metadata has a producer name starting with
 * {@code geo-sidecar.markers.} (the sidecar's marker writer) or the property
 * {@code geo-sidecar.marker} with a value from "10" to "13" (which copies of
 * markers forwarded to another cluster keep). The sidecar writes one marker
 * per entry, so both are in the entry's metadata.
 *
 * <p>An entry holding a batch of more than one message is always ACCEPTed:
 * the entry's metadata says nothing reliable about the messages inside (the
 * Go client copies the first message's properties to the batch's metadata,
 * so a batch that starts with a marker, as the "messages" data path of
 * earlier versions wrote them among data, would look like a marker, and
 * rejecting it would hide the data after it).
 * Markers inside such batches reach applications.
 *
 * <p>Configuration: the broker property {@value #PREFIXES_KEY} (broker.conf,
 * or standalone.conf), a comma-separated list of subscription-name prefixes
 * that still see markers; default {@value #DEFAULT_PREFIXES}, which covers
 * the sidecar's default cursor prefix ({@code geo-sidecar.repl}) and its
 * start-up history reader. Pulsar gives an entry filter no configuration of
 * its own (it is built with its no-argument constructor), so the filter reads
 * the broker's configuration, whose properties include keys Pulsar does not
 * know, through the first subscription it filters for.
 *
 * <p>Thread-safety: one instance may filter for many topics and dispatcher
 * threads at once; it keeps no state but the prefixes, resolved once.
 */
public final class MarkerEntryFilter implements EntryFilter {

    /** Broker property naming the subscription-name prefixes that see markers. */
    public static final String PREFIXES_KEY = "geoSidecarMarkerSubscriptionPrefixes";

    /** Prefixes used when {@link #PREFIXES_KEY} is unset or blank. */
    public static final String DEFAULT_PREFIXES = "geo-sidecar.";

    /** Producer names of geo-sidecar's marker writers start with this. */
    static final String MARKER_PRODUCER_PREFIX = "geo-sidecar.markers.";

    /** The reserved property that tags a marker (marker.Property in the Go code). */
    static final String MARKER_PROPERTY = "geo-sidecar.marker";

    private static final Logger log = LoggerFactory.getLogger(MarkerEntryFilter.class);

    /** Resolved on first use from the broker's configuration; null before. */
    private volatile List<String> prefixes;

    /** The constructor Pulsar calls: prefixes come from the broker's configuration. */
    public MarkerEntryFilter() {
    }

    /** A filter with fixed prefixes, for tests. */
    MarkerEntryFilter(String prefixes) {
        this.prefixes = parsePrefixes(prefixes);
    }

    @Override
    public FilterResult filterEntry(Entry entry, FilterContext context) {
        if (context == null) {
            return FilterResult.ACCEPT;
        }
        MessageMetadata md = context.getMsgMetadata();
        Subscription sub = context.getSubscription();
        if (md == null || sub == null || !isMarker(md)) {
            return FilterResult.ACCEPT;
        }
        return seesMarkers(sub.getName(), prefixes(sub)) ? FilterResult.ACCEPT : FilterResult.REJECT;
    }

    @Override
    public void close() {
    }

    /**
     * Whether an entry with this metadata is a geo-sidecar marker: one
     * message (not batched, or a batch of one) with a marker's producer name
     * or property.
     */
    static boolean isMarker(MessageMetadata md) {
        if (md.hasNumMessagesInBatch() && md.getNumMessagesInBatch() > 1) {
            return false;
        }
        if (md.hasProducerName() && md.getProducerName().startsWith(MARKER_PRODUCER_PREFIX)) {
            return true;
        }
        for (int i = 0, n = md.getPropertiesCount(); i < n; i++) {
            KeyValue kv = md.getPropertyAt(i);
            if (MARKER_PROPERTY.equals(kv.getKey())) {
                return isMarkerKind(kv.getValue());
            }
        }
        return false;
    }

    /** Exactly "10", "11", "12" or "13", as the Go side's marker.KindOf accepts. */
    static boolean isMarkerKind(String v) {
        return v != null && v.length() == 2 && v.charAt(0) == '1' && v.charAt(1) >= '0' && v.charAt(1) <= '3';
    }

    /** Whether a subscription named name is one of the sidecar's and so sees markers. */
    static boolean seesMarkers(String name, List<String> prefixes) {
        if (name == null) {
            return false;
        }
        for (String p : prefixes) {
            if (name.startsWith(p)) {
                return true;
            }
        }
        return false;
    }

    /**
     * The prefixes in a comma-separated list, trimmed, empty items dropped;
     * the default when nothing is left (a filter that hid markers from the
     * sidecar too would stop subscription sync).
     */
    static List<String> parsePrefixes(String value) {
        List<String> out = new ArrayList<>();
        if (value != null) {
            for (String p : value.split(",")) {
                String t = p.trim();
                if (!t.isEmpty()) {
                    out.add(t);
                }
            }
        }
        if (out.isEmpty()) {
            out.add(DEFAULT_PREFIXES);
        }
        return List.copyOf(out);
    }

    /** The prefixes configured in the broker's properties. */
    static List<String> prefixesFrom(Properties brokerProperties) {
        return parsePrefixes(brokerProperties == null ? null : brokerProperties.getProperty(PREFIXES_KEY));
    }

    private List<String> prefixes(Subscription sub) {
        List<String> p = prefixes;
        if (p == null) {
            p = resolve(sub);
            prefixes = p;
        }
        return p;
    }

    private static List<String> resolve(Subscription sub) {
        Properties props = null;
        try {
            Topic topic = sub.getTopic();
            BrokerService bs = topic == null ? null : topic.getBrokerService();
            if (bs != null && bs.pulsar() != null) {
                props = bs.pulsar().getConfiguration().getProperties();
            }
        } catch (RuntimeException e) {
            log.warn("geo-sidecar entry filter cannot read the broker configuration; using the default prefixes", e);
        }
        List<String> p = prefixesFrom(props);
        log.info("geo-sidecar entry filter: markers reach only subscriptions starting with {} (broker property {})",
                p, PREFIXES_KEY);
        return p;
    }
}
