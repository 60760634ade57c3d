package e2e

import (
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
