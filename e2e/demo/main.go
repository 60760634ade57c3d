// Command demo is `make demo`: with the east and west test-bed clusters up,
// it runs geo-sidecar active-active between them, publishes sample traffic
// in both regions, shows it arriving on the other side, prints the status
// table and stops. KEEP=1 leaves the sidecar running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/geo-sidecar/geo-sidecar/e2e"
	"github.com/geo-sidecar/geo-sidecar/marker"
)

var regions = []struct{ name, service, admin string }{
	{"east", "pulsar://127.0.0.1:6650", "http://127.0.0.1:8080"},
	{"west", "pulsar://127.0.0.1:6660", "http://127.0.0.1:8090"},
}

const (
	namespace = "demo/geo"
	// drillTopic is the drill's topic of its own, replicated like orders:
	// nobody else reads it, so its messages reach no application.
	drillTopic = "geo-sidecar-drill"
)

func main() {
	binary := flag.String("binary", "bin/geo-sidecar", "geo-sidecar binary")
	n := flag.Int("messages", 20000, "messages to publish in each region")
	flag.Parse()
	if err := run(*binary, *n, os.Getenv("KEEP") == "1"); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

func run(binary string, n int, keep bool) error {
	step("namespace %s on east and west", namespace)
	for _, r := range regions {
		if err := ensureNamespace(r.admin, r.name); err != nil {
			return err
		}
	}

	dir, err := os.MkdirTemp("", "geo-sidecar-demo")
	if err != nil {
		return err
	}
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return err
	}
	// The same marker key every run (see markerKeyFile): the copies of
	// earlier runs on these clusters verify under it.
	state, err := demoStateDir()
	if err != nil {
		return err
	}
	keyPath, err := markerKeyFile(state)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(cfgPath, []byte(demoConfig(listen, keyPath)), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "sidecar.log")
	topic := "persistent://" + namespace + "/orders"
	clients := map[string]pulsar.Client{}
	for _, r := range regions {
		c, err := pulsar.NewClient(pulsar.ClientOptions{URL: r.service, Logger: pulsarlog.DefaultNopLogger()})
		if err != nil {
			return err
		}
		defer c.Close()
		clients[r.name] = c
	}

	// One reader per region counts what arrives from the other region.
	sub := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	arrived := map[string]*atomic.Int64{"east": {}, "west": {}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range regions {
		cons, err := clients[r.name].Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
		if err != nil {
			return err
		}
		defer cons.Close()
		go countFromOtherRegion(ctx, cons, r.name, arrived[r.name])
	}

	step("starting geo-sidecar active-active east <-> west (config %s, log %s)", cfgPath, logPath)
	fmt.Printf("  marker key %s, kept between runs: the copies earlier runs made verify under it\n", keyPath)
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	sidecar := exec.Command(binary, "run", "--config", cfgPath, "--log-format", "console")
	sidecar.Stdout, sidecar.Stderr = logf, logf
	if err := sidecar.Start(); err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped && !keep {
			_ = sidecar.Process.Kill()
		}
	}()
	if err := waitReady(listen, 60*time.Second); err != nil {
		return err
	}
	fmt.Printf("ready; metrics at http://%s/metrics\n", listen)

	step("publishing %d messages in each region", n)
	start := time.Now()
	for _, r := range regions {
		go publish(clients[r.name], topic, r.name, n)
	}
	for last := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		e, w := arrived["east"].Load(), arrived["west"].Load()
		done := e >= int64(n) && w >= int64(n)
		if done || time.Since(last) >= time.Second {
			fmt.Printf("  %5.1fs  arrived in west from east: %6d/%d   in east from west: %6d/%d\n",
				time.Since(start).Seconds(), w, n, e, n)
			last = time.Now()
		}
		if done {
			break
		}
		if time.Since(start) > 3*time.Minute {
			return errors.New("not everything arrived within 3 minutes")
		}
	}
	took := time.Since(start)
	fmt.Printf("  %d messages replicated (both directions) in %s: %.0f messages/s\n",
		2*n, took.Round(time.Millisecond), float64(2*n)/took.Seconds())

	time.Sleep(time.Second) // let cursor acknowledgements reach the brokers
	step("geo-sidecar status")
	st := exec.Command(binary, "status", "--config", cfgPath)
	st.Stdout, st.Stderr = os.Stdout, os.Stderr
	if err := st.Run(); err != nil {
		return fmt.Errorf("status: %w", err)
	}

	step("failover drill from east to west on %s/%s, on a subscription of its own", namespace, drillTopic)
	dr := exec.Command(binary, "drill", "--config", cfgPath, "--topic", namespace+"/"+drillTopic,
		"--from", "east", "--to", "west", "--messages", "2000")
	dr.Stdout, dr.Stderr = os.Stdout, os.Stderr
	if err := dr.Run(); err != nil {
		return fmt.Errorf("drill: %w", err)
	}

	if keep {
		step("KEEP=1: the sidecar keeps running (pid %d). Stop it with: kill %d; stop the clusters with: make down",
			sidecar.Process.Pid, sidecar.Process.Pid)
		return nil
	}
	step("stopping the sidecar (SIGTERM)")
	_ = sidecar.Process.Signal(syscall.SIGTERM)
	t0 := time.Now()
	if err := sidecar.Wait(); err != nil {
		return fmt.Errorf("sidecar exit: %w (log: %s)", err, logPath)
	}
	stopped = true
	fmt.Printf("stopped cleanly in %s. The clusters keep running: make down stops them.\n", time.Since(t0).Round(time.Millisecond))
	return nil
}

func demoConfig(listen, keyPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\n  discovery_interval: 2s\n  marker_key_file: %s\nclusters:\n", listen, keyPath)
	for _, r := range regions {
		fmt.Fprintf(&b, "  - name: %s\n    service_url: %s\n    admin_url: %s\n", r.name, r.service, r.admin)
	}
	b.WriteString("replication:\n")
	for i, r := range regions {
		other := regions[1-i].name
		fmt.Fprintf(&b, "  - source: %s\n    namespace: %s\n    topics: [orders, %s]\n    targets: [%s]\n    subscription_patterns: [\"geo-sidecar-drill-.*\"]\n",
			r.name, namespace, drillTopic, other)
	}
	return b.String()
}

func ensureNamespace(adminURL, cluster string) error {
	a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: adminURL})
	if err != nil {
		return err
	}
	if err := a.Tenants().Create(utils.TenantData{Name: "demo", AllowedClusters: []string{cluster}}); err != nil && !strings.Contains(err.Error(), "409") && !strings.Contains(strings.ToLower(err.Error()), "exist") {
		return fmt.Errorf("tenant demo on %s: %w", cluster, err)
	}
	if err := a.Namespaces().CreateNamespace(namespace); err != nil && !strings.Contains(err.Error(), "409") && !strings.Contains(strings.ToLower(err.Error()), "exist") {
		return fmt.Errorf("namespace %s on %s: %w", namespace, cluster, err)
	}
	// The drill's topic exists before the sidecar starts, as a topic an
	// operator drills on would: created by the drill itself, it was found
	// by a discovery pass only after its first messages, the topic's first
	// snapshot came after the position the drill consumes to, and no
	// update could move the subscription's copy (1,000 duplicates, "gave
	// up" on a fresh machine).
	tn, err := utils.GetTopicName("persistent://" + namespace + "/" + drillTopic)
	if err != nil {
		return err
	}
	if err := a.Topics().Create(*tn, 0); err != nil && !strings.Contains(err.Error(), "409") && !strings.Contains(strings.ToLower(err.Error()), "exist") {
		return fmt.Errorf("topic %s on %s: %w", drillTopic, cluster, err)
	}
	fmt.Printf("  %s: ok\n", cluster)
	return nil
}

func publish(c pulsar.Client, topic, region string, n int) {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 2000})
	if err != nil {
		fmt.Fprintf(os.Stderr, "producer in %s: %v\n", region, err)
		return
	}
	defer p.Close()
	for i := range n {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{
			Key: fmt.Sprintf("customer-%d", i%50), Payload: []byte(fmt.Sprintf(`{"region":%q,"order":%d}`, region, i)),
		}, func(pulsar.MessageID, *pulsar.ProducerMessage, error) {})
	}
	_ = p.Flush()
}

// countFromOtherRegion counts messages copied in from another region
// (replicated_from);
// local messages and geo-sidecar markers are acked and not counted.
func countFromOtherRegion(ctx context.Context, cons pulsar.Consumer, region string, n *atomic.Int64) {
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return
		}
		_ = cons.Ack(m)
		if marker.Is(m) {
			continue
		}
		// The entry pipe marks copies with Pulsar's replicated_from (its
		// origin properties sit at batch level, out of a consumer's sight).
		if from := m.GetReplicatedFrom(); m.IsReplicated() && from != region {
			n.Add(1)
		}
	}
}

func waitReady(listen string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + listen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("sidecar not ready after %s", timeout)
}
