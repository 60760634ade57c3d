package io.geosidecar.positions;

/**
 * Writes the servlet's answers. By hand, so the NAR depends on no JSON
 * library of the broker's (whose versions differ between Pulsar releases).
 *
 * <p>Answer, version 1:
 * <pre>
 * {"v":1,"epoch":"…","seq":N,"full":B,"subscriptions":[
 *   {"topic":"persistent://t/ns/x","subscription":"s","seq":N,
 *    "markDelete":[ledger,entry],"acked":[[l1,e1,l2,e2],…]},
 *   {"topic":"…","subscription":"…","seq":N,"gone":true}]}
 * </pre>
 * Each "acked" range is (l1:e1, l2:e2]: open at the start, closed at the
 * end, as the broker keeps its individually deleted messages. "truncated":
 * true follows "acked" when the subscription had more ranges than an answer
 * carries (the first ones are listed).
 */
final class Json {

    private Json() {
    }

    static String answer(Tracker.Answer a) {
        StringBuilder b = new StringBuilder(64 + a.items().size() * 96);
        b.append("{\"v\":1,\"epoch\":");
        string(b, a.epoch());
        b.append(",\"seq\":").append(a.seq()).append(",\"full\":").append(a.full()).append(",\"subscriptions\":[");
        boolean first = true;
        for (Tracker.Item it : a.items()) {
            if (!first) {
                b.append(',');
            }
            first = false;
            b.append("{\"topic\":");
            string(b, it.topic());
            b.append(",\"subscription\":");
            string(b, it.subscription());
            b.append(",\"seq\":").append(it.seq());
            if (it.gone()) {
                b.append(",\"gone\":true}");
                continue;
            }
            b.append(",\"markDelete\":[").append(it.markDeleteLedger()).append(',').append(it.markDeleteEntry())
                    .append("],\"acked\":[");
            long[] r = it.ranges();
            for (int i = 0; r != null && i + 3 < r.length; i += 4) {
                if (i > 0) {
                    b.append(',');
                }
                b.append('[').append(r[i]).append(',').append(r[i + 1]).append(',').append(r[i + 2]).append(',')
                        .append(r[i + 3]).append(']');
            }
            b.append(']');
            if (it.truncated()) {
                b.append(",\"truncated\":true");
            }
            b.append('}');
        }
        return b.append("]}").toString();
    }

    /**
     * The answer to {@code POST /acknowledge}, version 1, one result per
     * line of the request, in its order:
     * <pre>
     * {"v":1,"results":[{"topic":"…","subscription":"…","outcome":"moved",
     *   "markDelete":[ledger,entry]},…]}
     * </pre>
     * "markDelete" (read after) is left out when not read.
     */
    static String acknowledged(java.util.List<Acknowledger.Result> results) {
        StringBuilder b = new StringBuilder(32 + results.size() * 128);
        b.append("{\"v\":1,\"results\":[");
        boolean first = true;
        for (Acknowledger.Result r : results) {
            if (!first) {
                b.append(',');
            }
            first = false;
            b.append("{\"topic\":");
            string(b, r.ack().topic());
            b.append(",\"subscription\":");
            string(b, r.ack().subscription());
            b.append(",\"outcome\":");
            string(b, r.outcome());
            if (r.markDelete() != null) {
                b.append(",\"markDelete\":[").append(r.markDelete()[0]).append(',').append(r.markDelete()[1]).append(']');
            }
            b.append('}');
        }
        return b.append("]}").toString();
    }

    /**
     * The answer to {@code GET /backlogs}, version 1:
     * <pre>
     * {"v":1,"backlogs":[{"topic":"…","subscription":"…","entries":N},…]}
     * </pre>
     */
    static String backlogs(java.util.List<Tracker.Item> items, java.util.List<Long> counts) {
        StringBuilder b = new StringBuilder(32 + items.size() * 96);
        b.append("{\"v\":1,\"backlogs\":[");
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) {
                b.append(',');
            }
            b.append("{\"topic\":");
            string(b, items.get(i).topic());
            b.append(",\"subscription\":");
            string(b, items.get(i).subscription());
            b.append(",\"entries\":").append(counts.get(i)).append('}');
        }
        return b.append("]}").toString();
    }

    static String error(String message) {
        StringBuilder b = new StringBuilder("{\"error\":");
        string(b, message);
        return b.append('}').toString();
    }

    static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20 || c == 0x2028 || c == 0x2029) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }
}
