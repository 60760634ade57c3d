package wiretest

import (
	"context"
	"errors"
	"net"
	"sync"
)

// memListener accepts connections over net.Pipe, dialled by dial.
type memListener struct {
	addr  string
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

func (l *memListener) dial(ctx context.Context, addr string) (net.Conn, error) {
	refused := &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: errors.New("connection refused")}
	if l == nil || addr != l.addr {
		return nil, refused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, refused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
