package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/subscription/drill"
)

// cmdDrill is geo-sidecar drill: flags, signals, printing and exit codes
// around drill.Run.
func cmdDrill(args []string, stdout, stderr io.Writer) int {
	c := newFlags("drill", "Runs a failover drill against live clusters on a subscription of its own: creates it in --from,\n"+
		"publishes tagged messages in both regions, consumes and acknowledges part of them in --from,\n"+
		"stops, waits until the subscription is in step, resumes in --to on the same subscription,\n"+
		"reports lost (must be 0) and duplicated messages, and deletes the subscription on both clusters.\n"+
		"It never touches a subscription it did not create, and refuses a topic others subscribe to unless\n"+
		"--allow-other-subscriptions. The sidecars must be running and keep the subscription in step\n"+
		"(subscription_patterns: [\""+drill.Pattern+"\"]). Exit code 1 when anything was lost or the\n"+
		"subscription could not be deleted.", stderr)
	o := drill.Options{Dial: dialDrill}
	var asJSON bool
	c.fs.StringVar(&o.Topic, "topic", "", "replicated topic, tenant/namespace/topic (required); best one of its own, e.g. tenant/ns/geo-sidecar-drill")
	c.fs.StringVar(&o.Subscription, "subscription", "", "name of the subscription the drill creates; must not exist (default "+drill.Prefix+"<random>)")
	c.fs.StringVar(&o.From, "from", "", "cluster to fail over from (required)")
	c.fs.StringVar(&o.To, "to", "", "cluster to fail over to (required)")
	c.fs.StringVar(&o.Type, "type", "exclusive", "subscription type: exclusive, failover, shared or key_shared")
	c.fs.IntVar(&o.Messages, "messages", 1000, "messages to publish (split between the regions)")
	c.fs.Float64Var(&o.ConsumeFraction, "consume", 0.5, "fraction of the messages to consume in --from before the switch")
	c.fs.BoolVar(&o.Keep, "keep", false, "keep the drill's subscription on both clusters afterwards (it holds back retention until deleted)")
	c.fs.BoolVar(&o.AllowOtherSubscriptions, "allow-other-subscriptions", false, "publish even though the topic has other subscriptions: they receive the drill's messages")
	c.fs.DurationVar(&o.PublishOver, "publish-over", 5*time.Second, "spread publishing over this long, like live traffic")
	c.fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cfg, code := c.parse(args, stderr)
	if code >= 0 {
		return code
	}
	if o.Topic == "" || o.From == "" || o.To == "" || o.From == o.To || o.Messages < 2 ||
		o.ConsumeFraction <= 0 || o.ConsumeFraction >= 1 {
		fmt.Fprintln(stderr, "geo-sidecar drill: --topic, --from and --to are required, --from and --to differ; --messages >= 2; 0 < --consume < 1")
		return exitUsage
	}
	// SIGINT or SIGTERM stops the drill; its subscription is still deleted.
	sctx, sstop := signalContext(zap.NewNop())
	defer sstop()
	ctx, stop := context.WithTimeout(sctx, 10*time.Minute)
	defer stop()
	progress := stderr
	if !asJSON {
		progress = stdout
	}
	rep, err := drill.Run(ctx, cfg, o, progress)
	if err != nil {
		fmt.Fprintf(stderr, "geo-sidecar drill: %v\n", err)
		if !rep.Complete() {
			return exitFailed
		}
		// Complete, but the subscription could not be deleted: the
		// report is printed all the same.
	}
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printDrill(stdout, rep)
	}
	if rep.Lost > 0 || err != nil {
		return exitFailed
	}
	return exitOK
}

func printDrill(w io.Writer, r drill.Report) {
	fmt.Fprintf(w, "\nfailover drill %s -> %s on %s, subscription %s (%s)\n", r.From, r.To, r.Topic, r.Subscription, r.Type)
	fmt.Fprintf(w, "  published            %d\n", r.Published)
	fmt.Fprintf(w, "  consumed before      %d (in %s)\n", r.ConsumedBefore, r.From)
	fmt.Fprintf(w, "  consumed after       %d (in %s)\n", r.ConsumedAfter, r.To)
	fmt.Fprintf(w, "  lost                 %d\n", r.Lost)
	fmt.Fprintf(w, "  duplicates           %d\n", r.Duplicates)
	switch {
	case r.InStep:
		fmt.Fprintf(w, "  in step after        %.1fs\n", r.InStepSeconds)
	case r.GaveUp:
		fmt.Fprintf(w, "  in step              no: gave up waiting after %.0fs, the subscription on %s trailing by %d backlog entries (resumed all the same)\n",
			r.WaitedSeconds, r.To, r.Trailing)
	default:
		fmt.Fprintf(w, "  in step              no: trailing by %d backlog entries on %s after %.1fs, as close as the newest snapshot allows (a switch delivers them again)\n",
			r.Trailing, r.To, r.InStepSeconds)
	}
	if r.Kept {
		fmt.Fprintf(w, "  subscription         kept on %s and %s (--keep); delete it with pulsar-admin topics unsubscribe %s --subscription %s\n",
			r.From, r.To, r.Topic, r.Subscription)
	}
}

// dialDrill connects the drill with the sidecar's own clients: the same
// TLS checks and credentials (a token file is read again when it changes).
func dialDrill(cc config.Cluster) (pulsar.Client, pulsaradmin.Client, error) {
	conn, err := cluster.Dial(cc, zap.NewNop())
	if err != nil {
		return nil, nil, err
	}
	return conn.Client, conn.Admin, nil
}
