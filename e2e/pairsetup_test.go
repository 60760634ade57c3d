package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestTargetNamespaceMissing (issue 21, item 7): a pair east->west for a
// namespace created on east only. Before, run logged "replicating
// partition" and then nothing for a minute, /readyz said ok, and only the
// first message brought a TopicNotFound warning retried for ever. Now
// readiness, a metric, the log and validate --live name the pair and the
// missing namespace, and replication starts once the namespace exists.
func TestTargetNamespaceMissing(t *testing.T) {
	ns := NewNamespace(t, "east")
	topic := Topic(ns, "plain")
	east := Client(t, "east")
	ProduceN(t, east, topic, "before", 5) // the topic exists on east, non-partitioned

	dir := t.TempDir()
	listen := FreeAddr(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(Config(listen, []string{"east", "west"}, entry("east", ns, "topics: [plain]", "west"))), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(Binary, "validate", "--live", "--config", cfg).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 ||
		!strings.Contains(string(out), "live: east->west "+ns+": pair cannot replicate: namespace "+ns+" does not exist on west") {
		t.Fatalf("validate --live: %v\n%s\nwant exit 1 naming the pair and the missing namespace", err, out)
	}

	s := launchSidecar(t, cfg, listen)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	Eventually(t, 60*time.Second, func() error {
		code, body := readyz()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "namespace "+ns+" does not exist on west") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		if v := s.Metric("geo_sidecar_pair_setup_problem", `source="east"`, `target="west"`); v != 1 {
			return fmt.Errorf("pair_setup_problem %v", v)
		}
		return nil
	})
	log, _ := os.ReadFile(s.LogPath)
	if !strings.Contains(string(log), "pair cannot replicate") || strings.Count(string(log), "pair cannot replicate; checking") != 1 {
		t.Errorf("want the problem logged once; log:\n%s", tail(log, 4096))
	}

	// The operator creates the namespace: the pair starts by itself.
	a := Admin(t, "west")
	tenant := strings.Split(ns, "/")[0]
	if err := a.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: []string{"west"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	want := ProduceN(t, east, topic, "after", 5)
	Eventually(t, 60*time.Second, func() error {
		if code, body := readyz(); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		if v := s.Metric("geo_sidecar_pair_setup_problem", `source="east"`, `target="west"`); v != 0 {
			return fmt.Errorf("pair_setup_problem %v", v)
		}
		return nil
	})
	got := Payloads(Consume(t, Client(t, "west"), topic, "check", 10, 60*time.Second))
	if len(got) != 10 || fmt.Sprint(got[5:]) != fmt.Sprint(want) {
		t.Fatalf("west has %v, want the 5 earlier messages then %v", got, want)
	}
}

// TestTargetRefusesForGood (issue 21, item 4): a target namespace that
// requires encryption. Before, it refused the sidecar's producer ("Encryption
// is required", MetadataError), and the session was retried with backoff
// for ever with partitions_stopped at 0, encrypted messages included. Now
// the producer declares that entries may be encrypted, the broker checks
// each entry, and the first plain one stops the partition at that message
// with one error line and the metric (on_refused: stop).
func TestTargetRefusesForGood(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	nsName, err := utils.GetNamespaceName(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := Admin(t, "west").Namespaces().SetEncryptionRequiredStatus(*nsName, true); err != nil {
		t.Fatal(err)
	}
	topic := Topic(ns, "plain")
	keys := rsaKeys(t)
	var sealed []*pulsar.ProducerMessage
	for i := range 5 {
		sealed = append(sealed, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("sealed-%d", i))})
	}
	ProduceWith(t, Client(t, "east"), pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		Encryption: &pulsar.ProducerEncryptionInfo{KeyReader: keys, Keys: []string{"e2e"}}}, sealed...)
	ProduceN(t, Client(t, "east"), topic, "m", 5)
	s := StartSidecar(t, []string{"east", "west"}, entry("east", ns, "topics: [plain]", "west"))
	// The encrypted messages cross; the first plain one stops the partition.
	cons, err := Client(t, "west").Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, Decryption: &pulsar.MessageDecryptionInfo{KeyReader: keys}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("encrypted message %d on west: %v", i, err)
		}
		if got, want := string(m.Payload()), fmt.Sprintf("sealed-%d", i); got != want {
			t.Fatalf("west has %q, want %q", got, want)
		}
	}
	Eventually(t, 60*time.Second, func() error {
		if v := s.Metric("geo_sidecar_partitions_stopped", `reason="rejected-not-allowed"`); v != 1 {
			return fmt.Errorf("partitions_stopped{reason=rejected-not-allowed} = %v", v)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // no retries meanwhile
	if n := countLines(t, s.LogPath, "refuses a message for good"); n != 1 {
		t.Errorf("%d 'refuses a message for good' lines, want 1", n)
	}
	if n := countLines(t, s.LogPath, "partition session failed"); n != 0 {
		t.Errorf("%d 'partition session failed' lines, want none (a refusal is not retried)", n)
	}
}
