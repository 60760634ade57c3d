package io.geosidecar.positions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.BufferedReader;
import java.io.StringReader;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class AcknowledgerTest {

    private static List<Acknowledger.Ack> parse(String body) throws Exception {
        return Acknowledger.parse(new BufferedReader(new StringReader(body)));
    }

    @Test
    void parsesLinesWithEncodedNames() throws Exception {
        List<Acknowledger.Ack> acks = parse("persistent%3A%2F%2Ft%2Fns%2Fa-partition-0 my%20sub 12 -1\n"
                + "persistent://t/ns/b app 3 4\n");
        assertEquals(2, acks.size());
        assertEquals(new Acknowledger.Ack("persistent://t/ns/a-partition-0", "my sub", 12, -1), acks.get(0));
        assertEquals(new Acknowledger.Ack("persistent://t/ns/b", "app", 3, 4), acks.get(1));
    }

    @Test
    void refusesWhatIsNotExactlyTheFormat() {
        String[] bad = {
            "",                                            // nothing
            "persistent://t/ns/a app 1\n",                 // a field short
            "persistent://t/ns/a app 1 2 3\n",             // a field more
            "persistent://t/ns/a app x 2\n",               // not a number
            "persistent://t/ns/a app -1 2\n",              // ledger below 0
            "persistent://t/ns/a app 1 -2\n",              // entry below -1
            "persistent://t/ns/a  1 2\n",                  // empty subscription
            "non-persistent://t/ns/a app 1 2\n",           // not persistent
            "a app 1 2\n",                                 // not a full name
            "persistent://t/ns/a app 1 2\npersistent://t/ns/a app 1 3\n", // twice
        };
        for (String b : bad) {
            assertThrows(IllegalArgumentException.class, () -> parse(b), b);
        }
    }

    @Test
    void refusesMoreThanTheLimit() {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i <= Acknowledger.MAX_ACKS; i++) {
            b.append("persistent://t/ns/a s").append(i).append(" 1 2\n");
        }
        assertThrows(IllegalArgumentException.class, () -> parse(b.toString()));
    }

    @Test
    void aTopicNotLoadedHereIsNotHere() {
        List<Acknowledger.Result> r = Acknowledger.apply(t -> Optional.empty(),
                List.of(new Acknowledger.Ack("persistent://t/ns/a", "app", 1, 2)));
        assertEquals("not-here", r.get(0).outcome());
        assertEquals(null, r.get(0).markDelete());
    }
}
