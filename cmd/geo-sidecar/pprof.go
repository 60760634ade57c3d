package main

import (
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"go.uber.org/zap"
)

// pprofFlag adds the opt-in --pprof flag to fs (off by default). The
// returned func, called once the logger exists, starts the profiling
// endpoints when the flag is set and returns the func that stops them.
//
// The profiles are served on their own listener, never beside /metrics: an
// operator who exposes metrics does not expose profiles by accident. With
// --pprof, goroutine blocking and mutex contention are sampled too (a small
// cost, which is why the flag is off by default); the benchmark
// (e2e/bench) uses it to profile the sidecar under load.
func pprofFlag(fs *flag.FlagSet) func(log *zap.Logger) func() {
	addr := fs.String("pprof", "", "serve Go profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty")
	return func(log *zap.Logger) func() {
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
