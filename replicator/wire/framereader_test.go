package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// chunkReader returns what it holds in pieces of random sizes, as a socket
// returns what has arrived; readv fills a and then b from the same bytes,
// counting its calls.
type chunkReader struct {
	b     []byte
	rng   *rand.Rand
	reads int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := copy(p, c.b[:min(len(c.b), 1+c.rng.IntN(96<<10))])
	c.b = c.b[n:]
	return n, nil
}

func (c *chunkReader) readv(a, b []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := min(len(c.b), 1+c.rng.IntN(160<<10))
	k := copy(a, c.b[:n])
	k += copy(b, c.b[k:n])
	c.b = c.b[k:]
	return k, nil
}

// frameStream is frames of every kind the reader tells apart: without
// payload, with small and large payloads, at and around ownAbove.
func frameStream(ownAbove int) (stream []byte, frames [][]byte) {
	cmd := AppendCommand(nil, &Message{ConsumerID: 1, MessageID: EntryID(1, 2)})
	md := MetadataBuilder{ProducerName: "p", SequenceID: 1, PublishTime: 2}.Append(nil)
	for i, size := range []int{0, 10, 1000, ownAbove - 40, ownAbove - 20, ownAbove, ownAbove + 1, 40 << 10, 128 << 10, 300 << 10, 5, 128 << 10, 0} {
		var f []byte
		if size == 0 {
			f = AppendFrame(nil, AppendCommand(nil, &Ping{}))
		} else {
			f = AppendPayloadFrame(nil, cmd, md, bytes.Repeat([]byte{byte(i + 1)}, size))
		}
		frames = append(frames, f)
		stream = append(stream, f...)
	}
	return stream, frames
}

// TestFrameReader: frames read through the connection's frameReader,
// from a reader returning random pieces, with and without vectored reads,
// are the frames written, in order, ending in io.EOF; a large frame lies
// in a buffer of its own, a small one not. With vectored reads, a stream
// of large frames takes one read per frame (and one for the first head).
func TestFrameReader(t *testing.T) {
	const own = 16 << 10
	stream, want := frameStream(own)
	for _, vectored := range []bool{false, true} {
		for seed := range uint64(20) {
			cr := &chunkReader{b: bytes.Clone(stream), rng: rand.New(rand.NewPCG(seed, 1))}
			var rv func(a, b []byte) (int, error)
			if vectored {
				rv = cr.readv
			}
			fr := newFrameReader(cr, rv, 32<<10, 1<<20, own)
			for i, w := range want {
				f, fb, err := fr.next()
				if err != nil {
					t.Fatalf("vectored %v, seed %d, frame %d: %v", vectored, seed, i, err)
				}
				wf, err := ParseFrame(w[4:])
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(f.Command, wf.Command) || !bytes.Equal(f.Metadata, wf.Metadata) || !bytes.Equal(f.Payload, wf.Payload) {
					t.Fatalf("vectored %v, seed %d, frame %d differs from the one written", vectored, seed, i)
				}
				if (fb != nil) != (len(w)-4 > own) {
					t.Fatalf("vectored %v, frame %d of %d bytes: own buffer %v", vectored, i, len(w)-4, fb != nil)
				}
			}
			if _, _, err := fr.next(); !errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("vectored %v, seed %d: after the last frame %v, want io.EOF", vectored, seed, err)
			}
		}
	}
	// Large frames from a reader that has everything: one readv each.
	var big []byte
	for range 10 {
		big = append(big, AppendPayloadFrame(nil, AppendCommand(nil, &Ping{}), nil, make([]byte, 128<<10))...)
	}
	cr := &chunkReader{b: big, rng: rand.New(rand.NewPCG(1, 1))}
	all := func(a, b []byte) (int, error) {
		cr.reads++
		k := copy(a, cr.b)
		k += copy(b, cr.b[k:])
		cr.b = cr.b[k:]
		return k, nil
	}
	fr := newFrameReader(readerFunc(func(p []byte) (int, error) { cr.reads++; n := copy(p, cr.b); cr.b = cr.b[n:]; return n, nil }), all, 32<<10, 1<<20, own)
	for range 10 {
		if _, _, err := fr.next(); err != nil {
			t.Fatal(err)
		}
	}
	if cr.reads > 11 {
		t.Fatalf("%d reads for 10 frames of 128 KiB, want one each and one for the first head at most", cr.reads)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestFrameReaderTruncated: a stream cut inside a frame's head or body is
// io.ErrUnexpectedEOF; a frame larger than the limit is ErrMalformed.
func TestFrameReaderTruncated(t *testing.T) {
	stream, _ := frameStream(16 << 10)
	for _, cut := range []int{2, 10, 20 << 10, 100 << 10} {
		for _, vectored := range []bool{false, true} {
			cr := &chunkReader{b: bytes.Clone(stream[:len(stream)-cut]), rng: rand.New(rand.NewPCG(uint64(cut), 2))}
			var rv func(a, b []byte) (int, error)
			if vectored {
				rv = cr.readv
			}
			fr := newFrameReader(cr, rv, 32<<10, 1<<20, 16<<10)
			var err error
			for err == nil {
				_, _, err = fr.next()
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut %d bytes before the end, vectored %v: %v, want io.ErrUnexpectedEOF", cut, vectored, err)
			}
		}
	}
	// Another error than the end, inside a frame's head, is told as it is.
	reset := errors.New("connection reset")
	head := readerFunc(func(p []byte) (int, error) { return copy(p, stream[:2]), reset })
	if _, _, err := newFrameReader(head, nil, 32<<10, 1<<20, 16<<10).next(); !errors.Is(err, reset) {
		t.Errorf("a reset inside a frame's head: %v, want it as it is", err)
	}
	fr := newFrameReader(bytes.NewReader(stream), nil, 32<<10, 1000, 16<<10)
	for {
		if _, _, err := fr.next(); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("a frame beyond the limit: %v, want ErrMalformed", err)
			}
			break
		}
	}
}

// TestVectoredRead: the readv of a TCP connection fills its first buffer
// and then its second, and reports the end of the stream as io.EOF.
func TestVectoredRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := make([]byte, 200<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write(want)
		c.Close()
	}()
	nc, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rv := vectoredRead(nc)
	if rv == nil {
		t.Skip("no vectored reads here")
	}
	var got []byte
	a, b := make([]byte, 100<<10), make([]byte, 32<<10)
	for {
		n, err := rv(a, b)
		got = append(got, a[:min(n, len(a))]...)
		if n > len(a) {
			got = append(got, b[:n-len(a)]...)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
}
