package subsync

// Ack holes in the continuous follow (issue 39): a subscription that
// acknowledges out of order (a Shared application holding some messages
// back) has entries acknowledged past its mark-delete position. The
// update (marker.KindUpdate) carries the mark-delete position alone, so a
// consumer that fails over would receive all of them again. Where it is
// cheap, the sidecar carries them too:
//
//   - Here as the source (follow, sendAcked): with positions from the
//     brokers' positions servlet, which reports each subscription's
//     acknowledged ranges past its mark-delete position at no cost, a
//     tracked subscription with such ranges gets a signed acked marker
//     (marker.KindAcked: the ranges, in this partition's positions) when
//     they changed, at most once a snapshot interval. The admin path
//     reads no ranges: it sends none, as before.
//   - Here as the target (MarkerAt, takeAcked): the copy of the remote's
//     acked marker, signed and bound like an update (partition, origin,
//     target, subscription, its bytes), is mapped at once, in reading
//     order, onto the copies this sync read itself with a signed origin
//     (copymap.go); a list that cannot be mapped exactly is dropped. The
//     apply queue's worker then acknowledges those entries individually
//     over the binary protocol (applyAcked), where the subscription is
//     Shared or Key_Shared AUTO_SPLIT: the types whose consumers
//     acknowledge out of order and that a move can attach to beside them.
//
// Never backwards, never past what the source consumed: an individual
// acknowledgement moves nothing back, each entry acknowledged is a copy,
// proven by its signed origin, of an entry the source's subscription
// acknowledged, and the mark-delete position stays the update's business.
// The echo fence is raised to the last entry acknowledged, so that a
// mark-delete position these acknowledgements let the broker move is not
// sent back as consumed here.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// maxHoleAcks bounds the entries one acked marker has acknowledged here:
// a longer list (an application that held one message back while it
// consumed a great many after it) is dropped, the update alone goes.
const maxHoleAcks = 20_000

// Outcomes of an acked marker received (besides the lookup's: copymap.go);
// bounded metric label values.
const (
	holesApplied        = "applied"
	holesNoSubscription = "no-subscription"
	holesRefusedType    = "refused-type"
	holesFailed         = "error"
)

// holesSent is the last acked marker follow sent for a subscription.
type holesSent struct {
	md    marker.Position
	acked []marker.Range
	at    time.Time
}

// sendAcked sends, after a follow whose positions came from the servlet
// (mds, and the previous follow's prev), an acked marker for each tracked
// subscription with acknowledged ranges past its mark-delete position, when
// they changed since the last one sent and that one is an interval old.
// Only a position follow trusts for an update is used: not one put here
// by a remote's update (echo), nor one awaiting its confirming read, nor
// one new or behind the previous read's (confirm.go).
func (s *Sync) sendAcked(ctx context.Context, mds, prev map[string]marker.Position) {
	f := &s.fl
	if !f.servlet || s.passive.Load() {
		return
	}
	for name := range f.holesSent {
		if _, ok := f.acked[name]; !ok {
			delete(f.holesSent, name) // no holes now: a new one is news
		}
	}
	s.markerPos.want(len(f.acked) > 0)
	now := time.Now()
	for name, ranges := range f.acked {
		md, ok := mds[name]
		if !ok || !s.Tracked(name) || s.movedByUpdate(name, md) {
			continue
		}
		if _, waiting := f.unconfirmed[name]; waiting {
			continue
		}
		if last, ok := prev[name]; !ok || md.Compare(last) < 0 {
			continue
		}
		acked, ok := ackedRanges(md, ranges)
		if !ok {
			continue
		}
		sent, had := f.holesSent[name]
		if had && s.markerPos.same(sent.md, sent.acked, md, acked) {
			continue
		}
		if next := sent.at.Add(s.Interval); had && now.Before(next) {
			s.pace.by(next) // a follow then, should nothing else come
			continue
		}
		mk := marker.Marker{Kind: marker.KindAcked, From: s.Local, To: s.Remote, Topic: s.Topic,
			Subscription: name, Local: md, Acked: acked, Time: now.UnixMilli()}
		if err := s.send(ctx, mk); err != nil {
			s.Log.Warn("writing a subscription's acknowledged ranges failed", zap.String("subscription", name), zap.Error(err))
			continue
		}
		if f.holesSent == nil {
			f.holesSent = map[string]holesSent{}
		}
		f.holesSent[name] = holesSent{md: md, acked: acked, at: now}
		s.Metrics.MarkersWritten.WithLabelValues(s.Local, s.Remote, marker.KindAcked.String()).Inc()
		s.Log.Debug("subscription's acknowledged ranges sent", zap.String("subscription", name),
			zap.Stringer("mark_delete", md), zap.Int("ranges", len(acked)))
	}
}

// ackedRanges is what an acked marker for a subscription at md with the
// acknowledged ranges past it carries: those ranges, and before them
// every entry up to md (from marker.NoneSeen), which the update's
// position (the newest snapshot at or before md: none at all before the
// first snapshot) may leave unconsumed there although consumed here; the
// receiver acknowledges the copies it holds of those as far as they go
// (copyMap.lookup). ok is false when they are more than a marker holds.
func ackedRanges(md marker.Position, ranges []marker.Range) ([]marker.Range, bool) {
	md.Batch = -1
	if len(ranges)+1 > marker.MaxAckedRanges {
		return nil, false
	}
	out := make([]marker.Range, 0, len(ranges)+1)
	out = append(out, marker.Range{From: marker.NoneSeen, To: md})
	return append(out, ranges...), true
}

// markerSet remembers where the last markers read from the local
// partition stand (any kind, any writer), so that follow can tell a
// change of a subscription's acknowledged ranges that only markers made
// from one that consumers made. Applications do not receive markers: the
// broker's entry filter acknowledges them for their subscriptions as it
// skips them, which extends or joins the ranges. Without this, each acked
// marker, acknowledged so by an attached application, changed the ranges
// and sent the next one a second later, for as long as a message was held
// back (seen in e2e TestFollowHolesServlet: 178 markers in 90 s on two
// partitions with nothing else changing). Safe for concurrent use: the
// entry path notes, follow asks.
//
// While a tracked subscription of the partition has ranges (want) it
// remembers up to maxMarkerPos markers; otherwise the last
// markersUnwanted, so that the markers read just before the first ranges
// appeared are known when the filter acknowledges them (seen in e2e
// TestFollowHolesServlet under load: a snapshot request read 0.2 s
// before the first acked marker went, acknowledged after it, sent a
// second).
type markerSet struct {
	wanted atomic.Bool
	mu     sync.Mutex
	pos    []marker.Position // ascending (the order read), at most maxMarkerPos
}

// maxMarkerPos bounds the markers remembered (24 bytes each): a minute
// or two of a busy partition's snapshot markers, hours of a quiet one's
// acked markers. One forgotten only costs an acked marker sent once more.
// markersUnwanted (384 bytes a partition) is a few seconds of a busy
// partition's markers, written both ways at a snapshot interval of 1 s.
const (
	maxMarkerPos    = 256
	markersUnwanted = 16
)

// want has the set remember up to maxMarkerPos markers from now on
// (on), or only the last markersUnwanted (off).
func (m *markerSet) want(on bool) {
	if m.wanted.Swap(on) && !on {
		m.mu.Lock()
		if n := len(m.pos); n > markersUnwanted {
			m.pos = slices.Clone(m.pos[n-markersUnwanted:])
		}
		m.mu.Unlock()
	}
}

func (m *markerSet) note(p marker.Position) {
	limit := markersUnwanted
	if m.wanted.Load() {
		limit = maxMarkerPos
	}
	p.Batch = -1
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.pos); n > 0 && p.Compare(m.pos[n-1]) <= 0 {
		return // read again
	}
	if len(m.pos) >= limit {
		drop := len(m.pos) - limit + 1
		copy(m.pos, m.pos[drop:])
		m.pos = m.pos[:len(m.pos)-drop]
	}
	m.pos = append(m.pos, p)
}

// has reports whether p is a marker's entry (m.mu held).
func (m *markerSet) has(p marker.Position) bool {
	_, ok := slices.BinarySearchFunc(m.pos, p, marker.Position.Compare)
	return ok
}

// same reports whether a subscription at md with the ranges acked holds
// the same data entries acknowledged as at md0 with acked0: they differ
// by markers' entries only.
func (m *markerSet) same(md0 marker.Position, acked0 []marker.Range, md marker.Position, acked []marker.Range) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, b := m.canon(md0, acked0), m.canon(md, acked)
	return slices.Equal(a, b)
}

// canon is the data entries of a state (the mark-delete position, then
// its ranges) as ranges without markers' entries at their ends, joined
// across gaps of markers' entries; the mark-delete position is the first
// range, from marker.NoneSeen (m.mu held).
func (m *markerSet) canon(md marker.Position, acked []marker.Range) []marker.Range {
	out := make([]marker.Range, 0, len(acked)+1)
	for _, r := range append([]marker.Range{{From: marker.NoneSeen, To: md}}, acked...) {
		for r.To.Compare(r.From) > 0 && m.has(r.To) {
			r.To.Entry--
		}
		for {
			first := marker.Position{Ledger: r.From.Ledger, Entry: r.From.Entry + 1, Batch: -1}
			if first.Compare(r.To) > 0 || !m.has(first) {
				break
			}
			r.From = first
		}
		if r.From.Compare(r.To) >= 0 && r.From != marker.NoneSeen {
			continue // markers' entries only
		}
		if n := len(out); n > 0 && m.markersOnly(out[n-1].To, r.From) {
			out[n-1].To = r.To
			continue
		}
		out = append(out, r)
	}
	return out
}

// markersOnly reports whether the entries after to up to and including
// from (one ledger) are all markers' (m.mu held).
func (m *markerSet) markersOnly(to, from marker.Position) bool {
	if to.Ledger != from.Ledger || from.Entry-to.Entry > maxMarkerPos {
		return false
	}
	for e := to.Entry + 1; e <= from.Entry; e++ {
		if !m.has(marker.Position{Ledger: to.Ledger, Entry: e, Batch: -1}) {
			return false
		}
	}
	return true
}

// ackedKey is the gate's key of sub's acked markers: their origins are
// ordered apart from its updates'.
func ackedKey(sub string) string { return "\x00acked\x00" + sub }

// takeAcked takes the copy of the remote's acked marker mk, read here
// with its signed origin at origin (the intake checked topic, writer,
// addressee and signature): refused as an update is (replayed, stale),
// else mapped at once onto the copies read before it and queued. It
// returns the reason of a refusal.
func (s *Sync) takeAcked(mk marker.Marker, origin marker.Position) (refused string) {
	if reason := s.gate.update(ackedKey(mk.Subscription), origin, mk.Time); reason != "" {
		return reason
	}
	ids, why := s.copies.lookup(mk.Acked, mk.Local, maxHoleAcks)
	if why != "" {
		s.holesOutcome(why)
		s.Log.Debug("a subscription's acknowledged ranges not applied: no exact list of their copies here",
			zap.String("subscription", mk.Subscription), zap.String("reason", why), zap.Int("ranges", len(mk.Acked)))
		return ""
	}
	s.queue.putHoles(mk.Subscription, ids)
	return ""
}

// applyAcked acknowledges ids, the copies here of entries the remote's
// sub acknowledged, one by one over the binary protocol, where sub exists
// and its type is one a move attaches to beside its consumers with
// individual acknowledgements (Shared, Key_Shared AUTO_SPLIT). The apply
// queue's worker calls it.
func (s *Sync) applyAcked(ctx context.Context, sub string, ids []marker.Position) {
	outcome := s.moveHoles(ctx, sub, ids)
	s.holesOutcome(outcome)
	if outcome != holesApplied {
		s.Log.Debug("a subscription's acknowledged ranges not applied", zap.String("subscription", sub), zap.String("outcome", outcome))
	}
}

func (s *Sync) moveHoles(ctx context.Context, sub string, ids []marker.Position) string {
	if s.mover() == nil {
		return holesRefusedType // no protocol route: nothing moves one entry alone
	}
	tg := s.targetOf(ctx, sub, time.Now())
	switch t := tg.t; {
	case !t.Exists:
		return holesNoSubscription // a move would create it
	case !holesServable(t.State), t.Busy && t.Consumers > 0:
		return holesRefusedType
	}
	last := ids[len(ids)-1]
	begun := s.Applied.begin(s.Local, s.Topic, sub, last)
	mv, err := s.wm.holes(ctx, s.Topic, sub, tg.t.State, ids)
	switch {
	case errors.Is(err, subscription.ErrBusy):
		s.Applied.end(begun, false, marker.Position{})
		tg.t.Busy = true
		if !tg.retry {
			tg.retry, tg.retryAt = true, time.Now().Add(refusedRefresh)
		}
		return holesRefusedType
	case err != nil:
		s.Applied.endUnsure(begun)
		if ctx.Err() == nil {
			s.Log.Warn("acknowledging a subscription's ack holes failed", zap.String("subscription", sub), zap.Error(err))
		}
		return holesFailed
	}
	s.Applied.end(begun, true, last)
	tg.t.MarkDelete, tg.t.MarkDeleteKnown = mv.After, true
	return holesApplied
}

// holesServable reports whether individual acknowledgements can be sent
// to a subscription of the state st by a move's consumer: Shared, or
// Key_Shared with AUTO_SPLIT known (subscription's rule: a move never
// attaches as a type the applications may not use, nor beside a STICKY
// one). Failover and Exclusive applications seldom acknowledge out of
// order, and a move attaches to Failover with a cumulative
// acknowledgement only.
func holesServable(st subscription.State) bool {
	return st.Type == subscription.Shared || st.Type == subscription.KeyShared && st.Mode == subscription.AutoSplit
}

func (s *Sync) holesOutcome(outcome string) {
	if s.Metrics != nil && s.Metrics.HolesReceived != nil {
		s.Metrics.HolesReceived.WithLabelValues(s.Local, outcome).Inc()
	}
}

// holes acknowledges ids on sub, and nothing else, with a consumer of
// the move attached as st's type (wire.Move.OnlyIndividually): entries at
// or before the mark-delete position are left out by the move.
func (w *wireMover) holes(ctx context.Context, topic, sub string, st subscription.State, ids []marker.Position) (subscription.Moved, error) {
	typ, ok := wireTypes[st.Type]
	if !ok || typ == wire.Failover {
		return subscription.Moved{}, errors.New("no individual acknowledgements for type " + st.Type.String())
	}
	m := wire.Move{Topic: topic, Subscription: sub, Type: typ, KeySharedAllowOutOfOrder: st.AllowOutOfOrder,
		ConsumerName: w.name, OnlyIndividually: true, Individually: make([]wire.MessageID, len(ids))}
	for i, p := range ids {
		m.Individually[i] = wire.EntryID(uint64(p.Ledger), uint64(p.Entry))
	}
	res, err := w.f.MoveSubscription(ctx, m)
	if errors.Is(err, wire.ErrSubscriptionBusy) {
		return subscription.Moved{}, errors.Join(subscription.ErrBusy, err)
	}
	if err != nil {
		return subscription.Moved{}, err
	}
	mv := subscription.Moved{After: wirePosition(res.MarkDelete), HasBefore: res.HasBefore}
	if res.HasBefore {
		mv.Before = wirePosition(res.Before)
	}
	return mv, nil
}
