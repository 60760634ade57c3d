// StaleLocks removes the ephemeral nodes a killed standalone left in its
// RocksDB metadata store, before the standalone starts again.
//
// Why: the in-process bookie registers itself with an ephemeral lock at
// /ledgers/available/<bookie>. After kill -9 the old node is still there;
// the new bookie deletes it, and the Deleted notification then invalidates
// the lock it has just re-acquired. Revalidation compares the stored
// BookieServiceInfo with its own, finds them unequal, deletes and
// re-creates the node, which is another Deleted notification: a loop that
// kept a broker at 180% CPU for minutes and the bookie flapping between
// registered and not ("Not enough non-faulty bookies available" on
// producers). See apache/pulsar#17759. Started on a store without the
// stale node, the lock is never invalidated.
//
// The store itself drops an ephemeral node of an earlier instance when it
// reads it (RocksdbMetadataStore.storeGet / getChildren), so walking the
// tree once from a new instance is the whole cleanup.
//
// Run by cluster.sh as a single-file program: java -cp <pulsar> StaleLocks.java DIR
import java.util.ArrayDeque;
import java.util.Deque;
import org.apache.pulsar.metadata.api.MetadataStoreConfig;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;

public class StaleLocks {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: StaleLocks METADATA_DIR");
            System.exit(2);
        }
        int seen = 0;
        try (MetadataStoreExtended store = MetadataStoreExtended.create("rocksdb://" + args[0],
                MetadataStoreConfig.builder().build())) {
            Deque<String> todo = new ArrayDeque<>();
            todo.push("/");
            while (!todo.isEmpty()) {
                String dir = todo.pop();
                for (String child : store.getChildren(dir).get()) {
                    String path = dir.equals("/") ? "/" + child : dir + "/" + child;
                    seen++;
                    todo.push(path);
                }
            }
        }
        System.out.println(seen + " metadata nodes checked");
    }
}
