// Package cluster is geo-sidecar's hold on one Pulsar cluster: the
// clients it dials (Clients: the binary-protocol clients of the entry
// path, of subscription moves and of the continuous verifier,
// pulsar-client-go's and the admin API's), the credentials they present
// and the refusals they meet (security.go: each reported once, by name,
// to the log and to SecurityEvents; tokens never logged), the admin control plane behind one small
// interface (ControlPlane: list topics, partitions, create and grow,
// layout, cursors, backlogs), and the retry primitives every loop over a
// cluster uses (Backoff, Sleep, Limiter).
//
// It exists so that the packages above it (discovery and status in
// replicator, the data path in entrypath, subscription sync in subsync)
// each ask a cluster for what they need through its Clients or a
// ControlPlane,
// and are unit-tested against fakes of those, never against Pulsar.
//
// Clients, its clients and ControlPlane implementations are safe for
// concurrent use; a Backoff is used by one goroutine; a Limiter is shared.
package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/auth"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	pulsaradminpkg "github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Clients are the clients geo-sidecar holds for one cluster: three
// binary-protocol clients, each with connections of its own (WireClient:
// the entry pipe's, shared by every cursor and producer on that cluster,
// and subscription sync's marker writers and start-up re-reads;
// MoveClient: subscription moves; VerifyClient: the continuous
// verifier), pulsar-client-go's (only the drill uses it) and the admin
// client. A wire.Conn, by contrast, is one socket.
type Clients struct {
	Name   string
	Client pulsar.Client
	// Admin is pulsaradmin's client; Dial's is an *AdminClient, which
	// also reads what pulsaradmin's types leave out (SubscriptionStats).
	Admin pulsaradmin.Client
	// Control is Admin as discovery and subscription sync use it.
	Control ControlPlane
	admin   *adminTransport // Admin's transport
	web     *http.Client    // over admin, for requests pulsaradmin has no call for

	// Config and Log are the cluster's, for the entry path's binary-
	// protocol client, built on first use (WireClient).
	Config   config.Cluster
	Log      *zap.Logger
	watch    *authWatch
	wireOnce sync.Once
	wire     *wire.Client
	wireErr  error
	// move is the client of subscription moves (MoveClient).
	moveOnce sync.Once
	move     *wire.Client
	moveErr  error
	// verify is the continuous verifier's client (VerifyClient).
	verifyOnce sync.Once
	verify     *wire.Client
	verifyErr  error
	// m, set by countAdmin, receives the wire client's link events.
	m *metrics.Metrics
}

// Dial builds the clients for c. Neither keeps a copy of the token: both
// ask for it when they need it (the binary client at each connection and
// when the broker challenges an expiring token, the admin client before
// each call), and each time the file or variable is read again, so a
// short-lived token that an agent replaces keeps replication going
// without a restart. Host names are verified on TLS connections. Refused
// credentials, missing permissions and refused certificates are logged
// once each by the "security" logger (see EventPermissionDenied) and told
// to ev; tokens and message properties never reach a log.
func Dial(c config.Cluster, log *zap.Logger, ev SecurityEvents) (*Clients, error) {
	w := newAuthWatch(c, log, ev)
	opts := pulsar.ClientOptions{
		URL:                     c.ServiceURL,
		TLSTrustCertsFilePath:   c.Auth.TLSTrustCertsFile,
		TLSValidateHostname:     true,
		Logger:                  zapLogger{s: log.Named("pulsar").With(zap.String("cluster", c.Name)).Sugar(), w: w},
		MaxConnectionsPerBroker: 1,
		// The client closes a connection silent for twice this.
		KeepAliveInterval: c.KeepAlive.Duration / 2,
	}
	switch {
	case c.Auth.HasToken():
		// Read once now, so a missing file fails at start, naming it.
		if _, err := w.Token(); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		opts.Authentication = pulsar.NewAuthenticationTokenFromSupplier(w.Token)
	case c.Auth.TLSCertFile != "":
		// Read at each handshake: a renewed certificate is used at the
		// next connection.
		opts.Authentication = pulsar.NewAuthenticationTLS(c.Auth.TLSCertFile, c.Auth.TLSKeyFile)
	}
	client, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: pulsar client: %w", c.Name, err)
	}
	base, err := newAdminBase(c.Auth, c.KeepAlive.Duration)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster %s: admin client: %w", c.Name, err)
	}
	rt := &adminTransport{base: base, w: w}
	admin, err := pulsaradminpkg.NewPulsarClientWithAuthProvider(&pulsaradmin.Config{WebServiceURL: c.AdminURL}, rt)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cluster %s: admin client: %w", c.Name, err)
	}
	web := &http.Client{Transport: rt, Timeout: pulsaradminpkg.DefaultHTTPTimeOutDuration}
	return &Clients{Name: c.Name, Client: client, Admin: NewAdminClient(admin, web, c.AdminURL), Control: pulsarControl{a: admin, lists: topicLister{web: web, base: strings.TrimRight(c.AdminURL, "/")}}, Config: c, watch: w, Log: log, admin: rt, web: web}, nil
}

// Positions is the cluster's client of the brokers' positions servlet
// (sidecar.positions: servlet), over the admin transport: the same TLS
// settings, credentials, refusal reports and request counting
// (admin_requests_total kind "positions") as the admin calls it
// replaces. Nil for Clients not built by Dial.
func (c *Clients) Positions() *positions.Client {
	if c.web == nil {
		return nil
	}
	return positions.New(c.web)
}

// Brokers returns the web service URLs of the cluster's active brokers
// (GET /admin/v2/brokers: "host:port" each), with the admin URL's
// scheme.
func (c *Clients) Brokers(ctx context.Context) ([]string, error) {
	ids, err := c.Admin.Brokers().GetListActiveBrokersWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: list the active brokers: %w", c.Name, err)
	}
	scheme := "http"
	if strings.HasPrefix(c.Config.AdminURL, "https://") {
		scheme = "https"
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, scheme+"://"+id)
	}
	return out, nil
}

// CountAdmin counts this cluster's admin calls in m, and its links'
// events (before any call).
func (c *Clients) CountAdmin(m *metrics.Metrics) {
	if c.admin != nil {
		c.admin.requests = m.AdminRequests.MustCurryWith(prometheus.Labels{"cluster": c.Name})
	}
	c.m = m
}

// Metrics are the metrics CountAdmin set; nil before.
func (c *Clients) Metrics() *metrics.Metrics { return c.m }

// Exiting tells the binary-protocol clients that the process exits
// (wire.Client.Exiting): the closes of their consumers and producers no
// longer wait for the brokers' replies, and Close follows. No client is
// built after it (WireClient, MoveClient and VerifyClient then return
// wire.ErrClosed).
func (c *Clients) Exiting() {
	for _, w := range c.wireClients(wire.ErrClosed) {
		w.Exiting()
	}
}

// Close releases the clients, the binary-protocol ones first (built
// after pulsar-client-go's, and quick to close: the connections go,
// whatever the brokers have not answered).
func (c *Clients) Close() {
	for _, w := range c.wireClients(wire.ErrClosed) {
		_ = w.Close()
	}
	c.Client.Close()
}

// wireClients returns the binary-protocol clients built so far; none is
// built after it (the next call of its getter returns err).
func (c *Clients) wireClients(err error) []*wire.Client {
	var out []*wire.Client
	for _, w := range []struct {
		once *sync.Once
		c    **wire.Client
		err  *error
	}{{&c.wireOnce, &c.wire, &c.wireErr}, {&c.moveOnce, &c.move, &c.moveErr}, {&c.verifyOnce, &c.verify, &c.verifyErr}} {
		w.once.Do(func() { *w.err = err }) // after this, the client is set or never will be
		if *w.c != nil {
			out = append(out, *w.c)
		}
	}
	return out
}

// zapLogger routes pulsar-client-go's logs into zap, one level down: the
// client's Info is chatty (every connect), so it lands at Debug. Fields
// that carry message contents are dropped (see dropField): the client logs
// a failed send with the message's properties, and messages' contents
// (customer ids, emails) must not reach the sidecar's logs. Only the
// drill uses this client; the sidecar's own reads and writes go through
// the wire clients.
// What the client says about producers, consumers and connections also
// goes to the cluster's authWatch, which reports refusals once.
type zapLogger struct {
	s     *zap.SugaredLogger
	w     *authWatch // nil in tests
	topic string     // the "topic" field, for the authWatch
	err   error      // the error given with WithError
}

func (l zapLogger) with(f pulsarlog.Fields) zapLogger {
	args := make([]any, 0, 2*len(f))
	for k, v := range f {
		if dropField(k, v) {
			continue
		}
		if k == "topic" {
			if t, ok := v.(string); ok {
				l.topic = t
			}
		}
		args = append(args, k, v)
	}
	if len(args) > 0 {
		l.s = l.s.With(args...)
	}
	return l
}

func (l zapLogger) SubLogger(f pulsarlog.Fields) pulsarlog.Logger { return l.with(f) }
func (l zapLogger) WithFields(f pulsarlog.Fields) pulsarlog.Entry { return l.with(f) }
func (l zapLogger) WithField(name string, v any) pulsarlog.Entry {
	return l.with(pulsarlog.Fields{name: v})
}
func (l zapLogger) WithError(err error) pulsarlog.Entry {
	l.err = err
	l.s = l.s.With(zap.Error(err))
	return l
}
func (l zapLogger) Debug(args ...any) {}
func (l zapLogger) Info(args ...any) {
	msg := fmt.Sprint(args...)
	l.s.Debug(msg)
	l.note(msg)
}
func (l zapLogger) Warn(args ...any) {
	if msg := fmt.Sprint(args...); !l.note(msg) {
		l.s.Info(msg)
	}
}
func (l zapLogger) Error(args ...any) {
	if msg := fmt.Sprint(args...); !l.note(msg) {
		l.s.Warn(msg)
	}
}
func (l zapLogger) Debugf(string, ...any)            {}
func (l zapLogger) Infof(format string, args ...any) { l.s.Debugf(format, args...) }
func (l zapLogger) Warnf(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !l.note(msg) {
		l.s.Info(msg)
	}
}
func (l zapLogger) Errorf(format string, args ...any) {
	if msg := fmt.Sprintf(format, args...); !l.note(msg) {
		l.s.Warn(msg)
	}
}

// note gives msg to the cluster's authWatch. It reports whether msg was a
// refusal that the security logger reports (once), in which case the
// client's own line, repeated at every retry, goes to Debug instead.
func (l zapLogger) note(msg string) bool {
	if l.w == nil || !l.w.clientEvent(msg, l.err, l.topic) {
		return false
	}
	l.s.Debug(msg)
	return true
}

// dropField reports whether a field of the client's logs may carry message
// contents: the properties (pulsar-client-go logs them with failed sends),
// payloads and keys, and any string map, which is how properties travel.
func dropField(name string, v any) bool {
	switch strings.ToLower(name) {
	case "properties", "payload", "key", "ordering_key", "orderingkey", "value", "msg", "message":
		return true
	}
	switch v.(type) {
	case map[string]string, []byte:
		return true
	}
	return false
}

// WireClient is the cluster's binary-protocol client for the entry pipe,
// built on first use: one pool of connections (one per broker) shared by
// every cursor and producer of the entry pipe on this cluster. It
// authenticates like the pulsar-client-go client: the token is asked for
// at each connection and each challenge, client certificates are read at
// each handshake, host names are verified.
func (c *Clients) WireClient() (*wire.Client, error) {
	c.wireOnce.Do(func() {
		opts, err := c.wireOptions("wire")
		if err != nil {
			c.wireErr = err
			return
		}
		if c.m != nil {
			l := c.m.Links
			lost, silent := l.ConnectionsLost.WithLabelValues(c.Name), l.KeepAliveTimeouts.WithLabelValues(c.Name)
			failed := l.ConnectFailures.WithLabelValues(c.Name)
			for _, kind := range wire.ReconnectKinds {
				for _, cause := range wire.ReconnectCauses {
					l.Reconnects.WithLabelValues(c.Name, kind, cause) // at 0 (see ReconnectCauses)
				}
			}
			opts.Conn.Events = wire.Events{
				ConnLost: func(keepAlive bool) {
					lost.Inc()
					if keepAlive {
						silent.Inc()
					}
				},
				Reconnect:     func(kind, cause string) { l.Reconnects.WithLabelValues(c.Name, kind, cause).Inc() },
				ConnectFailed: failed.Inc,
			}
		}
		c.wire, c.wireErr = wire.NewClient(opts)
		if c.wireErr == nil && c.m != nil {
			c.m.Links.WatchUnconfirmed(c.Name, c.wire.OldestUnconfirmed)
		}
	})
	return c.wire, c.wireErr
}

// MoveClient is the cluster's binary-protocol client for subscription
// moves (wire.Client.MoveSubscription), built on first use: a pool of
// connections of its own, so that a move that cuts its connection (a step
// without an answer) never touches the entry pipe's cursors and
// producers. It authenticates as WireClient does; its links are not
// counted in the link metrics, which are the data path's.
func (c *Clients) MoveClient() (*wire.Client, error) {
	c.moveOnce.Do(func() {
		opts, err := c.wireOptions("move")
		if err != nil {
			c.moveErr = err
			return
		}
		c.move, c.moveErr = wire.NewClient(opts)
	})
	return c.move, c.moveErr
}

// VerifyClient is the cluster's binary-protocol client for the continuous
// verifier's readers (replicator/verify), built on first use: connections
// of its own, so that the entries its readers are sent (a reader's window
// at a time, whatever its rate limit lets it take) never queue in front of
// the entry pipe's on a shared connection. It authenticates as WireClient
// does; its links are not counted in the link metrics.
func (c *Clients) VerifyClient() (*wire.Client, error) {
	c.verifyOnce.Do(func() {
		opts, err := c.wireOptions("verify")
		if err != nil {
			c.verifyErr = err
			return
		}
		c.verify, c.verifyErr = wire.NewClient(opts)
	})
	return c.verify, c.verifyErr
}

// wireOptions are the cluster's binary-protocol client options: its
// service URL, keep-alive, credentials and TLS, logging under name.
func (c *Clients) wireOptions(name string) (wire.ClientOptions, error) {
	opts := wire.ClientOptions{
		ServiceURL: c.Config.ServiceURL,
		Logger:     c.Log.Named(name).With(zap.String("cluster", c.Name)),
	}
	opts.Conn.KeepAlive = c.Config.KeepAlive.Duration
	switch {
	case c.Config.Auth.HasToken():
		opts.Conn.Auth = auth.NewAuthenticationTokenFromSupplier(c.watch.Token)
	case c.Config.Auth.TLSCertFile != "":
		opts.Conn.Auth = auth.NewAuthenticationTLS(c.Config.Auth.TLSCertFile, c.Config.Auth.TLSKeyFile)
	}
	if opts.Conn.Auth != nil {
		if err := opts.Conn.Auth.Init(); err != nil {
			return opts, fmt.Errorf("cluster %s: authentication: %w", c.Name, err)
		}
	}
	if strings.HasPrefix(c.Config.ServiceURL, "pulsar+ssl://") {
		var err error
		if opts.Conn.TLS, err = clientTLS(c.Config.Auth); err != nil {
			return opts, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return opts, nil
}

// noteOpen reports the outcome of opening a producer (kind "producer") or
// a cursor ("consumer") on topic with a client whose refusals do not pass
// through zapLogger (the entry pipe's wire client): a refusal becomes one
// security event (permission denied, authentication or certificate
// refused), a success ends it. Safe for concurrent use.
func (c *Clients) NoteOpen(kind, topic string, err error) {
	if c == nil || c.watch == nil {
		return
	}
	if err == nil {
		if kind == "producer" {
			c.watch.clientEvent("Created producer", nil, topic)
		} else {
			c.watch.clientEvent("Created consumer", nil, topic)
		}
		return
	}
	c.watch.clientEvent("Failed to create "+kind, err, topic)
}
