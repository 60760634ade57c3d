package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// drillReport mirrors geo-sidecar drill --json.
type drillReport struct {
	Published      int     `json:"published"`
	ConsumedBefore int     `json:"consumed_before"`
	ConsumedAfter  int     `json:"consumed_after"`
	Lost           int     `json:"lost"`
	Duplicates     int     `json:"duplicates"`
	InStepSeconds  float64 `json:"in_step_seconds"`
	InStep         bool    `json:"in_step"`
}

// runDrill runs `geo-sidecar drill --json` with the sidecar's config.
func runDrill(t *testing.T, cfg, topic, sub, from, to string, extra ...string) drillReport {
	t.Helper()
	args := append([]string{"drill", "--config", cfg, "--topic", topic, "--subscription", sub,
		"--from", from, "--to", to, "--json"}, extra...)
	cmd := exec.Command(Binary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep drillReport
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("drill: %v (%v)\nstdout: %s\nstderr: %s", err, jerr, out, stderr.String())
	}
	if err != nil && rep.Lost == 0 {
		t.Fatalf("drill: %v\n%s", err, stderr.String())
	}
	if !rep.InStep || rep.Lost > 0 {
		t.Logf("drill progress:\n%s", stderr.String())
	}
	return rep
}

// syncEntries is an active-active configuration keeping sub in step.
func syncEntries(ns, sub string, clusters ...string) string {
	var b strings.Builder
	for _, c := range clusters {
		var targets []string
		for _, o := range clusters {
			if o != c {
				targets = append(targets, o)
			}
		}
		fmt.Fprintf(&b, "  - source: %s\n    namespace: %s\n    %s\n    targets: [%s]\n    subscriptions: [%s]\n",
			c, ns, all, strings.Join(targets, ", "), sub)
	}
	return b.String()
}

func TestFailoverDrill(t *testing.T) {
	for _, typ := range []string{"exclusive", "failover", "shared", "key_shared"} {
		t.Run(typ, func(t *testing.T) {
			ns := NewNamespace(t, "east", "west")
			s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, "orders-sub", "east", "west"))
			rep := runDrill(t, s.ConfigPath, ns+"/orders", "orders-sub", "east", "west",
				"--type", typ, "--messages", "2000")
			t.Logf("drill %s: published %d, before %d, after %d, lost %d, duplicates %d, in step after %.1fs (%v)",
				typ, rep.Published, rep.ConsumedBefore, rep.ConsumedAfter, rep.Lost, rep.Duplicates, rep.InStepSeconds, rep.InStep)
			if rep.Lost != 0 {
				t.Fatalf("%d messages lost in the failover", rep.Lost)
			}
			if !rep.InStep {
				t.Errorf("the subscription never got in step")
			}
		})
	}
}

func TestFailoverDrillPartitioned(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	CreatePartitioned(t, Topic(ns, "orders"), 4, "east", "west")
	s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, "orders-sub", "east", "west"))
	rep := runDrill(t, s.ConfigPath, ns+"/orders", "orders-sub", "east", "west", "--messages", "4000")
	t.Logf("drill 4 partitions: published %d, before %d, after %d, lost %d, duplicates %d, in step after %.1fs",
		rep.Published, rep.ConsumedBefore, rep.ConsumedAfter, rep.Lost, rep.Duplicates, rep.InStepSeconds)
	if rep.Lost != 0 {
		t.Fatalf("%d messages lost", rep.Lost)
	}
}

// TestForgedUpdateHasNoEffect: anyone who can publish to a topic can write a
// message that looks like a marker; without the key it moves nothing.
func TestForgedUpdateHasNoEffect(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "guarded")
	s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, "victim", "east", "west"))
	east, west := Client(t, "east"), Client(t, "west")
	// The victim subscription exists on west, before any message.
	_ = Consume(t, west, topic, "victim", 0, time.Second)
	want := ProduceN(t, east, topic, "m", 100)
	Eventually(t, 30*time.Second, func() error {
		if v := s.Metric("geo_sidecar_replicated_messages_total", `source="east"`); v < 100 {
			return fmt.Errorf("replicated %v of 100", v)
		}
		return nil
	})
	forged, err := marker.Encode(marker.Marker{Kind: marker.KindUpdate, From: "east", To: "west",
		Topic: topic, Subscription: "victim", Remote: marker.Position{Ledger: 1 << 40}}, []byte("not-the-key-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	Produce(t, east, topic,
		&pulsar.ProducerMessage{Payload: forged, Properties: marker.Properties(marker.KindUpdate)},
		&pulsar.ProducerMessage{Payload: []byte("garbage"), Properties: marker.Properties(marker.KindUpdate)})
	Eventually(t, 30*time.Second, func() error {
		if v := s.Metric("geo_sidecar_markers_invalid_total"); v < 2 {
			return fmt.Errorf("invalid markers counted: %v", v)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if got := Payloads(Consume(t, west, topic, "victim", 100, 30*time.Second)); !equal(got, want) {
		t.Fatalf("victim on west delivered %d of %d messages after the forged update", len(got), len(want))
	}
	if v := s.Metric("geo_sidecar_subscription_updates_received_total"); v != 0 {
		t.Fatalf("%v updates received", v)
	}
}

// TestIdleTopicGetsNoMarkers: without traffic, no snapshot requests.
func TestIdleTopicGetsNoMarkers(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "quiet")
	east := Client(t, "east")
	_ = Consume(t, east, topic, "quiet-sub", 0, time.Second) // the topic exists, idle
	s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, "quiet-sub", "east", "west"))
	time.Sleep(6 * time.Second)
	if v := s.Metric("geo_sidecar_markers_written_total"); v != 0 {
		t.Fatalf("%v markers written on an idle topic", v)
	}
	st, err := Admin(t, "east").Topics().GetInternalStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	if st.EntriesAddedCounter != 0 {
		t.Fatalf("idle topic has %d entries", st.EntriesAddedCounter)
	}
}

// fullMesh brings north up beside east and west and starts one sidecar
// replicating a fresh namespace among all three, keeping sub in step.
func fullMesh(t *testing.T, sub string) (string, *Sidecar) {
	t.Helper()
	if err := Up("north"); err != nil {
		t.Fatal(err)
	}
	ns := NewNamespace(t, "east", "west", "north")
	return ns, StartSidecar(t, []string{"east", "west", "north"}, syncEntries(ns, sub, "east", "west", "north"))
}

// TestDrillThreeClustersNorthDown: east, west and north replicate in full
// mesh and keep the subscription in step; north is stopped before the
// drill, and east<->west sync carries on (Pulsar's own replicator stops all
// subscription sync while any cluster is down).
func TestDrillThreeClustersNorthDown(t *testing.T) {
	ns, s := fullMesh(t, "orders-sub")
	topic := Topic(ns, "orders")
	// North-origin traffic reaches both before north goes down.
	ProduceN(t, Client(t, "north"), topic, "north", 200)
	Eventually(t, 30*time.Second, func() error {
		if v := s.Metric("geo_sidecar_replicated_messages_total", `source="north"`); v < 400 {
			return fmt.Errorf("north replicated %v of 400", v)
		}
		return nil
	})
	if err := Down("north"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Up("north") })
	rep := runDrill(t, s.ConfigPath, ns+"/orders", "orders-sub", "east", "west", "--messages", "2000")
	t.Logf("drill with north down: published %d, before %d, after %d, lost %d, duplicates %d, in step after %.1fs (%v)",
		rep.Published, rep.ConsumedBefore, rep.ConsumedAfter, rep.Lost, rep.Duplicates, rep.InStepSeconds, rep.InStep)
	if rep.Lost != 0 {
		t.Fatalf("%d messages lost", rep.Lost)
	}
	if !rep.InStep || rep.Duplicates >= rep.ConsumedBefore {
		t.Fatalf("east<->west subscription sync did not work with north down (in step %v, %d duplicates)", rep.InStep, rep.Duplicates)
	}
}

// TestDrillAfterRestartThirdOriginSilent: three clusters, and north never
// publishes on the topic. After a restart the sidecar's cursors are no
// longer fresh, so it must learn north's watermark (none) from the
// partition's history before it may answer snapshot requests. Before it
// could, east and west never got in step again: every request went
// unanswered until north published.
func TestDrillAfterRestartThirdOriginSilent(t *testing.T) {
	ns, s := fullMesh(t, "orders-sub")
	topic := Topic(ns, "orders")
	ProduceN(t, Client(t, "east"), topic, "east", 50)
	ProduceN(t, Client(t, "west"), topic, "west", 50)
	// Snapshots between east and west complete, so each side has written
	// responses naming north before the restart.
	Eventually(t, 30*time.Second, func() error {
		for _, src := range []string{"east", "west"} {
			if v := s.Metric("geo_sidecar_snapshots_completed_total", `source="`+src+`"`); v < 1 {
				return fmt.Errorf("no snapshot completed from %s yet", src)
			}
		}
		return nil
	})
	s.Stop()
	s = s.Restart()
	rep := runDrill(t, s.ConfigPath, ns+"/orders", "orders-sub", "east", "west", "--messages", "2000")
	t.Logf("drill after a restart, north silent: published %d, before %d, after %d, lost %d, duplicates %d, in step after %.1fs (%v); requests unanswered after the restart: %v",
		rep.Published, rep.ConsumedBefore, rep.ConsumedAfter, rep.Lost, rep.Duplicates, rep.InStepSeconds, rep.InStep,
		s.Metric("geo_sidecar_snapshot_requests_unanswered_total"))
	if rep.Lost != 0 {
		t.Fatalf("%d messages lost", rep.Lost)
	}
	if !rep.InStep || rep.Duplicates >= rep.ConsumedBefore {
		t.Fatalf("east<->west subscription sync did not resume after the restart (in step %v, %d duplicates)", rep.InStep, rep.Duplicates)
	}
}

// TestDrillSidecarRestartedMidway: the sidecar is killed and restarted
// while the drill publishes and consumes.
func TestDrillSidecarRestartedMidway(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, "orders-sub", "east", "west"))
	done := make(chan drillReport, 1)
	go func() {
		done <- runDrill(t, s.ConfigPath, ns+"/orders", "orders-sub", "east", "west",
			"--messages", "4000", "--publish-over", "8s")
	}()
	time.Sleep(4 * time.Second)
	s.Kill()
	time.Sleep(time.Second)
	s.Restart()
	rep := <-done
	t.Logf("drill with a sidecar restart: published %d, before %d, after %d, lost %d, duplicates %d, in step after %.1fs (%v)",
		rep.Published, rep.ConsumedBefore, rep.ConsumedAfter, rep.Lost, rep.Duplicates, rep.InStepSeconds, rep.InStep)
	if rep.Lost != 0 {
		t.Fatalf("%d messages lost", rep.Lost)
	}
}

// TestMarkersOnBusyTopic reports how many markers a steadily busy topic
// gets per minute (for the notes; no assertion on the figure).
func TestMarkersOnBusyTopic(t *testing.T) {
	ns := NewNamespace(t, "east", "west")
	topic := Topic(ns, "busy")
	east := Client(t, "east")
	_ = Consume(t, east, topic, "busy-sub", 0, time.Second)
	s := StartSidecar(t, []string{"east", "west"}, syncEntries(ns, "busy-sub", "east", "west"))
	load := startLoad(t, east, topic, "m", 10000, 500)
	time.Sleep(2 * time.Second)
	start, m0 := time.Now(), s.Metric("geo_sidecar_markers_written_total")
	load.wait(t)
	perMin := (s.Metric("geo_sidecar_markers_written_total") - m0) / time.Since(start).Minutes()
	t.Logf("busy topic (500 msg/s east, both directions replicated): %.0f markers per minute written by the sidecar", perMin)
	if perMin == 0 {
		t.Fatal("no markers on a busy topic")
	}
}
