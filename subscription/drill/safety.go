package drill

// The drill's subscription: which one it runs on, and the rules that keep
// it away from everyone else's. The drill publishes, consumes, acknowledges
// and finally deletes; on a subscription an application uses, each of those
// would hurt (acknowledged messages are gone for the application, a deleted
// subscription loses its position and its backlog). So the drill only ever
// works on a subscription it created itself, and only publishes on a topic
// nobody else reads unless told otherwise.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"

	"github.com/geo-sidecar/geo-sidecar/config"
)

// Prefix starts the name of every subscription the drill creates when
// Options.Subscription is "", so that it never picks a name an application
// uses; a config keeps them in step with subscription_patterns:
// ["geo-sidecar-drill-.*"] (Pattern).
const (
	Prefix  = "geo-sidecar-drill-"
	Pattern = Prefix + ".*"
)

// errSubscriptionExists: the subscription the drill was to create exists
// already, so it belongs to someone else and the drill does not run.
var errSubscriptionExists = errors.New("subscription exists")

// errTopicNotFound: the topic does not exist yet on that cluster.
var errTopicNotFound = errors.New("topic not found")

// admin is what the drill's subscription rules need of one cluster's admin
// API. Implementations are safe for concurrent use.
type admin interface {
	// Subscriptions lists the topic's subscriptions (over all partitions);
	// errTopicNotFound when the topic does not exist.
	Subscriptions(ctx context.Context, topic string) ([]string, error)
	// CreateAtEnd creates sub at the end of the topic: errSubscriptionExists
	// when it exists, errTopicNotFound when the topic does not.
	CreateAtEnd(ctx context.Context, topic, sub string) error
	// Delete deletes sub; nil when it does not exist.
	Delete(ctx context.Context, topic, sub string) error
}

// pulsarAdmin is admin over Pulsar's admin API.
type pulsarAdmin struct{ a pulsaradmin.Client }

func adminError(err error) error {
	var re rest.Error
	if errors.As(err, &re) {
		switch re.Code {
		case 404:
			return fmt.Errorf("%w: %w", errTopicNotFound, err)
		case 409:
			return fmt.Errorf("%w: %w", errSubscriptionExists, err)
		}
	}
	return err
}

func (p pulsarAdmin) Subscriptions(ctx context.Context, topic string) ([]string, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	subs, err := p.a.Subscriptions().ListWithContext(ctx, *tn)
	return subs, adminError(err)
}

func (p pulsarAdmin) CreateAtEnd(ctx context.Context, topic, sub string) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	return adminError(p.a.Subscriptions().CreateWithContext(ctx, *tn, sub, utils.Latest))
}

func (p pulsarAdmin) Delete(ctx context.Context, topic, sub string) error {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return err
	}
	// Not ForceDelete: should anyone be attached after all, the deletion
	// fails rather than disconnecting them.
	err = adminError(p.a.Subscriptions().DeleteWithContext(ctx, *tn, sub))
	if errors.Is(err, errTopicNotFound) { // the subscription (or the topic) is not there
		return nil
	}
	return err
}

// subName is the subscription the drill runs on: the one asked for, or a
// fresh name under Prefix.
func subName(asked string) string {
	if asked != "" {
		return asked
	}
	return Prefix + uuid.NewString()[:8]
}

// checkKeptInStep returns nil when the config keeps sub on topic (its short
// name, in namespace ns) in step from a to b, and otherwise an error that
// says which entries to change and how. The drill of a subscription not
// kept in step would only show that it is not.
func checkKeptInStep(cfg *config.Config, ns, short, sub, a, b string) error {
	switch {
	case cfg.Sidecar.IsOwnCursor(sub):
		return fmt.Errorf("--subscription %q is one of geo-sidecar's own cursors (prefix %q)", sub, cfg.Sidecar.OwnCursorPrefix())
	case config.IsPulsarCursor(sub):
		return fmt.Errorf("--subscription %q is one of Pulsar's own cursors (prefix %q)", sub, config.PulsarCursorPrefix)
	}
	topic := ns + "/" + short
	entries := cfg.EntriesCopying(ns, short, a, b)
	if len(entries) == 0 {
		return fmt.Errorf("the config does not replicate %s from %s to %s", topic, a, b)
	}
	var paths []string
	for _, k := range entries {
		if cfg.Replication[k].Tracks(cfg.Sidecar, sub) {
			return nil
		}
		paths = append(paths, fmt.Sprintf("replication[%d]", k))
	}
	fix := fmt.Sprintf(`add subscription_patterns: [%q]`, Pattern)
	if !strings.HasPrefix(sub, Prefix) {
		fix = fmt.Sprintf(`add subscriptions: [%q] (or leave out --subscription and add subscription_patterns: [%q])`, sub, Pattern)
	}
	return fmt.Errorf("subscription %q is not kept in step from %s to %s on %s: no subscriptions or subscription_patterns of %s (source %s, namespace %s) match it; %s to %s, restart the sidecars and run the drill again",
		sub, a, b, topic, strings.Join(paths, ", "), a, cfg.Replication[entries[0]].Namespace, fix, strings.Join(paths, ", "))
}

// foreign reports whether a subscription found on the drill's topic
// belongs to someone else than geo-sidecar and its drills.
func foreign(cfg *config.Config, sub string) bool {
	return !cfg.Sidecar.IsOwnCursor(sub) && !config.IsPulsarCursor(sub) && !strings.HasPrefix(sub, Prefix)
}

// cluster is one cluster as the subscription rules see it.
type cluster struct {
	name  string
	admin admin
}

// preflight checks, before the drill touches anything, that sub exists on
// none of the clusters, and (unless allowOthers) that nobody else
// subscribes to the topic: every subscription of it would receive the
// drill's messages. It returns the drill subscriptions left over from
// earlier runs, to be mentioned.
func preflight(ctx context.Context, cfg *config.Config, clusters []cluster, topic, sub string, allowOthers bool) (leftovers []string, err error) {
	var others []string
	for _, c := range clusters {
		subs, err := c.admin.Subscriptions(ctx, topic)
		if errors.Is(err, errTopicNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list the subscriptions of %s on %s: %w", topic, c.name, err)
		}
		for _, s := range subs {
			switch {
			case s == sub:
				return nil, fmt.Errorf("subscription %q exists on %s: the drill runs only on a subscription it creates itself "+
					"(it acknowledges what it reads and deletes the subscription afterwards); leave out --subscription for a fresh one, "+
					"or name one that does not exist (%w)", sub, c.name, errSubscriptionExists)
			case strings.HasPrefix(s, Prefix):
				leftovers = appendNew(leftovers, fmt.Sprintf("%s (on %s)", s, c.name))
			case foreign(cfg, s):
				others = appendNew(others, fmt.Sprintf("%s (on %s)", s, c.name))
			}
		}
	}
	if len(others) > 0 && !allowOthers {
		return nil, fmt.Errorf("%s has other subscriptions: %s; they would receive the drill's messages. "+
			"Run the drill on a topic of its own that the same replication entries cover (e.g. %s), "+
			"or pass --allow-other-subscriptions if their consumers skip messages with the property %q",
			topic, strings.Join(others, ", "), topic[:strings.LastIndex(topic, "/")+1]+"geo-sidecar-drill", tag)
	}
	return leftovers, nil
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// cleanupSettle is how long cleanup watches a deleted subscription for a
// sidecar creating it again, and cleanupRounds how often it deletes again.
const (
	cleanupSettle = 3 * time.Second
	cleanupRounds = 4
)

// removeSub deletes the drill's subscription on every cluster, in
// the order given: the failover target first (its sidecar created it there
// from the source, and does not again once it has seen it), then the
// source. A sidecar can still create it again from what it saw a moment
// before (active-active: each side creates on the other what it lacks), so
// it watches for cleanupSettle and deletes again, up to cleanupRounds
// times. The error names where it may be left and how to delete it.
func removeSub(ctx context.Context, clusters []cluster, topic, sub string) error {
	for round := 1; ; round++ {
		var errs []error
		for _, c := range clusters {
			if err := c.admin.Delete(ctx, topic, sub); err != nil {
				errs = append(errs, fmt.Errorf("delete on %s: %w", c.name, err))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(cleanupSettle):
		}
		var left []string
		for _, c := range clusters {
			subs, err := c.admin.Subscriptions(ctx, topic)
			if err != nil && !errors.Is(err, errTopicNotFound) {
				errs = append(errs, fmt.Errorf("list on %s: %w", c.name, err))
				left = append(left, c.name)
			} else if slices.Contains(subs, sub) {
				left = append(left, c.name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if round >= cleanupRounds || ctx.Err() != nil {
			err := fmt.Errorf("subscription %s may be left on %s, where it holds back the topic's retention: "+
				"delete it with pulsar-admin topics unsubscribe %s --subscription %s", sub, strings.Join(left, " and "), topic, sub)
			return errors.Join(append([]error{err}, errs...)...)
		}
	}
}
