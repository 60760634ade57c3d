package entrypath

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Which ends of a session start the next one at once (runSessions, no
// backoff, no warning) and which are failures retried after a backoff,
// as the session wraps them.
func TestRestartsAtOnce(t *testing.T) {
	terminated := &wire.BrokerError{Code: wire.TopicTerminatedError, Op: "send"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"the partition stops", nil, true},
		{"standby", errStandby, true},
		{"redelivered", errRedelivered, true},
		{"delivered ahead", errStartAhead, true},
		{"stepped down", errSteppedDown, true},
		{"another epoch", errEpochChanged, true},
		{"a refused entry skipped", errRefusedSkipped, true},
		{"standby, wrapped", fmt.Errorf("open producer: %w", errStandby), true},
		{"entries in doubt", inDoubt("send", fmt.Errorf("west: %w", wire.ErrInDoubt)), true},
		{"entries in doubt at a flush", inDoubt("flush before the producer name changes", wire.ErrInDoubt), true},
		{"a send failed", inDoubt("send", &wire.ConnError{Addr: "west", Err: wire.ErrClosed}), false},
		{"an unproven duplicate", errUnprovenDuplicate, false},
		{"awaiting a read-back", fmt.Errorf("%w: entry %s: %w", errAwaitingReadBack, "1:2:-1", errors.New("reset")), false},
		{"the producer gave up", fmt.Errorf("%w: %w", errProducerGaveUp, terminated), false},
		{"a refusal", &refusedError{reason: entryrule.SkipRejectedTooBig, err: wire.ErrTooLarge}, false},
		{"the source's schema is gone", errSourceSchemaMissing, false},
		{"open cursor failed", fmt.Errorf("open cursor: %w", errors.New("connection refused")), false},
		{"cancelled", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := restartsAtOnce(tt.err); got != tt.want {
				t.Errorf("restartsAtOnce(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
