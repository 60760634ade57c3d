package io.geosidecar.positions;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import javax.servlet.http.HttpServlet;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.impl.ManagedCursorImpl;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.authentication.AuthenticationDataSource;
import org.apache.pulsar.broker.authentication.AuthenticationDataSubscription;
import org.apache.pulsar.broker.authorization.AuthorizationService;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.broker.web.AuthenticationFilter;
import org.apache.pulsar.broker.web.plugin.servlet.AdditionalServletWithPulsarService;
import org.apache.pulsar.common.configuration.PulsarConfiguration;
import org.apache.pulsar.common.naming.TopicName;
import org.apache.pulsar.common.policies.data.TopicOperation;
import org.eclipse.jetty.servlet.ServletHolder;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A broker plugin ("additional servlet") that tells geo-sidecar where many
 * subscriptions are in one request per broker.
 *
 * <p>Without it the sidecar learns that a subscription moved from the admin
 * API, one stats or internal-stats request per topic partition, under a
 * request budget: a round over N busy topics takes N/budget seconds. Inside
 * the broker every loaded subscription's cursor (its mark-delete position
 * and individually acknowledged ranges) is in memory. This servlet reads
 * them for the namespaces and subscription names asked, on the topics this
 * broker owns, and answers only those whose state changed since the caller's
 * last answer ({@link Tracker}).
 *
 * <p>{@code GET /geo-sidecar/positions?namespace=T/NS&subscription=S[&…]&since=N&epoch=E}
 * (namespace and subscription repeat; at most {@value #MAX_NAMESPACES}
 * namespaces and {@value #MAX_SUBSCRIPTIONS} names). The answer's format is
 * in {@link Json}.
 *
 * <p>Who may ask: Pulsar puts its authentication filter in front of an
 * additional servlet when the broker has authentication enabled. With
 * authorization enabled the caller must be a super-user, or be allowed the
 * stats of every topic the answer names (the permission the admin API's
 * per-topic stats call checks), else the whole answer is refused (403). The
 * answer reads state only.
 *
 * <p>{@code POST /geo-sidecar/acknowledge} moves subscriptions forward as the
 * broker's own replicated subscriptions do ({@link Acknowledger}); the
 * caller must be a super-user or allowed reset-cursor on every subscription
 * it names.
 *
 * <p>Thread-safety: requests run on the broker's web threads at once; the
 * tracker serializes the reading and numbering.
 */
public final class PositionsServlet implements AdditionalServletWithPulsarService {

    /** Where Pulsar mounts the servlet. */
    public static final String BASE_PATH = "/geo-sidecar";
    static final int MAX_NAMESPACES = 100;
    static final int MAX_SUBSCRIPTIONS = 1000;
    /** Ranges listed per subscription (Pulsar persists 10,000 by default). */
    static final int MAX_RANGES = 10_000;
    private static final long TOMBSTONE_MILLIS = TimeUnit.HOURS.toMillis(1);
    private static final Pattern NAMESPACE = Pattern.compile("[A-Za-z0-9_=:.-]+/[A-Za-z0-9_=:.-]+");
    private static final Logger log = LoggerFactory.getLogger(PositionsServlet.class);

    private final Tracker tracker = new Tracker(newEpoch(), TOMBSTONE_MILLIS);
    private volatile PulsarService pulsar;

    @Override
    public void loadConfig(PulsarConfiguration conf) {
        // Nothing to configure: the scope comes with each request.
    }

    @Override
    public void setPulsarService(PulsarService pulsar) {
        this.pulsar = pulsar;
    }

    @Override
    public String getBasePath() {
        return BASE_PATH;
    }

    @Override
    public ServletHolder getServletHolder() {
        return new ServletHolder(new Handler());
    }

    @Override
    public void close() {
    }

    private static String newEpoch() {
        byte[] b = new byte[8];
        new SecureRandom().nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    private final class Handler extends HttpServlet {
        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            if ("/backlogs".equals(req.getPathInfo())) {
                backlogs(req, resp);
                return;
            }
            if (!"/positions".equals(req.getPathInfo())) {
                send(resp, 404, Json.error("not found: the path is " + BASE_PATH + "/positions"));
                return;
            }
            PulsarService p = pulsar;
            if (p == null) {
                send(resp, 503, Json.error("broker not ready"));
                return;
            }
            Set<String> namespaces = values(req, "namespace");
            Set<String> subscriptions = values(req, "subscription");
            String bad = validate(namespaces, subscriptions);
            long since;
            try {
                since = req.getParameter("since") == null ? 0 : Long.parseLong(req.getParameter("since"));
            } catch (NumberFormatException e) {
                since = -1;
            }
            if (bad == null && since < 0) {
                bad = "since must be a number >= 0";
            }
            if (bad != null) {
                send(resp, 400, Json.error(bad));
                return;
            }
            String epoch = req.getParameter("epoch") == null ? "" : req.getParameter("epoch");
            Tracker.Answer answer = tracker.poll(new Tracker.Scope(namespaces, subscriptions),
                    scan(p, namespaces, subscriptions), epoch, since, System.currentTimeMillis());
            String denied = authorize(p, req, answer);
            if (denied != null) {
                send(resp, denied.startsWith("no ") ? 401 : 403, Json.error(denied));
                return;
            }
            send(resp, 200, Json.answer(answer));
        }

        /**
         * {@code GET /backlogs?namespace=T/NS&subscription=S[&…]}: the backlog,
         * in entries, of every subscription in scope on the topics this
         * broker has loaded, as the admin API's stats count it (msgBacklog,
         * not precise): one request per broker instead of a stats request
         * per topic partition. Not numbered: backlogs move with every
         * message, so every answer is whole. Authorized as the positions.
         */
        private void backlogs(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            PulsarService p = pulsar;
            if (p == null) {
                send(resp, 503, Json.error("broker not ready"));
                return;
            }
            Set<String> namespaces = values(req, "namespace");
            Set<String> subscriptions = values(req, "subscription");
            String bad = validate(namespaces, subscriptions);
            if (bad != null) {
                send(resp, 400, Json.error(bad));
                return;
            }
            List<Tracker.Item> items = new ArrayList<>();
            List<Long> counts = new ArrayList<>();
            forEachSubscription(p, namespaces, subscriptions, (pt, ns, name, sub) -> {
                if (sub.getCursor() != null && sub.getCursor().isDurable()) {
                    items.add(new Tracker.Item(pt.getName(), name, 0, false, 0, 0, null, false));
                    counts.add(Math.max(0, sub.getNumberOfEntriesInBacklog(false)));
                }
            });
            String denied = authorize(p, req, new Tracker.Answer("", 0, true, items));
            if (denied != null) {
                send(resp, denied.startsWith("no ") ? 401 : 403, Json.error(denied));
                return;
            }
            send(resp, 200, Json.backlogs(items, counts));
        }

        /** {@code POST /acknowledge}: see {@link Acknowledger}. */
        @Override
        protected void doPost(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            if (!"/acknowledge".equals(req.getPathInfo())) {
                send(resp, 404, Json.error("not found: the path is " + BASE_PATH + "/acknowledge"));
                return;
            }
            PulsarService p = pulsar;
            if (p == null) {
                send(resp, 503, Json.error("broker not ready"));
                return;
            }
            if (req.getContentLengthLong() > Acknowledger.MAX_BODY) {
                send(resp, 413, Json.error("request larger than " + Acknowledger.MAX_BODY + " bytes"));
                return;
            }
            List<Acknowledger.Ack> acks;
            try {
                acks = Acknowledger.parse(req.getReader());
            } catch (IllegalArgumentException e) {
                send(resp, 400, Json.error(e.getMessage()));
                return;
            }
            // Every line authorized before any is applied: a request
            // is applied whole or not at all as far as permissions go.
            String denied = authorizeMoves(p, req, acks);
            if (denied != null) {
                send(resp, denied.startsWith("no ") ? 401 : 403, Json.error(denied));
                return;
            }
            List<Acknowledger.Result> results = Acknowledger.apply(
                    topic -> p.getBrokerService().getTopicReference(topic), acks);
            send(resp, 200, Json.acknowledged(results));
        }
    }

    private static Set<String> values(HttpServletRequest req, String name) {
        String[] v = req.getParameterValues(name);
        Set<String> s = new LinkedHashSet<>();
        if (v != null) {
            for (String x : v) {
                s.add(x);
            }
        }
        return s;
    }

    static String validate(Set<String> namespaces, Set<String> subscriptions) {
        if (namespaces.isEmpty() || namespaces.size() > MAX_NAMESPACES) {
            return "between 1 and " + MAX_NAMESPACES + " namespace parameters";
        }
        if (subscriptions.isEmpty() || subscriptions.size() > MAX_SUBSCRIPTIONS) {
            return "between 1 and " + MAX_SUBSCRIPTIONS + " subscription parameters";
        }
        for (String ns : namespaces) {
            if (!NAMESPACE.matcher(ns).matches()) {
                return "namespace must be tenant/namespace";
            }
        }
        for (String s : subscriptions) {
            if (s.isEmpty()) {
                return "subscription must not be empty";
            }
        }
        return null;
    }

    /**
     * The subscriptions in scope on the persistent topics this broker has
     * loaded, read lazily (the tracker iterates inside its lock).
     */
    private static Iterable<Tracker.Observation> scan(PulsarService p, Set<String> namespaces,
                                                      Set<String> subscriptions) {
        return () -> {
            List<Tracker.Observation> out = new ArrayList<>();
            forEachSubscription(p, namespaces, subscriptions, (pt, ns, name, sub) -> {
                Tracker.Observation o = observe(pt.getName(), ns, name, sub.getCursor());
                if (o != null) {
                    out.add(o);
                }
            });
            return out.iterator();
        };
    }

    /** What {@link #forEachSubscription} hands each subscription in scope to. */
    private interface SubscriptionVisitor {
        void visit(PersistentTopic topic, String namespace, String name, PersistentSubscription sub);
    }

    /**
     * Visits every subscription named in subscriptions on the persistent
     * topics of namespaces that this broker has loaded.
     */
    private static void forEachSubscription(PulsarService p, Set<String> namespaces, Set<String> subscriptions,
                                            SubscriptionVisitor v) {
        Map<String, Map<String, Map<String, Topic>>> byNamespace = p.getBrokerService().getMultiLayerTopicsMap();
        for (String ns : namespaces) {
            Map<String, Map<String, Topic>> bundles = byNamespace.get(ns);
            if (bundles == null) {
                continue;
            }
            for (Map<String, Topic> topics : bundles.values()) {
                for (Topic t : topics.values()) {
                    if (!(t instanceof PersistentTopic pt)) {
                        continue;
                    }
                    for (String name : subscriptions) {
                        PersistentSubscription sub = pt.getSubscription(name);
                        if (sub != null) {
                            v.visit(pt, ns, name, sub);
                        }
                    }
                }
            }
        }
    }

    /** One cursor's mark-delete and ranges, read together under its lock. */
    static Tracker.Observation observe(String topic, String ns, String name, ManagedCursor cursor) {
        if (cursor == null || !cursor.isDurable()) {
            return null;
        }
        List<long[]> ranges = new ArrayList<>();
        boolean[] truncated = {false};
        Position md;
        if (cursor instanceof ManagedCursorImpl impl) {
            md = impl.processIndividuallyDeletedMessagesAndGetMarkDeletedPosition(r -> {
                if (ranges.size() >= MAX_RANGES) {
                    truncated[0] = true;
                    return false;
                }
                Position lo = r.lowerEndpoint();
                Position hi = r.upperEndpoint();
                ranges.add(new long[] {lo.getLedgerId(), lo.getEntryId(), hi.getLedgerId(), hi.getEntryId()});
                return true;
            });
        } else {
            md = cursor.getMarkDeletedPosition();
        }
        if (md == null) {
            return null;
        }
        long[] flat = new long[ranges.size() * 4];
        for (int i = 0; i < ranges.size(); i++) {
            System.arraycopy(ranges.get(i), 0, flat, i * 4, 4);
        }
        return new Tracker.Observation(topic, ns, name, md.getLedgerId(), md.getEntryId(), flat, truncated[0]);
    }

    /**
     * Null when the caller may read every topic the answer names; else why
     * not (starting with "no " when the caller is not authenticated).
     */
    private static String authorize(PulsarService p, HttpServletRequest req, Tracker.Answer answer) {
        Map<String, Check> checks = new LinkedHashMap<>();
        for (Tracker.Item it : answer.items()) {
            String base = TopicName.get(it.topic()).getPartitionedTopicName();
            checks.putIfAbsent("role may not read the stats of " + base, (authz, role, auth) ->
                    authz.allowTopicOperationAsync(TopicName.get(base), TopicOperation.GET_STATS, role, auth));
        }
        return authorizeAll(p, req, checks);
    }

    /**
     * Null when the caller may move every subscription named (a super-user,
     * or allowed reset-cursor on the topic for that subscription: what the
     * admin API's reset-cursor checks, the call this replaces); else why
     * not.
     */
    private static String authorizeMoves(PulsarService p, HttpServletRequest req, List<Acknowledger.Ack> acks) {
        Map<String, Check> checks = new LinkedHashMap<>();
        for (Acknowledger.Ack a : acks) {
            String base = TopicName.get(a.topic()).getPartitionedTopicName();
            checks.putIfAbsent("role may not reset the cursor of " + a.subscription() + " on " + base, (authz, role, auth) ->
                    authz.allowTopicOperationAsync(TopicName.get(base), TopicOperation.RESET_CURSOR, role,
                            new AuthenticationDataSubscription(auth, a.subscription())));
        }
        return authorizeAll(p, req, checks);
    }

    /** One permission a request needs. */
    private interface Check {
        CompletableFuture<Boolean> allowed(AuthorizationService authz, String role, AuthenticationDataSource auth);
    }

    /**
     * Null when authorization is off, the caller is a super-user, or every
     * check allows it; else the refusal of the first that does not (its
     * key), or why the caller is not known (starting with "no ").
     */
    private static String authorizeAll(PulsarService p, HttpServletRequest req, Map<String, Check> checks) {
        if (!p.getConfiguration().isAuthorizationEnabled()) {
            return null;
        }
        Object role = req.getAttribute(AuthenticationFilter.AuthenticatedRoleAttributeName);
        Object data = req.getAttribute(AuthenticationFilter.AuthenticatedDataAttributeName);
        if (!(role instanceof String r)) {
            return "no authenticated role";
        }
        AuthenticationDataSource auth = data instanceof AuthenticationDataSource d ? d : null;
        AuthorizationService authz = p.getBrokerService().getAuthorizationService();
        try {
            if (authz.isSuperUser(r, auth).get(10, TimeUnit.SECONDS)) {
                return null;
            }
            for (Map.Entry<String, Check> c : checks.entrySet()) {
                if (!c.getValue().allowed(authz, r, auth).get(10, TimeUnit.SECONDS)) {
                    return c.getKey();
                }
            }
            return null;
        } catch (Exception e) {
            log.warn("geo-sidecar positions: authorization check failed", e);
            return "authorization check failed";
        }
    }

    private static void send(HttpServletResponse resp, int status, String body) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        resp.setStatus(status);
        resp.setContentType("application/json");
        resp.setHeader("Cache-Control", "no-store");
        resp.setContentLength(b.length);
        resp.getOutputStream().write(b);
    }
}
