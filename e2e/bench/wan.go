package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"

	"github.com/geo-sidecar/geo-sidecar/e2e"
	"github.com/geo-sidecar/geo-sidecar/e2e/wan"
)

// ---- between regions (issue 13) --------------------------------------------
//
// Every other workload copies over loopback, where a round trip costs
// microseconds; a replicator whose pipelining is bounded by what it keeps
// in flight loses its throughput only over a real round trip. The WAN rows
// copy east->far through the test bed's WAN proxy (e2e/wan), which adds a
// round trip and, for one row, a bandwidth limit. Both arms cross the same
// links: the sidecar is given far's proxied addresses, and cluster.sh geo
// registers far in east's cluster metadata with the same addresses, so
// Pulsar's replicator (its lookups included) goes through the proxy too.
// Each arm's link bytes are checked, so an arm that bypassed the proxy
// fails the row instead of reporting a loopback figure.

// The WAN rows' link settings. A round trip of rtt is rtt/2 each way.
var (
	wanRTTs = []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond}
	// The bandwidth row: 10 MB/s each way, on a 50 ms round trip.
	wanBandwidth int64 = 10_000_000
	wanBWRTT           = 50 * time.Millisecond
	// The latency row's round trip.
	wanLatRTT = 50 * time.Millisecond
)

// Namespaces of the WAN tenant (see env.wanTenant).
const (
	nsWANBuiltin = "builtin" // Pulsar geo-replication east<->far, through the proxy
	nsWANSidecar = "sidecar" // local-only; geo-sidecar copies east->far through the proxy
)

// wanRound is one arm of one round of a WAN throughput or bandwidth row.
type wanRound struct {
	Arm       string
	Round     int
	RTT       time.Duration
	Bandwidth int64 // bytes per second each way; 0: unlimited
	Msgs      int
	Dur       time.Duration // first send to the last message taken by far
	Payload   int64         // uncompressed message bytes (bandwidth row)
	Stored    int64         // bytes stored on east (bytesInCounter delta)
	Into      int64         // bytes far took in
	LinkUp    int64         // bytes the proxy delivered towards far
	LinkDown  int64         // and back
	CPU       time.Duration // the sidecar's (sidecar arm)
}

func (w wanRound) rate() float64 { return float64(w.Msgs) / w.Dur.Seconds() }

// linkPerStored is bytes on the link (both directions) per byte stored on
// east.
func (w wanRound) linkPerStored() float64 {
	if w.Stored == 0 {
		return 0
	}
	return float64(w.LinkUp+w.LinkDown) / float64(w.Stored)
}

type wanLatRound struct {
	latRound
	RTT time.Duration
}

type wanResult struct {
	Messages, ZstdMessages int
	TP                     []wanRound
	BW                     []wanRound
	Lat                    []wanLatRound
	LatRate                int
	Sidecar                sidecarRun
	// Settings names the sidecar's tuning for the run (environment
	// overrides of the defaults), for the report.
	Settings string
	// Versus names the -versus binary (BENCH_VERSUS_LABEL, else its path)
	// when it ran as an extra throughput arm.
	Versus string
}

// tpRate is the median msg/s of arm's throughput rounds at rtt.
func (w *wanResult) tpRate(arm string, rtt time.Duration) float64 {
	var xs []float64
	for _, r := range w.TP {
		if r.Arm == arm && r.RTT == rtt {
			xs = append(xs, r.rate())
		}
	}
	return median(xs)
}

func (w *wanResult) bw(arm string, f func(wanRound) float64) float64 {
	var xs []float64
	for _, r := range w.BW {
		if r.Arm == arm {
			xs = append(xs, f(r))
		}
	}
	return median(xs)
}

func (w *wanResult) lat(arm string, f func(latRound) time.Duration) float64 {
	var xs []float64
	for _, r := range w.Lat {
		if r.Arm == arm {
			xs = append(xs, float64(f(r.latRound))/1e6)
		}
	}
	return median(xs)
}

// wanBed is the WAN rows' far side: the proxy's links and far's addresses
// through them (far's direct clients are env.far and env.farAdm).
type wanBed struct {
	tenant string
	links  wan.Links
	svc    string // far's binary protocol through the proxy
	adm    string // far's admin API through the proxy
}

func (e *env) wanNS(ns string) string { return e.wanTenant() + "/" + ns }

// wanTenant is a tenant of its own: cluster.sh geo sets a tenant's allowed
// clusters to the pair it wires, and east<->west is wired in e.tenant.
func (e *env) wanTenant() string { return e.tenant + "wan" }

func (e *env) wanTopic(ns, short string) string { return "persistent://" + e.wanNS(ns) + "/" + short }

// wanOpen starts far (unless up), the proxy's links on the addresses far
// advertises to clients that come through it (cluster.sh env far), and
// the WAN tenant's namespaces.
func (e *env) wanOpen() (*wanBed, error) {
	if err := e2e.Up("far"); err != nil {
		return nil, err
	}
	out, err := exec.Command(e2e.ScriptPath(), "env", "far").Output()
	if err != nil {
		return nil, fmt.Errorf("cluster.sh env far: %w", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	b := &wanBed{tenant: e.wanTenant(), svc: env["FAR_WAN_SERVICE_URL"], adm: env["FAR_WAN_ADMIN_URL"]}
	bind := env["FAR_WAN_UPSTREAM"]
	if b.svc == "" || b.adm == "" || bind == "" {
		return nil, fmt.Errorf("cluster.sh env far names no WAN addresses:\n%s", out)
	}
	direct := e2e.Get("far")
	broker, err := wan.Listen("far-broker", strings.TrimPrefix(b.svc, "pulsar://"), bind)
	if err != nil {
		return nil, err
	}
	web, err := wan.Listen("far-web", strings.TrimPrefix(b.adm, "http://"), strings.TrimPrefix(direct.AdminURL, "http://"))
	if err != nil {
		broker.Close()
		return nil, err
	}
	b.links = wan.Links{broker, web}
	if e.far == nil {
		if e.far, err = pulsar.NewClient(pulsar.ClientOptions{
			URL: direct.ServiceURL, OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second,
			Logger: pulsarlog.DefaultNopLogger(),
		}); err != nil {
			b.links.Close()
			return nil, fmt.Errorf("client for far: %w", err)
		}
		if e.farAdm, err = pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: direct.AdminURL}); err != nil {
			b.links.Close()
			return nil, fmt.Errorf("admin for far: %w", err)
		}
	}
	if pid, ok := clusterPID("far"); ok {
		e.meter.pids["far"] = pid
	}
	e.logf("tenant %s: namespaces %s (Pulsar geo-replication east<->far, far registered on east through the proxy), %s", b.tenant, nsWANBuiltin, nsWANSidecar)
	if err := e2e.Script("geo", "east", "far", e.wanNS(nsWANBuiltin)); err != nil {
		b.close(e)
		return nil, err
	}
	for _, c := range []string{"east", "far"} {
		if err := e.admin(c).Namespaces().CreateNamespace(e.wanNS(nsWANSidecar)); err != nil && !isConflict(err) {
			b.close(e)
			return nil, fmt.Errorf("create namespace %s on %s: %w", e.wanNS(nsWANSidecar), c, err)
		}
	}
	return b, nil
}

// close deletes the WAN tenant (unless -keep), while the links still
// carry Pulsar's replicator, then closes the links.
func (b *wanBed) close(e *env) {
	defer b.links.Close()
	delete(e.meter.pids, "far")
	if e.o.Keep {
		return
	}
	for _, c := range []string{"east", "far"} {
		_ = e.admin(c).Namespaces().SetNamespaceReplicationClusters(e.wanNS(nsWANBuiltin), []string{c})
	}
	var failed []string
	for _, c := range []string{"east", "far"} {
		for _, ns := range []string{nsWANBuiltin, nsWANSidecar} {
			failed = append(failed, e.dropNamespaceTopics(c, e.wanNS(ns))...)
			if err := e.admin(c).Namespaces().DeleteNamespace(e.wanNS(ns)); err != nil && !isNotFound(err) {
				failed = append(failed, fmt.Sprintf("namespace %s on %s: %v", e.wanNS(ns), c, err))
			}
		}
		if err := e.admin(c).Tenants().Delete(b.tenant); err != nil && !isNotFound(err) {
			failed = append(failed, fmt.Sprintf("tenant %s on %s: %v", b.tenant, c, err))
		}
	}
	if len(failed) > 0 {
		e.logf("wan: cleanup left %d thing(s) behind: %s", len(failed), strings.Join(failed, "; "))
	}
}

// set puts rtt (half each way, no jitter) and bandwidth on both links.
func (b *wanBed) set(rtt time.Duration, bandwidth int64) {
	b.links.SetLatency(rtt/2, 0)
	b.links.SetBandwidth(bandwidth)
}

// wanSidecarConfig is the YAML of a sidecar copying topics of namespace ns
// from east to far, far at its proxied addresses; maxPending, unless
// empty, is far's max_pending_messages.
func wanSidecarConfig(listen, ns, svc, adm, maxPending string, topics ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sidecar:\n  listen: %s\nclusters:\n", listen)
	east := e2e.Get("east")
	fmt.Fprintf(&b, "  - name: east\n    service_url: %s\n    admin_url: %s\n", east.ServiceURL, east.AdminURL)
	fmt.Fprintf(&b, "  - name: far\n    service_url: %s\n    admin_url: %s\n", svc, adm)
	if maxPending != "" {
		fmt.Fprintf(&b, "    max_pending_messages: %s\n", maxPending)
	}
	quoted := make([]string, len(topics))
	for i, t := range topics {
		quoted[i] = strconv.Quote(t)
	}
	fmt.Fprintf(&b, "replication:\n  - source: east\n    namespace: %s\n    topics: [%s]\n    targets: [far]\n    start: earliest\n",
		ns, strings.Join(quoted, ", "))
	return b.String()
}

// wanRows measures, in one run and on the same links, both replicators
// copying east->far: throughput at each of wanRTTs, throughput and link
// bytes on a compressible (ZSTD) topic with the link limited to
// wanBandwidth, and end-to-end latency at wanLatRTT.
func (e *env) wanRows() (*wanResult, error) {
	b, err := e.wanOpen()
	if err != nil {
		return nil, err
	}
	defer b.close(e)
	// The throughput workload's size; the bandwidth row twice the ZSTD
	// workload's, so that it lasts a few seconds at 10 MB/s.
	n, zn := e.o.Sizes.TPMessages, 2*e.o.Sizes.ZstdMessages
	res := &wanResult{Messages: n, ZstdMessages: zn, LatRate: e.o.Sizes.LatRate}
	if v := os.Getenv("BENCH_MAX_PENDING"); v != "" {
		res.Settings = "max_pending_messages " + v
	}
	if os.Getenv("BENCH_WAN_UNBATCHED") != "" {
		res.Settings = strings.TrimPrefix(res.Settings+"; throughput rows unbatched (BENCH_WAN_UNBATCHED)", "; ")
	}
	topics, err := e.wanTopics()
	if err != nil {
		return nil, err
	}
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	sc, err := e.startSidecar(e.o.Binary, "wan", listen, wanSidecarConfig(listen, e.wanNS(nsWANSidecar), b.svc, b.adm, os.Getenv("BENCH_MAX_PENDING"), "tp", "zs", "lat"))
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	if err := sc.waitReady(60 * time.Second); err != nil {
		return nil, err
	}
	tpArms := []string{armBuiltin, armSidecar}
	scs := map[string]*sidecar{armBuiltin: sc, armSidecar: sc}
	if e.o.Versus != "" {
		scb, err := e.wanVersus(b, topics)
		if scb != nil {
			defer scb.stop()
		}
		if err != nil {
			return nil, err
		}
		scs[armVersus] = scb
		tpArms = append(tpArms, armVersus)
		res.Versus = cmp.Or(os.Getenv("BENCH_VERSUS_LABEL"), e.o.Versus)
	}
	if err := e.wanWarm(b, scs, tpArms, topics); err != nil {
		return nil, err
	}
	rows := wanRowsWanted()
	for r := range e.o.Sizes.Rounds {
		if rows["tp"] {
			if err := e.wanTPRound(b, scs, tpArms, topics, r, res); err != nil {
				return nil, err
			}
		}
		if err := e.wanBWRound(b, sc, topics, r, rows["bw"], res); err != nil {
			return nil, err
		}
	}
	b.set(wanLatRTT, 0)
	if rows["lat"] {
		if res.Lat, err = e.wanLatency(sc, topics); err != nil {
			return nil, err
		}
	}
	for _, r := range append(slices.Clone(res.TP), res.BW...) {
		if r.Arm == armSidecar {
			res.Sidecar.CPU += r.CPU
			res.Sidecar.Messages += r.Msgs
		}
	}
	run := e.finish(sc, "wan")
	run.CPU, run.Messages = res.Sidecar.CPU, res.Sidecar.Messages
	res.Sidecar = run
	return res, nil
}

// wanTopics creates each arm's topics of the WAN rows on east and far:
// tp (throughput), zs (ZSTD over the limited link) and lat (latency).
func (e *env) wanTopics() (map[string]map[string]string, error) {
	topics := map[string]map[string]string{}
	for arm, ns := range map[string]string{armBuiltin: nsWANBuiltin, armSidecar: nsWANSidecar} {
		topics[arm] = map[string]string{}
		for _, short := range []string{"tp", "zs", "lat"} {
			t := e.wanTopic(ns, short)
			topics[arm][short] = t
			if err := e.createTopic(t, 1, "east", "far"); err != nil {
				return nil, err
			}
		}
	}
	return topics, nil
}

// wanVersus starts -versus: a second binary on a topic of its own,
// throughput rows only (an A/B test of a tuning change on the same
// link). A sidecar it returns is the caller's to stop, also with an error.
func (e *env) wanVersus(b *wanBed, topics map[string]map[string]string) (*sidecar, error) {
	topics[armVersus] = map[string]string{"tp": e.wanTopic(nsWANSidecar, "tpb")}
	if err := e.createTopic(topics[armVersus]["tp"], 1, "east", "far"); err != nil {
		return nil, err
	}
	listen, err := e2e.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	scb, err := e.startSidecar(e.o.Versus, "wan-b", listen, wanSidecarConfig(listen, e.wanNS(nsWANSidecar), b.svc, b.adm, os.Getenv("BENCH_VERSUS_MAX_PENDING"), "tpb"))
	if err != nil {
		return nil, err
	}
	return scb, scb.waitReady(60 * time.Second)
}

// wanWarm warms up on the plain link: connections, both replicators'
// producers on far, JIT-compiled broker paths.
func (e *env) wanWarm(b *wanBed, scs map[string]*sidecar, tpArms []string, topics map[string]map[string]string) error {
	b.set(0, 0)
	for _, arm := range tpArms {
		for short, t := range topics[arm] {
			if short == "lat" {
				continue
			}
			if _, err := e.wanCopy(b, scs[arm], arm, t, e.o.Sizes.WarmMessages, short == "zs", 0, 0, -1); err != nil {
				return fmt.Errorf("warm-up %s %s: %w", arm, short, err)
			}
		}
	}
	return nil
}

// wanTPRound is round r of the throughput rows: every arm at each of
// wanRTTs.
func (e *env) wanTPRound(b *wanBed, scs map[string]*sidecar, tpArms []string, topics map[string]map[string]string, r int, res *wanResult) error {
	n := res.Messages
	for _, rtt := range wanRTTs {
		b.set(rtt, 0)
		for _, arm := range order(r, tpArms...) {
			var wr wanRound
			err := e.attempt(fmt.Sprintf("wan %s rtt %s", arm, rtt), func() (err error) {
				wr, err = e.wanCopy(b, scs[arm], arm, topics[arm]["tp"], n, false, rtt, 0, r)
				return err
			})
			if err != nil {
				return fmt.Errorf("wan throughput %s at %s: %w", arm, rtt, err)
			}
			res.TP = append(res.TP, wr)
			e.logf("wan round %d rtt %3d ms %-8s %7.0f msg/s (%d messages in %s; link %.1f MB up)", r+1, rtt.Milliseconds(), arm,
				wr.rate(), n, wr.Dur.Round(time.Millisecond), float64(wr.LinkUp)/1e6)
		}
	}
	return nil
}

// wanBWRound is round r of the bandwidth row: the link set to
// wanBandwidth at wanBWRTT (also when the row is not wanted, as the
// latency row has always followed it), then, if wanted, both arms.
func (e *env) wanBWRound(b *wanBed, sc *sidecar, topics map[string]map[string]string, r int, wanted bool, res *wanResult) error {
	b.set(wanBWRTT, wanBandwidth)
	if !wanted {
		return nil
	}
	for _, arm := range order(r, armBuiltin, armSidecar) {
		var wr wanRound
		err := e.attempt(fmt.Sprintf("wan %s 10 MB/s", arm), func() (err error) {
			wr, err = e.wanCopy(b, sc, arm, topics[arm]["zs"], res.ZstdMessages, true, wanBWRTT, wanBandwidth, r)
			return err
		})
		if err != nil {
			return fmt.Errorf("wan bandwidth %s: %w", arm, err)
		}
		res.BW = append(res.BW, wr)
		e.logf("wan round %d %.0f MB/s link %-8s %.1f MB/s of payload, %.1f MB/s stored; %.3f link bytes per stored byte (%s)", r+1,
			float64(wanBandwidth)/1e6, arm, float64(wr.Payload)/1e6/wr.Dur.Seconds(), float64(wr.Stored)/1e6/wr.Dur.Seconds(),
			wr.linkPerStored(), wr.Dur.Round(time.Millisecond))
	}
	return nil
}

// wanRowsWanted is BENCH_WAN_ROWS (a comma-separated subset of tp, bw,
// lat; default all): while tuning, the rows that matter run alone.
func wanRowsWanted() map[string]bool {
	v := os.Getenv("BENCH_WAN_ROWS")
	if v == "" {
		v = "tp,bw,lat"
	}
	m := map[string]bool{}
	for _, r := range strings.Split(v, ",") {
		m[strings.TrimSpace(r)] = true
	}
	return m
}

// wanCopy publishes n messages on east's topic (1 KiB, or compressible
// with ZSTD) and times them until far's broker has taken them all. round
// -1 is a warm-up: nothing is checked.
func (e *env) wanCopy(b *wanBed, sc *sidecar, arm, topic string, n int, zstd bool, rtt time.Duration, bandwidth int64, round int) (wanRound, error) {
	wr := wanRound{Arm: arm, Round: round, RTT: rtt, Bandwidth: bandwidth, Msgs: n}
	time.Sleep(e.o.Sizes.Settle)
	bg := context.Background()
	east0, err := e.counters(bg, "east", topic)
	if err != nil {
		return wr, err
	}
	far0, err := e.counters(bg, "far", topic)
	if err != nil {
		return wr, err
	}
	l0 := b.links.Stats()
	u0, _ := sc.usage()
	// A round may take a while at 150 ms; a replicator that stalls fails
	// it after this long.
	timeout := max(3*time.Minute, time.Duration(n/200)*time.Second)
	ctx, cancel := context.WithTimeout(bg, timeout)
	defer cancel()
	t0 := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		switch {
		case zstd:
			pubErr <- e.produceWith(ctx, "east", zstdProducer(topic), n, compressible)
		case os.Getenv("BENCH_WAN_UNBATCHED") != "":
			// One message per entry: the producer's pending limit
			// (max_pending_messages entries) binds before the cursor's
			// window in bytes.
			opts := batching(topic)
			opts.DisableBatching = true
			body := payload(time.Now(), 0)
			pubErr <- e.produceWith(ctx, "east", opts, n, func(int) []byte { return body })
		default:
			pubErr <- e.produce(ctx, "east", topic, n)
		}
	}()
	_, done, werr := e.waitReceived("far", topic, far0.Msgs, far0.Msgs+int64(n), timeout)
	if werr != nil {
		cancel()
	}
	if perr := <-pubErr; perr != nil {
		return wr, fmt.Errorf("publish: %w", perr)
	}
	if werr != nil {
		return wr, werr
	}
	wr.Dur = done.Sub(t0)
	l1 := b.links.Stats()
	u1, _ := sc.usage()
	east1, err := e.counters(bg, "east", topic)
	if err != nil {
		return wr, err
	}
	far1, err := e.counters(bg, "far", topic)
	if err != nil {
		return wr, err
	}
	if e.restarted() {
		return wr, errRestarted
	}
	wr.Stored, wr.Into = east1.Bytes-east0.Bytes, far1.Bytes-far0.Bytes
	wr.LinkUp, wr.LinkDown = l1.Up-l0.Up, l1.Down-l0.Down
	if arm != armBuiltin {
		wr.CPU = u1.CPU - u0.CPU
	}
	if zstd {
		for i := range n {
			wr.Payload += int64(len(compressible(i)))
		}
	}
	// Both arms must have crossed the proxy: far's intake came over the
	// link, or the arm bypassed it and the figure is loopback's.
	if round >= 0 && wr.LinkUp < wr.Into*9/10 {
		return wr, fmt.Errorf("%s: only %d bytes crossed the WAN proxy towards far for %d bytes far took in: the replicator bypassed the proxy", arm, wr.LinkUp, wr.Into)
	}
	return wr, nil
}

// wanLatency is the latency workload on the WAN: a non-batching producer
// on east at LatRate, a consumer on far (local to far, not through the
// proxy) taking each message's delay.
func (e *env) wanLatency(sc *sidecar, topics map[string]map[string]string) ([]wanLatRound, error) {
	rate, d := e.o.Sizes.LatRate, e.o.Sizes.LatDuration
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	col := map[string]*collector{}
	for _, arm := range []string{armBuiltin, armSidecar} {
		cons, err := e.far.Subscribe(pulsar.ConsumerOptions{
			Topic: topics[arm]["lat"], SubscriptionName: "bench-latency", Type: pulsar.Exclusive,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest,
		})
		if err != nil {
			return nil, fmt.Errorf("consumer on far %s: %w", topics[arm]["lat"], err)
		}
		c := &collector{}
		col[arm] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cons.Close()
			c.run(ctx, cons)
		}()
	}
	tag := uint64(time.Now().UnixNano())
	for _, arm := range []string{armBuiltin, armSidecar} {
		tag++
		if _, _, err := e.paced("east", topics[arm]["lat"], col[arm], tag, rate, e.o.Sizes.LatWarm); err != nil {
			return nil, fmt.Errorf("wan latency warm-up %s: %w", arm, err)
		}
	}
	var out []wanLatRound
	for r := range e.o.Sizes.Rounds {
		for _, arm := range order(r, armBuiltin, armSidecar) {
			var sent int
			var samples []time.Duration
			err := e.attempt("wan latency "+arm, func() error {
				time.Sleep(e.o.Sizes.Settle)
				tag++
				var err error
				sent, samples, err = e.paced("east", topics[arm]["lat"], col[arm], tag, rate, d)
				if err == nil && e.restarted() {
					err = errRestarted
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("wan latency %s: %w", arm, err)
			}
			lr := wanLatRound{latRound: latRound{Arm: arm, Round: r, Sent: sent, Got: len(samples)}, RTT: wanLatRTT}
			if len(samples) > 0 {
				slices.Sort(samples)
				lr.P50, lr.P99, lr.Max = quantile(samples, 0.50), quantile(samples, 0.99), samples[len(samples)-1]
			}
			out = append(out, lr)
			e.logf("wan latency round %d rtt %d ms %-8s p50 %s p99 %s max %s (%d/%d received)", r+1, wanLatRTT.Milliseconds(), arm,
				ms(lr.P50), ms(lr.P99), ms(lr.Max), lr.Got, lr.Sent)
		}
	}
	return out, nil
}

// The WAN rows are the workload "wan" (-only wan): they need far, which
// the other workloads do not.
func init() { workloads = append(workloads, "wan") }

// ---- report ----------------------------------------------------------------

// Markers of the WAN section, in the benchmark page and in RESULTS.md: the WAN
// rows run on their own (-only wan) and replace only their section.
const (
	wanBegin = "<!-- bench-wan:begin (generated by make bench; edits are overwritten) -->"
	wanEnd   = "<!-- bench-wan:end -->"
)

// summary is the WAN table, for the benchmark page and RESULTS.md.
func (w *wanResult) summary(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Between regions, run %s on %s; Pulsar %s; east → far through the WAN proxy (e2e/wan; both replicators on the same links, lookups included), 1 partition, %d round(s), built-in and sidecar alternating, medians shown.",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Machine, r.Pulsar, r.Sizes.Rounds)
	if w.Settings != "" {
		fmt.Fprintf(&b, " Sidecar settings: %s.", w.Settings)
	}
	b.WriteString("\n\n| workload | metric | built-in | sidecar | sidecar / built-in | target |\n|---|---|---:|---:|---:|---|\n")
	tp0 := map[string]float64{armBuiltin: w.tpRate(armBuiltin, 0), armSidecar: w.tpRate(armSidecar, 0)}
	for _, rtt := range wanRTTs {
		bi, sc := w.tpRate(armBuiltin, rtt), w.tpRate(armSidecar, rtt)
		wl := fmt.Sprintf("throughput, %d ms RTT", rtt.Milliseconds())
		fmt.Fprintf(&b, "| %s | msg/s | %s | %s | %s | |\n", wl, num(bi), num(sc), ratio(sc, bi))
		fmt.Fprintf(&b, "| %s | MB/s | %.1f | %.1f | %s | |\n", wl, bi*msgSize/1e6, sc*msgSize/1e6, ratio(sc, bi))
		if rtt > 0 {
			target := ""
			if rtt == wanRTTs[len(wanRTTs)-1] {
				target = "sidecar ≥ 0.80"
			}
			fmt.Fprintf(&b, "| %s | share of the arm's 0 ms figure | %.2f | %.2f | | %s |\n", wl, frac(bi, tp0[armBuiltin]), frac(sc, tp0[armSidecar]), target)
		}
	}
	wl := fmt.Sprintf("ZSTD topic, link %.0f MB/s, %d ms RTT", float64(wanBandwidth)/1e6, wanBWRTT.Milliseconds())
	pay := func(x wanRound) float64 { return float64(x.Payload) / 1e6 / x.Dur.Seconds() }
	sto := func(x wanRound) float64 { return float64(x.Stored) / 1e6 / x.Dur.Seconds() }
	bi, sc := w.bw(armBuiltin, pay), w.bw(armSidecar, pay)
	fmt.Fprintf(&b, "| %s | payload MB/s | %.1f | %.1f | %s | |\n", wl, bi, sc, ratio(sc, bi))
	bi, sc = w.bw(armBuiltin, sto), w.bw(armSidecar, sto)
	fmt.Fprintf(&b, "| %s | stored MB/s (what the link carries) | %.1f | %.1f | %s | |\n", wl, bi, sc, ratio(sc, bi))
	bi, sc = w.bw(armBuiltin, wanRound.linkPerStored), w.bw(armSidecar, wanRound.linkPerStored)
	fmt.Fprintf(&b, "| %s | bytes on the link (both ways) per byte stored at the origin | %.3f | %.3f | %s | |\n", wl, bi, sc, ratio(sc, bi))
	wl = fmt.Sprintf("end-to-end latency at %s msg/s, %d ms RTT", num(float64(w.LatRate)), wanLatRTT.Milliseconds())
	for _, s := range []struct {
		name string
		f    func(latRound) time.Duration
	}{
		{"p50 ms", func(x latRound) time.Duration { return x.P50 }},
		{"p99 ms", func(x latRound) time.Duration { return x.P99 }},
		{"max ms", func(x latRound) time.Duration { return x.Max }},
	} {
		bi, sc := w.lat(armBuiltin, s.f), w.lat(armSidecar, s.f)
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %s | |\n", wl, s.name, bi, sc, ratio(sc, bi))
	}
	if w.Versus != "" {
		var xs []string
		for _, rtt := range wanRTTs {
			xs = append(xs, fmt.Sprintf("%d ms %s msg/s", rtt.Milliseconds(), num(w.tpRate(armVersus, rtt))))
		}
		last := wanRTTs[len(wanRTTs)-1]
		fmt.Fprintf(&b, "\nOn the same link in the same run, %s (arm sidecar-b): %s; at %d ms %.2f of its 0 ms figure, %s the built-in's.\n",
			w.Versus, strings.Join(xs, ", "), last.Milliseconds(), frac(w.tpRate(armVersus, last), w.tpRate(armVersus, 0)),
			ratio(w.tpRate(armVersus, last), w.tpRate(armBuiltin, last)))
	}
	s := w.Sidecar
	per := "—"
	if s.Messages > 0 {
		per = fmt.Sprintf("%.1f", s.CPU.Seconds()*1e6/float64(s.Messages))
	}
	fmt.Fprintf(&b, "\nThe sidecar over the WAN rows: %s messages copied, CPU %.1f s (%s µs / message), peak RSS %s MiB, %d threads, %d goroutines.\n",
		num(float64(s.Messages)), s.CPU.Seconds(), per, mib(s.PeakRSS), s.Threads, s.Goroutines)
	last := wanRTTs[len(wanRTTs)-1]
	share := frac(w.tpRate(armSidecar, last), w.tpRate(armSidecar, 0))
	mark := "met"
	if share < 0.8 {
		mark = "**short**"
	}
	fmt.Fprintf(&b, "\nTarget: sidecar throughput at %d ms RTT ≥ 0.80 of its 0 ms figure: %.2f: %s\n", last.Milliseconds(), share, mark)
	return b.String()
}

func frac(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// rounds is every WAN round, for RESULTS.md.
func (w *wanResult) rounds() string {
	var b strings.Builder
	fmt.Fprintf(&b, "WAN throughput, %s messages of 1 KiB per arm per round (time: first send on east to the last message taken by far; link: bytes the proxy carried towards far and back):\n\n", num(float64(w.Messages)))
	b.WriteString("| round | RTT ms | arm | time s | msg/s | into far MB | link up MB | link down MB | sidecar CPU s |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range w.TP {
		cpu := ""
		if x.Arm != armBuiltin {
			cpu = fmt.Sprintf("%.2f", x.CPU.Seconds())
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.2f | %s | %.1f | %.1f | %.2f | %s |\n", x.Round+1, x.RTT.Milliseconds(), x.Arm, x.Dur.Seconds(), num(x.rate()),
			float64(x.Into)/1e6, float64(x.LinkUp)/1e6, float64(x.LinkDown)/1e6, cpu)
	}
	fmt.Fprintf(&b, "\nWAN ZSTD topic, %s compressible messages per arm per round, link %.0f MB/s each way, %d ms RTT:\n\n", num(float64(w.ZstdMessages)), float64(wanBandwidth)/1e6, wanBWRTT.Milliseconds())
	b.WriteString("| round | arm | time s | payload MB/s | stored on east MB | into far MB | link up MB | link down MB | link / stored |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range w.BW {
		fmt.Fprintf(&b, "| %d | %s | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %.3f |\n", x.Round+1, x.Arm, x.Dur.Seconds(), float64(x.Payload)/1e6/x.Dur.Seconds(),
			float64(x.Stored)/1e6, float64(x.Into)/1e6, float64(x.LinkUp)/1e6, float64(x.LinkDown)/1e6, x.linkPerStored())
	}
	fmt.Fprintf(&b, "\nWAN latency at %s msg/s, %d ms RTT (publish on east to receipt by a consumer on far):\n\n", num(float64(w.LatRate)), wanLatRTT.Milliseconds())
	b.WriteString("| round | arm | received / sent | p50 ms | p99 ms | max ms |\n|---:|---|---:|---:|---:|---:|\n")
	for _, x := range w.Lat {
		fmt.Fprintf(&b, "| %d | %s | %d / %d | %.1f | %.1f | %.1f |\n", x.Round+1, x.Arm, x.Got, x.Sent, float64(x.P50)/1e6, float64(x.P99)/1e6, float64(x.Max)/1e6)
	}
	return b.String()
}

// method says how the WAN rows are measured.
func (w *wanResult) method(r *report) string {
	return fmt.Sprintf(`- Between regions: the cluster far sits behind the test bed's WAN proxy (e2e/wan, a userspace TCP proxy: the kernel here has no netem); the proxy adds half the round trip to every byte in each direction (no jitter; bytes never reorder) and, for the ZSTD row, paces each direction to %[1]s bytes per second. Each proxied connection holds at most 8 MiB per direction in flight (256 chunks of up to 32 KiB), like a TCP window. The sidecar is given far's proxied addresses; Pulsar's replicator reaches far through the same links because cluster.sh geo registers far in east's cluster metadata with them, and far answers lookups arriving there with the proxy's address (a listener of its own). Each measured arm must have sent at least 0.9 byte over the link per byte far took in, or the row fails.
- WAN throughput: as the throughput workload (the batching producer, %[2]s messages of 1 KiB per arm per round, 1 partition), timed from the first send on east until far's broker took the last message; at %[3]s of round trip, each round running every round trip for both arms. The target: the sidecar's median at the longest round trip at least 0.8 of its own at 0 ms.
- WAN bandwidth: the ZSTD workload's producer and messages (%[4]s per arm per round), the link at %[1]s bytes per second each way and %[5]s of round trip. "Bytes on the link" are what the proxy carried in both directions (binary protocol and admin API) over the round, per byte east stored (bytesInCounter).
- WAN latency: as the latency workload (%[6]s messages per second for %[7]s per arm per round, no batching), at %[8]s of round trip, the consumer on far itself (not through the proxy).
`, num(float64(wanBandwidth)), num(float64(w.Messages)), rttList(), num(float64(w.ZstdMessages)), wanBWRTT, num(float64(w.LatRate)), r.Sizes.LatDuration, wanLatRTT)
}

func rttList() string {
	var s []string
	for _, r := range wanRTTs {
		s = append(s, fmt.Sprintf("%d ms", r.Milliseconds()))
	}
	return strings.Join(s, ", ")
}

// Markdown is the WAN section of RESULTS.md, between its markers.
func (w *wanResult) Markdown(r *report) string {
	return wanBegin + "\n## Between regions (WAN rows)\n\n" + w.summary(r) + "\n### Every WAN round\n\n" + w.rounds() +
		"\n### How the WAN rows are measured\n\n" + w.method(r) + wanEnd + "\n"
}

// splice replaces doc's text from begin to end (markers included) with
// section (which carries the markers), or appends it when doc has none.
func splice(doc, begin, end, section string) string {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + section
	}
	rest := doc[j+len(end):]
	rest = strings.TrimPrefix(rest, "\n")
	return doc[:i] + section + rest
}

// mainRan reports whether the run measured anything but the WAN rows:
// only then does it replace the main sections of RESULTS.md and the
// benchmark page (a run of -only wan replaces only the WAN sections).
func mainRan(o options) bool {
	for w := range o.Only {
		if w != "wan" {
			return true
		}
	}
	return false
}

// wanMarkdown is the WAN section of RESULTS.md, or "" when the WAN rows
// did not run (or failed).
func (r *report) wanMarkdown() string {
	if r.WAN == nil {
		return ""
	}
	return r.WAN.Markdown(r)
}

// writeResults writes RESULTS.md: the main report when anything but the
// WAN rows ran (keeping the WAN section it had), then the WAN section when
// the WAN rows ran (keeping the rest).
func writeResults(path string, o options, r *report) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	if mainRan(o) {
		doc = r.Markdown()
		if w := wanSection(string(old)); w != "" {
			doc = splice(doc, wanBegin, wanEnd, w)
		}
	}
	if r.WAN != nil {
		doc = splice(doc, wanBegin, wanEnd, r.wanMarkdown())
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// updatePageAll replaces the benchmark page's main section (updatePage)
// when anything but the WAN rows ran, and its WAN section when they ran;
// both link to the full report, o.Out.
func updatePageAll(path string, o options, r *report) error {
	if mainRan(o) {
		if err := updatePage(path, o.Out, r); err != nil {
			return err
		}
	}
	if r.WAN == nil {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	if i, j := strings.Index(s, wanBegin), strings.Index(s, wanEnd); i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section to replace", path, wanBegin, wanEnd)
	}
	body := wanBegin + "\n" + r.WAN.summary(r) + "\nEvery WAN round and the method: " + resultsLink(path, o.Out, "#between-regions-wan-rows") + ".\n" + wanEnd + "\n"
	return os.WriteFile(path, []byte(splice(s, wanBegin, wanEnd, body)), 0o644)
}

// wanSection returns doc's WAN section (markers included, with its
// newline), or "".
func wanSection(doc string) string {
	i, j := strings.Index(doc, wanBegin), strings.Index(doc, wanEnd)
	if i < 0 || j < i {
		return ""
	}
	return doc[i:j+len(wanEnd)] + "\n"
}
