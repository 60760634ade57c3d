// Command soak is `make soak`: a randomized fault soak of geo-sidecar
// under load on the test bed's clusters, checked from outside (issue 38).
// Two sidecar instances per source cluster copy east<->west active-active
// and east->north one way (north's own instances carry the snapshot
// answers back) while load runs on east and west and a schedule drawn
// from SOAK_SEED kills, stops and restarts them, unloads topics, turns
// the target's deduplication off and on, bursts the load, restarts
// brokers and cuts, half-opens and slows the WAN proxy's link between
// east's b instance and north; half-way, a config change adds a topic
// under topic_patterns by a rolling restart. After SOAK_DURATION the
// load stops, the copy drains, and a reader with Pulsar's Java client
// reads every partition on both clusters and counts, per partition and
// origin producer, what was lost, duplicated or out of order; `geo-sidecar
// verify --complete` proves every pair's copy of every topic beside it,
// and each sidecar instance's RSS, sampled over the run, is judged. The
// report and the sidecars' logs stay in SOAK_OUT.
//
// Environment: SOAK_DURATION (default 30m), SOAK_SEED (default random,
// printed), SOAK_RATE (messages per second per cluster, default 100),
// SOAK_DRAIN (longest wait for the drain, default 5m), SOAK_LOG_LEVEL (the
// sidecars', default info), SOAK_NORTH (1, the default: the one-way pair
// east->north, east's b instance reaching north through the WAN proxy,
// and the WAN faults on that link; 0: east and west only), SOAK_RECONFIG
// (1, the default: the config change half-way, a topic added under
// topic_patterns by a rolling restart; 0: none), SOAK_OUT
// (default a new directory under the temporary directory).
//
// Exit status: 0 with no finding, 1 with findings, no drain, a verify
// that did not exit 0 or disagrees with the checker's losses, or an
// instance's RSS grown beyond 10 % after a full warm-up; 2 when the run
// could not be made.
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

func main() { os.Exit(run()) }

func run() int {
	o, err := options()
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	fmt.Printf("soak: SOAK_SEED=%d SOAK_DURATION=%s SOAK_RATE=%d north %v config change %v, output in %s\n", o.Seed, o.Duration, o.Rate, o.North, o.Reconfig, o.Out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "soak: stopping (a second signal exits at once)")
		cancel()
		<-sigs
		os.Exit(2)
	}()
	if err := e2e.BuildBinary(o.Out); err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	o.Binary = e2e.Binary
	res, err := Run(ctx, o)
	if res != nil {
		path := filepath.Join(o.Out, "report.txt")
		f, ferr := os.Create(path)
		if ferr == nil {
			WriteReport(f, o, res)
			f.Close()
		}
		WriteReport(os.Stdout, o, res)
		fmt.Printf("\nreport %s; sidecars' logs %s/*.log\n", path, o.Out)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	if res.Failed() {
		return 1
	}
	return 0
}

func options() (Options, error) {
	o := Options{Duration: 30 * time.Minute, Rate: 100, Drain: 5 * time.Minute, Log: os.Stdout, Seed: rand.Int64()}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return o, fmt.Errorf("SOAK_SEED=%q: %w", v, err)
		}
		o.Seed = s
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"SOAK_DURATION", &o.Duration}, {"SOAK_DRAIN", &o.Drain}} {
		if v := os.Getenv(d.env); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				return o, fmt.Errorf("%s=%q: not a positive duration", d.env, v)
			}
			*d.to = x
		}
	}
	if v := os.Getenv("SOAK_RATE"); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r <= 0 {
			return o, fmt.Errorf("SOAK_RATE=%q: not a positive number", v)
		}
		o.Rate = r
	}
	switch o.LogLevel = os.Getenv("SOAK_LOG_LEVEL"); o.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return o, fmt.Errorf("SOAK_LOG_LEVEL=%q: not one of debug, info, warn, error", o.LogLevel)
	}
	switch v := os.Getenv("SOAK_RECONFIG"); v {
	case "", "1":
		o.Reconfig = true
	case "0":
	default:
		return o, fmt.Errorf("SOAK_RECONFIG=%q: 1 (the default) or 0", v)
	}
	switch v := os.Getenv("SOAK_NORTH"); v {
	case "", "1":
		o.North = true
	case "0":
	default:
		return o, fmt.Errorf("SOAK_NORTH=%q: 1 (the default) or 0", v)
	}
	o.Out = os.Getenv("SOAK_OUT")
	if o.Out == "" {
		dir, err := os.MkdirTemp("", fmt.Sprintf("geo-sidecar-soak-%d-", o.Seed))
		if err != nil {
			return o, err
		}
		o.Out = dir
	} else if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return o, err
	}
	return o, nil
}
