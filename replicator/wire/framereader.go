package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// frameReader reads a connection's frames through one buffer of its own.
// A frame of up to ownAbove bytes is parsed where it lies in the buffer
// (valid until the next frame is read). A larger one is read into a
// buffer of its own (framePool), which a MESSAGE's entry keeps; where the
// connection reads vectored (readv, a plain TCP connection), the rest of
// such a frame and what follows it come in one system call, into the
// frame's buffer and then the read buffer. Through bufio the rest came in
// one read, and the next frame's head in another: for a drain of 128 KiB
// entries, a third of the read system calls, each of which also has the
// kernel acknowledge the bytes taken to the sender.
type frameReader struct {
	r io.Reader
	// readv reads into a and then b, at most len(a)+len(b) bytes, as one
	// read would; nil where the connection cannot.
	readv func(a, b []byte) (int, error)
	// buf[lo:hi] is read and not yet taken.
	buf            []byte
	lo, hi         int
	maxFrame, ownA int
}

// newFrameReader reads frames from r (through readv when not nil) with a
// buffer of size bytes, at least ownAbove and a frame's head more.
func newFrameReader(r io.Reader, readv func(a, b []byte) (int, error), size, maxFrame, ownAbove int) *frameReader {
	return &frameReader{r: r, readv: readv, buf: make([]byte, max(size, ownAbove+4)), maxFrame: maxFrame, ownA: ownAbove}
}

// next reads the next frame. A frame above ownAbove lies in fb (see
// readFrame); any other aliases the reader's buffer, until the next call.
func (fr *frameReader) next() (f Frame, fb *frameBuf, err error) {
	if err := fr.fill(4); err != nil {
		return Frame{}, nil, err
	}
	size := binary.BigEndian.Uint32(fr.buf[fr.lo:])
	if size < 4 {
		return Frame{}, nil, malformed("frame size %d is smaller than its command size field", size)
	}
	if uint64(size) > uint64(fr.maxFrame) {
		return Frame{}, nil, malformed("frame size %d exceeds the limit %d", size, fr.maxFrame)
	}
	n := int(size)
	if n <= fr.ownA {
		if err := fr.fill(4 + n); err != nil {
			return Frame{}, nil, frameReadErr(n, err)
		}
		b := fr.buf[fr.lo+4 : fr.lo+4+n]
		fr.lo += 4 + n
		f, err = ParseFrame(b)
		return f, nil, err
	}
	fb = frames.get(n)
	got := copy(fb.b, fr.buf[fr.lo+4:fr.hi])
	fr.lo += 4 + got
	if fr.lo == fr.hi {
		fr.lo, fr.hi = 0, 0
	}
	for got < n {
		// Here the frame took everything buffered: the buffer is empty.
		var k int
		if fr.readv != nil {
			k, err = fr.readv(fb.b[got:], fr.buf)
			if k > n-got {
				fr.hi = k - (n - got)
				k = n - got
			}
		} else {
			k, err = fr.r.Read(fb.b[got:])
		}
		got += k
		if err != nil && got < n {
			frames.put(fb, fb.gen.Load())
			return Frame{}, nil, frameReadErr(n, err)
		}
	}
	f, err = ParseFrame(fb.b[:n])
	return f, fb, err
}

// frameReadErr is the error of a frame of n bytes whose read failed.
func frameReadErr(n int, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read frame of %d bytes: %w", n, err)
}

// fill reads until n bytes are buffered (n <= len(buf)), moving what is
// buffered to the buffer's start when the rest would not fit. io.EOF
// when nothing at all was buffered; io.ErrUnexpectedEOF when some was.
func (fr *frameReader) fill(n int) error {
	if fr.hi-fr.lo >= n {
		return nil
	}
	if fr.lo+n > len(fr.buf) {
		fr.hi = copy(fr.buf, fr.buf[fr.lo:fr.hi])
		fr.lo = 0
	}
	for fr.hi-fr.lo < n {
		k, err := fr.r.Read(fr.buf[fr.hi:])
		fr.hi += k
		if err != nil && fr.hi-fr.lo < n {
			if errors.Is(err, io.EOF) && fr.hi > fr.lo {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}
