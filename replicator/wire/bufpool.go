package wire

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// frameBuf is the buffer a large frame was read into (readFrame, owned),
// recycled through framePool when its entry is released (see
// ConsumerOptions.RecycleOnRelease). gen counts its lives: an entry holds
// the generation it was read in, so releasing an entry twice recycles the
// buffer once, never while a later entry uses it.
type frameBuf struct {
	b   []byte
	gen atomic.Uint64
}

// framePool holds recycled frame buffers by size class: four classes per
// power of two (1, 1.25, 1.5, 1.75 times), so a buffer wastes less than a
// fifth of itself. Pooling large buffers spares the runtime a large
// allocation per entry (zeroed, swept, returned to the OS and faulted in
// again), which costs more than the entry's copy from the socket.
type framePool struct {
	classes [64 * 4]sync.Pool
}

// sizeClass returns the class of n (> 0) and the capacity of its buffers.
// Sizes up to 4 bytes have classes 0 to 2, one per power of two, below
// the first quarter class (8, for 5 bytes): numbered k*4, the 4-byte
// class was 8 too, and a 4-byte buffer could be handed out for 5 bytes.
func sizeClass(n int) (class, size int) {
	k := bits.Len(uint(n - 1)) // 2^(k-1) < n <= 2^k
	if k < 3 {
		return k, 1 << k
	}
	base := 1 << (k - 1)
	step := base / 4
	q := (n - base + step - 1) / step // 1..4 quarters above base
	return (k-1)*4 + q - 1, base + q*step
}

var frames framePool

// get returns a buffer of length n.
func (p *framePool) get(n int) *frameBuf {
	class, size := sizeClass(n)
	if fb, ok := p.classes[class].Get().(*frameBuf); ok {
		fb.b = fb.b[:n]
		return fb
	}
	return &frameBuf{b: make([]byte, n, size)}
}

// put recycles fb if gen is still its generation (the first release of the
// entry that holds it).
func (p *framePool) put(fb *frameBuf, gen uint64) {
	if fb == nil || !fb.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	class, _ := sizeClass(cap(fb.b))
	p.classes[class].Put(fb)
}
