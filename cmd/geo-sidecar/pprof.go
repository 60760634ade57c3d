package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// checkPprofAddr refuses a --pprof address other hosts could reach. The
// profiles show every goroutine's stack, the command line and where memory
// goes, and a CPU profile or trace costs the process while it runs: they
// are for whoever is on this host (in Kubernetes, kubectl port-forward
// reaches the pod's own loopback). Unlike sidecar.listen, which a
// container may need to bind beyond loopback for Prometheus, nothing
// outside the host needs the profiles, so this is an error, not a warning.
func checkPprofAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if !config.IsLoopback(host) {
		return fmt.Errorf("%q is reachable from other hosts; serve profiles on loopback only, e.g. 127.0.0.1:6060 (kubectl port-forward reaches a pod's loopback)", addr)
	}
	return nil
}

// pprofFlag adds the opt-in --pprof flag to fs (off by default). check
// refuses an address beyond loopback (checkPprofAddr); start, called once
// the logger exists, starts the profiling endpoints when the flag is set
// and returns the func that stops them.
//
// The profiles are served on their own listener, never beside /metrics: an
// operator who exposes metrics does not expose profiles by accident. With
// --pprof, goroutine blocking and mutex contention are sampled too (a small
// cost, which is why the flag is off by default); the benchmark
// (e2e/bench) uses it to profile the sidecar under load.
func pprofFlag(fs *flag.FlagSet) (check func() error, start func(log *zap.Logger) func()) {
	addr := fs.String("pprof", "", "serve Go profiles (net/http/pprof) on this loopback address, e.g. 127.0.0.1:6060; off when empty")
	check = func() error { return checkPprofAddr(*addr) }
	return check, func(log *zap.Logger) func() {
		if *addr == "" {
			return func() {}
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			log.Warn("pprof endpoint not started", zap.String("addr", *addr), zap.Error(err))
			return func() {}
		}
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		runtime.SetMutexProfileFraction(100)
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Warn("pprof endpoint stopped", zap.Error(err))
			}
		}()
		log.Info("pprof endpoints listening", zap.String("addr", ln.Addr().String()))
		return func() { _ = srv.Close() }
	}
}
