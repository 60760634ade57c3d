package io.geosidecar.positions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

class TrackerTest {

    private static final Tracker.Scope SCOPE = new Tracker.Scope(Set.of("t/ns"), Set.of("app"));

    private static Tracker.Observation obs(String topic, long ledger, long entry, long... ranges) {
        return new Tracker.Observation("persistent://t/ns/" + topic, "t/ns", "app", ledger, entry, ranges, false);
    }

    @Test
    void firstPollIsFullThenOnlyChanges() {
        Tracker tr = new Tracker("e1", 1000);
        Tracker.Answer a = tr.poll(SCOPE, List.of(obs("a", 1, 5), obs("b", 1, 7)), "", 0, 0);
        assertTrue(a.full());
        assertEquals(2, a.items().size());
        assertEquals(2, a.seq());

        Tracker.Answer same = tr.poll(SCOPE, List.of(obs("a", 1, 5), obs("b", 1, 7)), "e1", a.seq(), 1);
        assertFalse(same.full());
        assertEquals(0, same.items().size());
        assertEquals(a.seq(), same.seq());

        // A rewind is a change like any other: states are compared, not events.
        Tracker.Answer back = tr.poll(SCOPE, List.of(obs("a", 1, 2), obs("b", 1, 7)), "e1", same.seq(), 2);
        assertEquals(1, back.items().size());
        assertEquals(2, back.items().get(0).markDeleteEntry());
        assertEquals(3, back.seq());

        // Only the ranges change.
        Tracker.Answer ranges = tr.poll(SCOPE, List.of(obs("a", 1, 2, 1, 3, 1, 4), obs("b", 1, 7)), "e1", 3, 3);
        assertEquals(1, ranges.items().size());
        assertEquals(4, ranges.items().get(0).ranges().length);
    }

    @Test
    void goneAndTombstonesForgotten() {
        Tracker tr = new Tracker("e1", 1000);
        Tracker.Answer a = tr.poll(SCOPE, List.of(obs("a", 1, 5), obs("b", 1, 7)), "", 0, 0);
        Tracker.Answer g = tr.poll(SCOPE, List.of(obs("a", 1, 5)), "e1", a.seq(), 10);
        assertEquals(1, g.items().size());
        assertTrue(g.items().get(0).gone());
        assertNull(g.items().get(0).ranges());
        // A full answer leaves the gone one out.
        Tracker.Answer f = tr.poll(SCOPE, List.of(obs("a", 1, 5)), "other", 0, 11);
        assertTrue(f.full());
        assertEquals(1, f.items().size());
        // After the tombstone is forgotten, a caller from before it gets a full answer.
        Tracker.Answer late = tr.poll(SCOPE, List.of(obs("a", 1, 5)), "e1", a.seq(), 2000);
        assertTrue(late.full());
        // One from after it does not.
        Tracker.Answer recent = tr.poll(SCOPE, List.of(obs("a", 1, 5)), "e1", late.seq(), 2001);
        assertFalse(recent.full());
    }

    @Test
    void outOfScopeIsNeitherAnsweredNorGone() {
        Tracker tr = new Tracker("e1", 1000);
        tr.poll(SCOPE, List.of(obs("a", 1, 5)), "", 0, 0);
        Tracker.Scope other = new Tracker.Scope(Set.of("t/other"), Set.of("app"));
        Tracker.Answer o = tr.poll(other, List.of(obs("a", 1, 6)), "e1", 1, 1);
        assertEquals(0, o.items().size());
        Tracker.Answer back = tr.poll(SCOPE, List.of(obs("a", 1, 5)), "e1", 1, 2);
        assertEquals(0, back.items().size());
    }

    @Test
    void futureSinceIsFull() {
        Tracker tr = new Tracker("e1", 1000);
        Tracker.Answer a = tr.poll(SCOPE, List.of(obs("a", 1, 5)), "e1", 99, 0);
        assertTrue(a.full());
    }

    @Test
    void jsonEscapesAndShapes() {
        Tracker tr = new Tracker("e\"1", 1000);
        Tracker.Answer a = tr.poll(SCOPE, List.of(obs("q\"\\\n", 3, -1, 3, 0, 3, 2)), "", 0, 0);
        assertEquals("{\"v\":1,\"epoch\":\"e\\\"1\",\"seq\":1,\"full\":true,\"subscriptions\":[{\"topic\":"
                + "\"persistent://t/ns/q\\\"\\\\\\n\",\"subscription\":\"app\",\"seq\":1,\"markDelete\":[3,-1],"
                + "\"acked\":[[3,0,3,2]]}]}", Json.answer(a));
    }

    @Test
    void validation() {
        assertNull(PositionsServlet.validate(Set.of("t/ns"), Set.of("app")));
        assertEquals("namespace must be tenant/namespace", PositionsServlet.validate(Set.of("t"), Set.of("a")));
        assertTrue(PositionsServlet.validate(Set.of(), Set.of("a")).startsWith("between"));
        assertTrue(PositionsServlet.validate(Set.of("t/n"), Set.of()).startsWith("between"));
    }
}
