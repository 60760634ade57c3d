package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/verify"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// geo-sidecar verify against real clusters (issue 24, part 1): after a
// clean copy by the sidecar it exits 0 with every partition verified
// through the source's last entry; then faults injected from outside the
// replicator, each found exactly, its position named, exit status 1:
//
//   - on the sidecar's copy: a duplicate (a copy's bytes written again by
//     another producer), a divergent payload under a copied, valid-looking
//     origin (pulsar-client-go, the copy's origin properties on another
//     payload), and a forged origin naming an entry the source never had;
//   - on a copy built by the test itself, entry by entry like the entry
//     pipe and signed with the shared marker key, one entry left out and
//     two swapped: missing and out of order.

// runVerify runs geo-sidecar verify --json and returns its exit status
// and report.
func runVerify(t *testing.T, cfg, topic string, args ...string) (int, verify.JSONReport, string) {
	t.Helper()
	cmd := exec.Command(Binary, append([]string{"verify", "--config", cfg, "--topic", topic, "--json"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run verify: %v", err)
	}
	var rep verify.JSONReport
	if code != 2 {
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("verify exited %d with a report that does not parse: %v\n%s\n%s", code, err, out.String(), errb.String())
		}
	}
	return code, rep, errb.String()
}

// lastEntry is the partition's last entry on cluster, as an origin id.
func lastEntry(t *testing.T, c *wire.Client, part string) string {
	t.Helper()
	e, ok, err := c.LastEntry(context.Background(), part)
	if err != nil || !ok {
		t.Fatalf("last entry of %s: ok %v, %v", part, ok, err)
	}
	return marker.Position{Ledger: int64(e.ID.Ledger), Entry: int64(e.ID.Entry), Batch: -1}.String()
}

// rawEntries reads part's first n entries on c.
func readRaw(t *testing.T, c *wire.Client, part string, n int) []wire.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := wire.Subscribe(ctx, c, wire.ConsumerOptions{Topic: part, Subscription: "e2e-raw-" + fmt.Sprint(time.Now().UnixNano()),
		NonDurable: true, InitialPosition: wire.Earliest, Permits: 1000, NoTopicCreation: true})
	if err != nil {
		t.Fatalf("reader on %s: %v", part, err)
	}
	defer r.Close()
	var out []wire.Entry
	for len(out) < n {
		e, err := r.Receive(ctx)
		if err != nil {
			t.Fatalf("read %s: %d of %d entries: %v", part, len(out), n, err)
		}
		out = append(out, wire.Entry{ID: e.ID, Metadata: slices.Clone(e.Metadata), Payload: slices.Clone(e.Payload), NumMessages: e.NumMessages})
		_ = r.Release(e)
	}
	return out
}

// sendRaw writes entries to part on c byte for byte under producer name.
func sendRaw(t *testing.T, c *wire.Client, part, name string, entries ...wire.Entry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := wire.CreateProducer(ctx, c, wire.ProducerOptions{Topic: part, Name: name})
	if err != nil {
		t.Fatalf("producer on %s: %v", part, err)
	}
	defer p.Close()
	errc := make(chan error, len(entries))
	for i, e := range entries {
		out := wire.Outgoing{Metadata: e.Metadata, Payload: e.Payload, NumMessages: max(e.NumMessages, 1), SequenceID: uint64(i)}
		if err := p.Send(ctx, out, func(_ wire.Receipt, err error) { errc <- err }); err != nil {
			t.Fatalf("send to %s: %v", part, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush %s: %v", part, err)
	}
	for range entries {
		if err := <-errc; err != nil {
			t.Fatalf("send to %s: %v", part, err)
		}
	}
}

// forwardLike is the copy of e the entry pipe sends from east to west on
// topic (entrypath's forwardMetadata): replicated_from, then the origin,
// signed with key.
func forwardLike(t *testing.T, e wire.Entry, key []byte, topic string) wire.Entry {
	t.Helper()
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := wire.PatchMetadata(nil, e.Metadata, wire.Patch{ReplicatedFrom: "east", DropTxn: md.HasTxnID})
	if err != nil {
		t.Fatal(err)
	}
	id := marker.Position{Ledger: int64(e.ID.Ledger), Entry: int64(e.ID.Entry), Batch: -1}.String()
	d := marker.OriginDigest(patched, e.Payload)
	out := wire.AppendProperties(patched,
		wire.KeyValue{Key: marker.PropOriginCluster, Value: "east"},
		wire.KeyValue{Key: marker.PropOriginID, Value: id},
		wire.KeyValue{Key: marker.PropOriginSig, Value: marker.OriginSig(key, topic, "east", "west", id, &d)})
	return wire.Entry{Metadata: out, Payload: e.Payload, NumMessages: e.NumMessages}
}

func markerKey(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(MarkerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b, []byte("\n"))
}

// kinds lists a partition's findings as "kind@origin", in order.
func kinds(p verify.JSONPartition) []string {
	var out []string
	for _, f := range p.Findings {
		out = append(out, string(f.Kind)+"@"+f.Origin)
	}
	return out
}

func TestVerify(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	clean, faults, rebuilt := Topic(ns, "clean"), Topic(ns, "faults"), Topic(ns, "rebuilt")
	CreatePartitioned(t, clean, 2, "east", "west")
	east, west := Client(t, "east"), Client(t, "west")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")

	// The sidecar copies clean and faults; verify's config copies the
	// whole namespace, rebuilt too (which the test copies itself).
	side := StartSidecar(t, []string{"east", "west"}, entry("east", ns, "topics: [clean, faults]", "west"))
	cfg := filepath.Join(t.TempDir(), "verify.yaml")
	if err := os.WriteFile(cfg, []byte(Config(FreeAddr(t), []string{"east", "west"}, entry("east", ns, all, "west"))), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	ProduceN(t, east, clean, "c", n)
	ProduceN(t, east, faults, "f", n)
	// Single messages too, so that the faults topic holds entries whose
	// origin properties pulsar-client-go shows.
	produceUnbatched(t, east, faults, "single", 0, 20)

	// Clean: once the copy caught up, exit 0, every partition verified
	// through the source's last entry.
	for _, topic := range []string{clean, faults} {
		var rep verify.JSONReport
		Eventually(t, 90*time.Second, func() error {
			code, r, stderr := runVerify(t, cfg, topic, "--from", "east", "--to", "west")
			rep = r
			if code != 0 {
				return fmt.Errorf("verify exited %d: %s %+v", code, stderr, r)
			}
			for _, p := range r.Partitions {
				if p.NotYetCopied > 0 {
					return fmt.Errorf("%s: %d entries not yet copied", p.Partition, p.NotYetCopied)
				}
			}
			return nil
		})
		for _, p := range rep.Partitions {
			want := lastEntry(t, weast, p.Partition)
			if p.Through == nil || p.Through.Origin != want || p.Present != p.Expected || p.Expected == 0 || p.TargetOnly+p.SourceGone > 0 {
				t.Errorf("%s after a clean copy: %+v, want verified through %s", p.Partition, p, want)
			} else if at := lastEntry(t, wwest, p.Partition); p.Through.Target != at {
				t.Errorf("%s: verified through %s at target %s, want the target's last entry %s", p.Partition, want, p.Through.Target, at)
			}
		}
		// --since: the same verdict over what was published in the last hour.
		if code, r, stderr := runVerify(t, cfg, topic, "--from", "east", "--to", "west", "--since", "1h"); code != 0 ||
			len(r.Partitions) != len(rep.Partitions) || r.Partitions[0].Through == nil ||
			r.Partitions[0].Through.Origin != rep.Partitions[0].Through.Origin {
			t.Errorf("verify --since 1h on %s: exit %d, %+v (%s)", topic, code, r, stderr)
		}
		t.Logf("clean %s: %d messages, %.1f MiB read in %.2fs", topic, rep.Messages, float64(rep.Bytes)/(1<<20), rep.Seconds)
	}
	side.Stop()

	// Faults on the sidecar's copy of faults.
	copies := readRaw(t, wwest, faults, 10)
	sources := readRaw(t, weast, faults, 10)
	originOf := func(e wire.Entry) (id string, props map[string]string) {
		md, err := wire.ParseMetadata(e.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		props = map[string]string{}
		for _, kv := range md.Properties {
			props[kv.Key] = kv.Value
		}
		return props[marker.PropOriginID], props
	}
	dupOrigin, _ := originOf(copies[3])
	sendRaw(t, wwest, faults, "e2e-injector", copies[3]) // the same bytes again, another producer
	divOrigin, props := originOf(copies[5])
	ProduceWith(t, west, pulsar.ProducerOptions{Topic: faults, DisableBatching: true},
		&pulsar.ProducerMessage{Payload: []byte("not what east holds"), Properties: props})
	// The bytes of a copy with one payload byte changed, origin and all.
	flipped := copies[7]
	flipped.Payload = slices.Clone(flipped.Payload)
	flipped.Payload[len(flipped.Payload)/2] ^= 0x20
	flipOrigin, _ := originOf(flipped)
	sendRaw(t, wwest, faults, "e2e-injector", flipped)
	// The bytes of a copy again, under a forged signature: proves nothing.
	var spans [len(marker.OriginKeys)]wire.Span
	if err := wire.LastProperties(copies[1].Metadata, marker.OriginKeys[:], spans[:]); err != nil {
		t.Fatal(err)
	}
	unsigned := copies[1]
	unsigned.Metadata = wire.AppendProperties(slices.Clone(copies[1].Metadata[:spans[2].Start]),
		wire.KeyValue{Key: marker.PropOriginSig, Value: "v2.00112233445566778899aabbccddeeff"})
	unsignedOrigin, _ := originOf(unsigned)
	sendRaw(t, wwest, faults, "e2e-injector", unsigned)
	forged := marker.Position{Ledger: int64(sources[9].ID.Ledger), Entry: int64(sources[9].ID.Entry) + 100_000, Batch: -1}.String()
	ProduceWith(t, west, pulsar.ProducerOptions{Topic: faults, DisableBatching: true},
		&pulsar.ProducerMessage{Payload: []byte("forged"), Properties: map[string]string{
			marker.PropOriginCluster: "east", marker.PropOriginID: forged, marker.PropOriginSig: "v2.00112233445566778899aabbccddeeff"}})

	code, rep, stderr := runVerify(t, cfg, faults, "--from", "east", "--to", "west")
	if code != 1 || len(rep.Partitions) != 1 {
		t.Fatalf("verify on the faults: exit %d, %+v, %s", code, rep, stderr)
	}
	p := rep.Partitions[0]
	want := []string{"duplicated@" + dupOrigin, "divergent@" + divOrigin, "divergent@" + flipOrigin,
		"target-only@" + unsignedOrigin, "target-only@" + forged}
	if got := kinds(p); !slices.Equal(got, want) || p.Duplicated != 1 || p.Divergent != 2 || p.TargetOnly != 2 ||
		p.Missing+p.OutOfOrder != 0 || p.Present != p.Expected || rep.Faults != 3 {
		t.Errorf("faults: findings %v, want %v; %+v", got, want, p)
	}

	// Missing and out of order, on a copy the test builds.
	const m = 40
	produceUnbatched(t, east, rebuilt, "r", 0, m)
	src := readRaw(t, weast, rebuilt, m)
	// Nothing copied yet: behind, not lost; --complete makes it a failure.
	if code, r, stderr := runVerify(t, cfg, rebuilt, "--from", "east", "--to", "west"); code != 0 || r.Partitions[0].NotYetCopied != m || r.Partitions[0].Through != nil {
		t.Errorf("verify before the copy: exit %d, %+v (%s)", code, r, stderr)
	}
	if code, _, stderr := runVerify(t, cfg, rebuilt, "--from", "east", "--to", "west", "--complete"); code != 1 || !strings.Contains(stderr, "40 entries not yet copied") {
		t.Errorf("verify --complete before the copy: exit %d (%s)", code, stderr)
	}
	key := markerKey(t)
	var built []wire.Entry
	for i := range src {
		switch i {
		case 10: // left out
		case 20:
			built = append(built, forwardLike(t, src[21], key, rebuilt), forwardLike(t, src[20], key, rebuilt))
		case 21:
		default:
			built = append(built, forwardLike(t, src[i], key, rebuilt))
		}
	}
	sendRaw(t, wwest, rebuilt, "e2e-rebuilder", built...)
	code, rep, stderr = runVerify(t, cfg, rebuilt, "--from", "east", "--to", "west")
	if code != 1 || len(rep.Partitions) != 1 {
		t.Fatalf("verify on the rebuilt copy: exit %d, %+v, %s", code, rep, stderr)
	}
	p = rep.Partitions[0]
	id := func(e wire.Entry) string {
		return marker.Position{Ledger: int64(e.ID.Ledger), Entry: int64(e.ID.Entry), Batch: -1}.String()
	}
	want = []string{"out-of-order@" + id(src[20]), "missing@" + id(src[10])}
	if got := kinds(p); !slices.Equal(got, want) || p.Missing != 1 || p.OutOfOrder != 1 || p.Duplicated+p.Divergent+p.TargetOnly != 0 ||
		p.Present != m-1 || p.Through == nil || p.Through.Origin != id(src[9]) {
		t.Errorf("rebuilt: findings %v, want %v; %+v", got, want, p)
	}

	// Could not verify: a target the config does not copy to.
	if code, _, stderr := runVerify(t, cfg, rebuilt, "--from", "east", "--to", "north"); code != 2 || !strings.Contains(stderr, `"north"`) {
		t.Errorf("verify to a cluster not in the config: exit %d, want 2 naming it (%s)", code, stderr)
	}
}

// TestVerifyOlderKey (issue 34 item 9): copies signed under a marker key
// the config no longer has (a second make demo with a new key, a key
// changed without a rotation) hold the source's bytes; verify reports
// them as present but unproven, its own finding that fails it (exit 1),
// with the ids of the keys it tried and never a key, not as missing and
// target-only. With the older key accepted (a rotation), they verify.
func TestVerifyOlderKey(t *testing.T) {
	UseClusters(t, "east", "west")
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "rekeyed")
	east := Client(t, "east")
	weast, wwest := wireClient(t, "east"), wireClient(t, "west")
	dir := t.TempDir()
	key, older := markerKey(t), []byte("e2e-older-marker-key-0123456789abcdef")
	olderFile := filepath.Join(dir, "older.key")
	if err := os.WriteFile(olderFile, append(slices.Clone(older), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	base := Config(FreeAddr(t), []string{"east", "west"}, entry("east", ns, all, "west"))
	cfg, rotating := filepath.Join(dir, "verify.yaml"), filepath.Join(dir, "rotating.yaml")
	if err := os.WriteFile(cfg, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	withOlder := strings.Replace(base, "  marker_key_file: "+MarkerKeyFile+"\n",
		"  marker_key_file: "+MarkerKeyFile+"\n  marker_key_accepted_file: "+olderFile+"\n", 1)
	if withOlder == base {
		t.Fatal("no marker_key_file line in the test config")
	}
	if err := os.WriteFile(rotating, []byte(withOlder), 0o600); err != nil {
		t.Fatal(err)
	}

	// The first 20 copied under the older key, the next 20 under the
	// current one, as the entry pipe copies them.
	const m, old = 40, 20
	produceUnbatched(t, east, topic, "k", 0, m)
	src := readRaw(t, weast, topic, m)
	var built []wire.Entry
	for i := range src {
		k := key
		if i < old {
			k = older
		}
		built = append(built, forwardLike(t, src[i], k, topic))
	}
	sendRaw(t, wwest, topic, "e2e-rebuilder", built...)
	id := func(e wire.Entry) string {
		return marker.Position{Ledger: int64(e.ID.Ledger), Entry: int64(e.ID.Entry), Batch: -1}.String()
	}

	code, rep, stderr := runVerify(t, cfg, topic, "--from", "east", "--to", "west")
	if code != 1 || len(rep.Partitions) != 1 {
		t.Fatalf("verify: exit %d, %+v, %s", code, rep, stderr)
	}
	p := rep.Partitions[0]
	var want []string
	for i := range 10 { // the first 10 of a kind are named
		want = append(want, "present-unproven@"+id(src[i]))
	}
	if got := kinds(p); !slices.Equal(got, want) || p.PresentUnproven != old || p.Present != m-old ||
		p.Missing+p.TargetOnly+p.Duplicated+p.Divergent+p.OutOfOrder+p.NotYetCopied != 0 ||
		p.NotHeld != nil || p.Through != nil || rep.Faults != old {
		t.Errorf("copies under an older key: findings %v, want %v; %+v", got, want, p)
	}
	if !slices.Equal(rep.Keys, []string{verify.KeyID(key)}) {
		t.Errorf("keys tried %v, want the current key's id %s", rep.Keys, verify.KeyID(key))
	}
	for _, f := range p.Findings {
		if !strings.Contains(f.Detail, "none of the keys tried") {
			t.Errorf("finding %+v: the detail does not say the keys tried failed", f)
		}
	}

	// The text report: the ids tried, the count, and no key.
	out, err := exec.Command(Binary, "verify", "--config", cfg, "--topic", topic, "--from", "east", "--to", "west").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("verify (text): %v, want exit 1\n%s", err, out)
	}
	for _, s := range []string{"marker keys tried    current " + verify.KeyID(key), "present but unproven 20", "of which 20 present but unproven"} {
		if !bytes.Contains(out, []byte(s)) {
			t.Errorf("verify (text) does not say %q:\n%s", s, out)
		}
	}
	if bytes.Contains(out, key) || bytes.Contains(out, older) {
		t.Errorf("verify (text) prints a key:\n%s", out)
	}

	// The older key accepted: every copy proven.
	code, rep, stderr = runVerify(t, rotating, topic, "--from", "east", "--to", "west")
	if code != 0 || len(rep.Partitions) != 1 || rep.Partitions[0].Present != m || rep.Partitions[0].PresentUnproven != 0 ||
		rep.Partitions[0].Through == nil || rep.Partitions[0].Through.Origin != id(src[m-1]) ||
		!slices.Equal(rep.Keys, []string{verify.KeyID(key), verify.KeyID(older)}) {
		t.Errorf("verify with the older key accepted: exit %d, %+v (%s)", code, rep, stderr)
	}
}
