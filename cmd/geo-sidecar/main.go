// Command geo-sidecar geo-replicates Apache Pulsar clusters from the
// outside. This file holds flags, signals and exit codes only; the work is
// in the replicator package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `geo-sidecar: geo-replication for Apache Pulsar, from the outside.

Usage:
  geo-sidecar validate --config FILE             check a config, report every error
  geo-sidecar run      --config FILE [--cluster NAME] [--listen ADDR] [--log-level L] [--log-format F]
                                                 replicate (with --cluster: only pairs whose source is NAME)
  geo-sidecar status   --config FILE [--cluster NAME]
                                                 backlog, oldest unreplicated message and rate per pair
  geo-sidecar drill    --config FILE --topic T --from A --to B [--subscription NEW] [--messages N] [--type T]
                                                 a failover drill against live clusters
  geo-sidecar verify   --config FILE --topic T --from A --to B [--since D|TIME] [--json]
                                                 prove the copy: missing, duplicated, divergent, out of order
  geo-sidecar switchover --config FILE --topic T --from A --to B --subscription S[,S] [--dry-run] [--json]
                                                 planned move of consumers: the subscriptions' exact state, ack holes included
  geo-sidecar failback --config FILE --topic T --from A --to B (--replay|--park TOPIC|--leave) [--subscription S[,S]] [--dry-run] [--json]
                                                 after a failover A -> B, A back: its stranded tail reported and dealt with, subscriptions home
  geo-sidecar version

Without --config: $GEO_SIDECAR_CONFIG, else ./geo-sidecar.yaml, else
/etc/geo-sidecar/config.yaml.
Run "geo-sidecar COMMAND --help" for a command's flags.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "run":
		return cmdRun(rest, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "drill":
		return cmdDrill(rest, stdout, stderr)
	case "verify":
		return cmdVerify(rest, stdout, stderr)
	case "switchover":
		return cmdSwitchover(rest, stdout, stderr)
	case "failback":
		return cmdFailback(rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "geo-sidecar", version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "geo-sidecar: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// common holds the flags every config-reading command takes.
type common struct {
	fs      *flag.FlagSet
	config  string
	cluster string
}

func newFlags(name, help string, stderr io.Writer) *common {
	c := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.config, "config", "", "path of the YAML config (default: $"+configEnv+", else ./geo-sidecar.yaml, else /etc/geo-sidecar/config.yaml)")
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: geo-sidecar %s [flags]\n\n%s\n\nFlags:\n", name, help)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses args and loads the config; it returns an exit code != -1 to
// stop with.
func (c *common) parse(args []string, stderr io.Writer) (*config.Config, int) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK
		}
		return nil, exitUsage
	}
	if c.fs.NArg() > 0 {
		c.fs.Usage()
		return nil, exitUsage
	}
	if c.config == "" {
		path, looked := findConfig()
		if path == "" {
			fmt.Fprintf(stderr, "geo-sidecar: no config file given and none found; looked for:\n")
			for _, l := range looked {
				fmt.Fprintf(stderr, "  %s\n", l)
			}
			fmt.Fprintf(stderr, "give one with --config FILE (geo-sidecar %s --help)\n", c.fs.Name())
			return nil, exitUsage
		}
		c.config = path
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: %v\n", err)
		return nil, exitFailed
	}
	return cfg, -1
}

// configEnv names a config file when --config is not given; after it,
// configPaths are tried in order (the first is relative to the working
// directory, the second is where the container image expects it).
const configEnv = "GEO_SIDECAR_CONFIG"

var configPaths = []string{"geo-sidecar.yaml", "/etc/geo-sidecar/config.yaml"}

// findConfig returns the config file to use without --config ("" if none)
// and, for the error message, where it looked and what it found there.
func findConfig() (path string, looked []string) {
	if p := os.Getenv(configEnv); p != "" {
		// Named explicitly: used even if missing, so that config.Load
		// reports the path instead of another file being picked.
		return p, nil
	}
	looked = append(looked, "$"+configEnv+" (not set)")
	for _, p := range configPaths {
		abs := p
		if a, err := filepath.Abs(p); err == nil {
			abs = a
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if errors.Is(err, fs.ErrNotExist) {
			looked = append(looked, abs+" (does not exist)")
		} else {
			looked = append(looked, fmt.Sprintf("%s (%v)", abs, err))
		}
	}
	return "", looked
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	c := newFlags("validate", "Checks the config and reports every error, each with its path in the file.\n"+
		"With --live, also asks the clusters what each pair needs to start: the source namespace's\n"+
		"topics can be listed, the target namespace exists and the credentials may use it.", stderr)
	live := c.fs.Bool("live", false, "also check the pairs against the live clusters (admin API)")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		return code
	}
	pairs := 0
	for _, r := range cfg.Replication {
		pairs += len(r.Targets)
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w.Detail)
	}
	fmt.Fprintf(stdout, "%s: ok (%d clusters, %d replication entries, %d pairs)\n",
		c.config, len(cfg.Clusters), len(cfg.Replication), pairs)
	if !*live {
		return exitOK
	}
	s, err := replicator.New(cfg, replicator.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: %v\n", err)
		return exitFailed
	}
	ctx, cancel := context.WithTimeout(context.Background(), liveCheckTimeout)
	defer cancel()
	problems, err := s.Check(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: %v\n", err)
		return exitFailed
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "live: %s\n", p)
	}
	if len(problems) > 0 {
		return exitFailed
	}
	fmt.Fprintf(stdout, "live: ok (every pair's namespaces answer on both clusters)\n")
	return exitOK
}

// liveCheckTimeout bounds validate --live: a cluster that does not answer
// is a finding, not a hang.
const liveCheckTimeout = 30 * time.Second

func cmdRun(args []string, stderr io.Writer) int {
	c := newFlags("run", "Replicates until SIGTERM or SIGINT (a second signal, a second or more later, exits at once).", stderr)
	c.fs.StringVar(&c.cluster, "cluster", "", "run only the pairs whose source is this cluster")
	level := c.fs.String("log-level", "info", "debug, info, warn or error")
	format := c.fs.String("log-format", "json", "json or console")
	listen := c.fs.String("listen", "", "host:port for /metrics, /healthz and /readyz, instead of sidecar.listen\n(in Kubernetes the pod's IP: --listen $(POD_IP):9750)")
	checkPprof, startPprof := pprofFlag(c.fs)
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		return code
	}
	if err := checkPprof(); err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: --pprof: %v\n", err)
		return exitUsage
	}
	if *listen != "" {
		if _, _, err := net.SplitHostPort(*listen); err != nil {
			fmt.Fprintf(stderr, "geo-sidecar: --listen %q: %v\n", *listen, err)
			return exitUsage
		}
		cfg.Sidecar.Listen = *listen
	}
	log, err := newLogger(*level, *format, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: %v\n", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()
	log.Info("config loaded", zap.String("path", c.config), zap.String("version", version))
	defer startPprof(log)()

	ctx, stop := signalContext(log)
	defer stop()
	if err := serve(ctx, cfg, c.cluster, log); err != nil {
		log.Error("geo-sidecar stopped with an error", zap.Error(err))
		return exitFailed
	}
	return exitOK
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	c := newFlags("status", "Prints, per replication pair and topic, what the source cluster's admin API says:\n"+
		"cursor connected, backlog, age of the oldest unreplicated message, rate.", stderr)
	c.fs.StringVar(&c.cluster, "cluster", "", "only the pairs whose source is this cluster")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		return code
	}
	s, err := replicator.New(cfg, replicator.Options{Cluster: c.cluster})
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: %v\n", err)
		return exitFailed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sts, err := s.Status(ctx)
	PrintStatus(stdout, sts)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar: status: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// PrintStatus writes the status table.
func PrintStatus(w io.Writer, sts []replicator.PairStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tTARGET\tTOPIC\tPARTITIONS\tCONNECTED\tBACKLOG\tOLDEST\tRATE/s")
	for _, st := range sts {
		// Pulsar reports 0 partitions for a non-partitioned topic: one
		// cursor, shown as "-" (not a partitioned topic), connected of 1.
		parts, shown := st.Partitions, fmt.Sprint(st.Partitions)
		if parts == 0 {
			parts, shown = 1, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%.1f\n", st.Source, st.Target, st.Topic,
			shown, st.Connected, parts, st.Backlog, st.OldestAge.Round(time.Millisecond), st.Rate)
	}
	_ = tw.Flush()
	var subs bool
	for _, st := range sts {
		subs = subs || len(st.Subscriptions) > 0
	}
	if !subs {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tTARGET\tTOPIC\tSUBSCRIPTION\tSOURCE BACKLOG\tTARGET BACKLOG\tLAG (redelivered on failover)")
	for _, st := range sts {
		for _, s := range st.Subscriptions {
			target := fmt.Sprint(s.TargetBacklog)
			if s.TargetBacklog < 0 {
				target = "(absent)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\n", st.Source, st.Target, st.Topic, s.Name, s.SourceBacklog, target, s.Lag)
		}
	}
	_ = tw.Flush()
}

// signalContext is cancelled by the first SIGTERM or SIGINT; a second one
// exits at once.
func signalContext(log *zap.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-ch
		log.Info("signal received, stopping", zap.String("signal", s.String()))
		cancel()
		first := time.Now()
		for s := range ch {
			// A supervisor that signals the process and then its process
			// group (GNU timeout, some init systems) delivers the same
			// signal twice at once: that is not an operator insisting.
			if time.Since(first) < time.Second {
				log.Debug("repeated signal ignored", zap.String("signal", s.String()))
				continue
			}
			log.Warn("second signal, exiting now")
			os.Exit(exitFailed)
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	switch format {
	case "json":
		encoder = zapcore.NewJSONEncoder(enc)
	case "console":
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("--log-format: %q is not json or console", format)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.AddSync(w), lvl)), nil
}
