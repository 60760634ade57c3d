package io.geosidecar.entryfilter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.util.List;
import java.util.Properties;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.plugin.EntryFilter.FilterResult;
import org.apache.pulsar.broker.service.plugin.FilterContext;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class MarkerEntryFilterTest {

    /** A subscription that knows only its name (and has no topic). */
    private static Subscription subscription(String name) {
        return (Subscription) Proxy.newProxyInstance(Subscription.class.getClassLoader(),
                new Class<?>[] {Subscription.class}, (proxy, method, args) -> switch (method.getName()) {
                    case "getName" -> name;
                    case "toString" -> "subscription " + name;
                    case "hashCode" -> System.identityHashCode(proxy);
                    case "equals" -> proxy == args[0];
                    default -> null;
                });
    }

    private static MessageMetadata metadata(String producer, String... props) {
        MessageMetadata md = new MessageMetadata().setProducerName(producer).setSequenceId(1).setPublishTime(1);
        for (int i = 0; i + 1 < props.length; i += 2) {
            md.addProperty().setKey(props[i]).setValue(props[i + 1]);
        }
        return md;
    }

    private static FilterResult filter(MarkerEntryFilter f, String sub, MessageMetadata md) {
        FilterContext ctx = new FilterContext();
        ctx.setSubscription(sub == null ? null : subscription(sub));
        ctx.setMsgMetadata(md);
        return f.filterEntry(null, ctx);
    }

    private final MarkerEntryFilter byDefault = new MarkerEntryFilter(null);

    @ParameterizedTest(name = "kind {0}")
    @ValueSource(strings = {"10", "11", "12", "13"})
    void markerPropertyIsHiddenFromApplications(String kind) {
        // A copy forwarded by the entry path keeps the marker property under
        // the copying producer's name.
        MessageMetadata md = metadata("geo-sidecar.east-->west", "geo-sidecar.marker", kind, "other", "x");
        assertEquals(FilterResult.REJECT, filter(byDefault, "billing", md));
        assertEquals(FilterResult.REJECT, filter(byDefault, "reader-3f2a", md));
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "geo-sidecar.repl.west", md));
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "geo-sidecar.repl.history-1a2b3c4d", md));
    }

    @Test
    void markerProducerIsHiddenEvenWithoutTheProperty() {
        MessageMetadata md = metadata("geo-sidecar.markers.east-->west");
        assertEquals(FilterResult.REJECT, filter(byDefault, "billing", md));
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "geo-sidecar.repl.west", md));
    }

    @ParameterizedTest(name = "producer {0}, property {1}")
    @CsvSource({
        "app-1, ''",
        "app-1, 9",
        "app-1, 14",
        "app-1, 1",
        "app-1, 100",
        "app-1, ' 10'",
        "app-1, 1x",
        // Data copied by the sidecar: its producer prefix, no marker.
        "geo-sidecar.east-->west, ''",
        // Only the markers' producer prefix counts, not a look-alike.
        "geo-sidecar.markersX, ''",
    })
    void everythingElseIsAccepted(String producer, String value) {
        MessageMetadata md = value.isEmpty() ? metadata(producer) : metadata(producer, "geo-sidecar.marker", value);
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "billing", md));
    }

    @Test
    void markerInsideABatchIsNotSeen() {
        // A batching producer keeps per-message properties inside the batch;
        // the entry's metadata says only how many messages it holds.
        MessageMetadata md = metadata("geo-sidecar.east-->west").setNumMessagesInBatch(5);
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "billing", md));
    }

    @Test
    void batchStartingWithAMarkerIsAccepted() {
        // The Go client copies the first message's properties to the batch:
        // a batch of copies that starts with a marker also holds data, which
        // rejecting the entry would hide from the subscription.
        MessageMetadata md = metadata("geo-sidecar.east-->west", "geo-sidecar.marker", "11").setNumMessagesInBatch(7);
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "billing", md));
        md = metadata("geo-sidecar.markers.east-->west", "geo-sidecar.marker", "10").setNumMessagesInBatch(2);
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "billing", md));
    }

    @Test
    void batchOfOneMarkerIsHidden() {
        MessageMetadata md = metadata("geo-sidecar.east-->west", "geo-sidecar.marker", "12").setNumMessagesInBatch(1);
        assertEquals(FilterResult.REJECT, filter(byDefault, "billing", md));
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "geo-sidecar.repl.east", md));
    }

    @Test
    void missingContextIsAccepted() {
        MessageMetadata marker = metadata("geo-sidecar.markers.east-->west", "geo-sidecar.marker", "10");
        assertEquals(FilterResult.ACCEPT, filter(byDefault, null, marker));
        assertEquals(FilterResult.ACCEPT, filter(byDefault, "billing", null));
        assertEquals(FilterResult.ACCEPT, byDefault.filterEntry(null, null));
    }

    @Test
    void configuredPrefixesReplaceTheDefault() {
        MarkerEntryFilter f = new MarkerEntryFilter(" myrepl. , ops.audit ,,");
        MessageMetadata marker = metadata("app", "geo-sidecar.marker", "13");
        assertEquals(FilterResult.ACCEPT, filter(f, "myrepl.west", marker));
        assertEquals(FilterResult.ACCEPT, filter(f, "ops.audit", marker));
        assertEquals(FilterResult.REJECT, filter(f, "geo-sidecar.repl.west", marker));
        assertEquals(FilterResult.REJECT, filter(f, "myrepl", marker));
    }

    @Test
    void prefixesFromBrokerProperties() {
        Properties p = new Properties();
        assertEquals(List.of("geo-sidecar."), MarkerEntryFilter.prefixesFrom(p));
        assertEquals(List.of("geo-sidecar."), MarkerEntryFilter.prefixesFrom(null));
        p.setProperty(MarkerEntryFilter.PREFIXES_KEY, "  ");
        assertEquals(List.of("geo-sidecar."), MarkerEntryFilter.prefixesFrom(p));
        p.setProperty(MarkerEntryFilter.PREFIXES_KEY, "a.,b.");
        assertEquals(List.of("a.", "b."), MarkerEntryFilter.prefixesFrom(p));
    }

    @Test
    void pulsarsConstructorFallsBackToTheDefaultWithoutABroker() {
        // The no-argument constructor reads the broker's configuration through
        // the subscription's topic; a subscription with no topic gets the default.
        MarkerEntryFilter f = new MarkerEntryFilter();
        MessageMetadata marker = metadata("app", "geo-sidecar.marker", "12");
        assertEquals(FilterResult.ACCEPT, filter(f, "geo-sidecar.repl.west", marker));
        assertEquals(FilterResult.REJECT, filter(f, "billing", marker));
    }

    @Test
    void markerKinds() {
        for (String k : List.of("10", "11", "12", "13")) {
            assertTrue(MarkerEntryFilter.isMarkerKind(k), k);
        }
        for (String k : new String[] {null, "", "1", "09", "14", "20", "010", "1a"}) {
            assertFalse(MarkerEntryFilter.isMarkerKind(k), String.valueOf(k));
        }
    }
}
