package subsync

// Creating on the remote a tracked subscription it lacks (the lag's
// reading finds it missing, backlogs.go), at its earliest message, the
// creation fenced in the echo fence (fence.go) for the moment the broker
// shows it at the remote's newest entry (confirm.go).

import (
	"context"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// lastEntryReader is what the creation fence (createOnRemote) asks of the
// remote's admin API besides subscription.Admin: the partition's newest
// entry.
type lastEntryReader interface {
	LastEntry(ctx context.Context, topic string) (marker.Position, error)
}

// createOnRemote creates a tracked subscription that the remote lacks
// there, at its earliest message: until a snapshot covers it no update
// can say where it should be, and a consumer failing over to a missing
// subscription would start at its initial position (Latest by default in
// every client) and skip everything not consumed here. Earliest delivers
// again instead. A subscription once seen on the remote is not created
// again (its deletion there is the operator's).
func (s *Sync) createOnRemote(ctx context.Context, sub string) {
	if s.RemoteSubs == nil || s.lags.onRemote[sub] {
		return
	}
	earliest := marker.Position{Ledger: -1, Entry: -1, Batch: -1}
	// The broker makes it at the remote's newest entry first and resets it
	// after (confirm.go): the other direction's follow must not take a
	// position read meanwhile for its consumers'. Until the creation ends
	// every position counts as put there by the sidecar; after, every
	// position up to the remote's newest entry then, where the creation
	// could have shown it.
	begun := s.Applied.beginCreate(s.Remote, s.Topic, sub)
	if err := s.RemoteSubs.Create(ctx, s.Topic, sub, earliest); err != nil {
		s.Applied.end(begun, false, marker.Position{})
		s.Log.Warn("creating a subscription on the remote failed", zap.String("subscription", sub), zap.Error(err))
		return
	}
	upTo := fenceAll
	if le, ok := s.RemoteSubs.(lastEntryReader); ok {
		if p, err := le.LastEntry(ctx, s.Topic); err == nil {
			upTo = p
		} else {
			s.Log.Warn("reading the remote's newest entry after creating a subscription there failed: its consumers' progress is not followed back until an update moves it",
				zap.String("subscription", sub), zap.Error(err))
		}
	}
	s.Applied.end(begun, true, upTo)
	s.lags.seen(sub)
	s.Metrics.SubsCreatedRemote.WithLabelValues(s.Local, s.Remote).Inc()
	s.Log.Info("subscription created on the remote at its earliest message: no snapshot covers it yet",
		zap.String("subscription", sub))
}
