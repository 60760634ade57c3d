package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator"
)

// stopTimeout bounds the whole stop, from the signal to the exit: well
// within the Helm chart's 30 s grace period (terminationGracePeriodSeconds),
// past which the pod is killed and what was in flight is sent again.
const stopTimeout = 10 * time.Second

// httpStopShare is the part of stopTimeout kept for the HTTP server's
// shutdown after the sidecar's stop (a scrape in progress finishes).
const httpStopShare = time.Second

// serve runs the sidecar and its HTTP endpoints until ctx is done. Shutdown
// runs in reverse order of start, under one deadline (stopTimeout from
// ctx's end): replicators first (they finish or abandon in-flight sends,
// then the connections close), then the HTTP server, in what is left.
func serve(ctx context.Context, cfg *config.Config, cluster string, log *zap.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sec := newSecurityMetrics(reg, cfg)
	logWarnings(log, cfg.Warnings())
	s, err := replicator.New(cfg, replicator.Options{Log: log, Registry: reg, Cluster: cluster, StopTimeout: stopTimeout - httpStopShare, Security: sec.events()})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Sidecar.Listen)
	if err != nil {
		return fmt.Errorf("sidecar.listen %q: %w", cfg.Sidecar.Listen, err)
	}
	srv := &http.Server{Handler: handler(reg, s.NotReady), ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()
	log.Info("http endpoints listening", zap.String("addr", ln.Addr().String()))

	stopBy := make(chan time.Time, 1)
	stopClock := context.AfterFunc(ctx, func() { stopBy <- time.Now().Add(stopTimeout) })
	runErr := s.Run(ctx)
	if stopClock() { // Run ended before ctx (it could not start)
		stopBy <- time.Now().Add(httpStopShare)
	}
	shutCtx, cancel := context.WithDeadline(context.Background(), <-stopBy)
	defer cancel()
	httpErr := srv.Shutdown(shutCtx)
	if err := <-httpDone; !errors.Is(err, http.ErrServerClosed) {
		httpErr = errors.Join(httpErr, err)
	}
	return errors.Join(runErr, httpErr)
}

// logWarnings logs each of the config's warnings once, under its kind's
// message; a deprecated name's warning names the old and the new in
// fields of their own.
func logWarnings(log *zap.Logger, ws []config.Warning) {
	for _, w := range ws {
		fs := []zap.Field{zap.String("warning", w.Detail)}
		if w.Old != "" {
			fs = append(fs, zap.String("old", w.Old), zap.String("new", w.New))
		}
		log.Warn(w.Summary, fs...)
	}
}

// handler serves /metrics, /healthz (the process is alive) and /readyz
// (every pair has discovered its topics once, and none is known unable to
// replicate; otherwise 503 with the reason: notReady).
func handler(reg *prometheus.Registry, notReady func() string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
