package wire

import (
	"bytes"
	"net"
	"os"
	"testing"
	"time"
)

// linkConn is a net.Conn on a simulated clock: each write takes its size
// over rate, and fails if it would end past the write deadline.
type linkConn struct {
	net.Conn
	clock    time.Time
	rate     float64 // bytes per second
	deadline time.Time
	got      bytes.Buffer
	writes   int
	// piece is what was written under the current deadline; maxPiece the
	// most under any one.
	piece, maxPiece int
}

func (c *linkConn) now() time.Time { return c.clock }

func (c *linkConn) SetWriteDeadline(t time.Time) error { c.deadline, c.piece = t, 0; return nil }

func (c *linkConn) Write(b []byte) (int, error) {
	end := c.clock.Add(time.Duration(float64(len(b)) / c.rate * float64(time.Second)))
	if !c.deadline.IsZero() && end.After(c.deadline) {
		return 0, os.ErrDeadlineExceeded
	}
	c.clock = end
	c.writes++
	c.piece += len(b)
	c.maxPiece = max(c.maxPiece, c.piece)
	return c.got.Write(b)
}

// A queued batch the link needs far longer than the timeout for goes out
// whole, in order, as long as each piece (at most chunk bytes under one
// deadline) makes it in time; a link that cannot carry one piece in time
// still fails.
func TestWriteBuffersDeadlinePerPiece(t *testing.T) {
	var want []byte
	var segs net.Buffers
	for i, size := range []int{100, 3 << 20, 10, 700 << 10, 1 << 20, 5} { // 5.7 MiB
		seg := bytes.Repeat([]byte{byte(i + 1)}, size)
		segs = append(segs, seg)
		want = append(want, seg...)
	}
	tests := []struct {
		name  string
		rate  float64
		chunk int
		ok    bool
	}{
		// 1 MiB/s and a 2 s timeout: the whole batch takes 5.7 s.
		{"slow link, pieces in time", 1 << 20, 1 << 20, true},
		{"one deadline for the whole batch", 1 << 20, len(want), false},
		{"link slower than a piece per timeout", 256 << 10, 1 << 20, false},
		{"pieces smaller than segments", 1 << 20, 1000, true},
		{"segments cut to fill each piece", 1 << 20, 300 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &linkConn{clock: time.Unix(1000, 0), rate: tt.rate}
			in := append(net.Buffers(nil), segs...)
			err := writeBuffers(c, in, tt.chunk, 2*time.Second, c.now)
			if (err == nil) != tt.ok {
				t.Fatalf("error %v, want ok %v (%d bytes written in %s)", err, tt.ok, c.got.Len(), c.clock.Sub(time.Unix(1000, 0)))
			}
			if tt.ok && !bytes.Equal(c.got.Bytes(), want) {
				t.Fatalf("wrote %d bytes, not the %d queued in order", c.got.Len(), len(want))
			}
			if c.maxPiece > tt.chunk {
				t.Fatalf("%d bytes written under one deadline, want at most %d", c.maxPiece, tt.chunk)
			}
		})
	}
}
