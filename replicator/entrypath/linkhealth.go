package entrypath

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// linkHealth keeps a partition of the entry pipe out of
// connected_partitions while its producer's or cursor's link is down
// (reconnecting underneath) or silent: the entry pipe counts a partition
// from the producer's open to its close, and the wire clients reconnect
// by themselves meanwhile, so without this a cut or half-open link left
// the gauge saying "connected". Safe for concurrent use.
type linkHealth struct {
	mu       sync.Mutex
	gauge    prometheus.Gauge // the pair's connected_partitions; nil: none
	open     bool             // a producer is open (counted by the entry pipe)
	prodDown bool
	consDown bool
	docked   bool // this partition is taken off the gauge
}

// update applies f to the state and moves the gauge to match.
func (h *linkHealth) update(f func(h *linkHealth)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
	want := h.open && (h.prodDown || h.consDown)
	if want == h.docked || h.gauge == nil {
		return
	}
	h.docked = want
	if want {
		h.gauge.Dec()
	} else {
		h.gauge.Inc()
	}
}
