package wire_test

import (
	"crypto/tls"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire/wiretest"
)

// init gives the package's internal tests wiretest's brokers (see
// wire.FakeBrokers): wiretest imports wire, so only this external test
// package can import it.
func init() {
	wire.FakeBrokers.New = func(t *testing.T) wire.FakeBroker { return linked{wiretest.New(t)} }
	wire.FakeBrokers.NewTLS = func(t *testing.T) (wire.FakeBroker, *tls.Config) {
		b, cfg := wiretest.NewTLS(t)
		return linked{b}, cfg
	}
	wire.FakeBrokers.NewMem = func(t *testing.T) wire.FakeBroker { return linked{wiretest.NewMem(t)} }
}

// linked is a wiretest broker seen through wire.FakeBroker.
type linked struct{ *wiretest.Broker }

func (l linked) Handle(h func(wire.FakeConn, wire.Command, wire.Frame) bool) {
	l.Broker.Handle(func(c *wiretest.Conn, cmd wire.Command, f wire.Frame) bool { return h(c, cmd, f) })
}

func (l linked) OnConn(f func(wire.FakeConn)) {
	l.Broker.OnConn(func(c *wiretest.Conn) { f(c) })
}
