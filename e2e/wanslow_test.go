package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e/wan"
)

// TestWANSlowLink: the link to far delivers at 1 % of its normal speed for
// a minute under load (the normal speed being its busiest second in the
// last minute): sends wait, nothing may time out into a loss, a duplicate
// or a reorder, and replication catches up once the link is whole.
//
// Not in make test yet (E2E_WAN_SLOW=1 runs it): in 1 of its 3 runs so
// far (CI, 2026-12-03 07:43) far held 2,540 copies twice and out of order
// despite deduplication, after the producer's send timeout fired on the
// slow link and a duplicate receipt sent the session back to the
// read-back: data of the abandoned connection, still buffered in the
// link, landed after the new session had numbered the same entries
// differently. Issue 13 tracks it; the test is the reproduction.
func TestWANSlowLink(t *testing.T) {
	if os.Getenv("E2E_WAN_SLOW") == "" {
		t.Skip("E2E_WAN_SLOW unset: the slow link still duplicates and reorders now and then (see the comment)")
	}
	runWANFault(t, wanFault{name: "1 % speed for 60 s", load: 75 * time.Second, rate: 400,
		fault: func(t *testing.T, links wan.Links, _ *Sidecar) {
			links.Slow(0.01, time.Minute)
			time.Sleep(time.Minute)
		}})
}
