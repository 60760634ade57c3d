package snapshot

import (
	"slices"
	"time"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// The unexported methods below hold the protocol; the exported ones in
// snapshot.go take m.mu around them.

func (m *Machine) data(pos marker.Position, origin string, originPos marker.Position) []marker.Marker {
	m.dataSince, m.retries = true, 0
	// Only third origins' watermarks are ever used. Tracking no other
	// keeps seen bounded by the config, whatever origin properties
	// producers put on messages.
	if origin != "" && slices.Contains(m.cfg.ThirdOrigins, origin) {
		if q, ok := m.seen[origin]; !ok || originPos.Compare(q) > 0 {
			m.seen[origin] = originPos
		}
	}
	// The newest request this message completes: the older ones are
	// then dropped by complete.
	for i := len(m.pending) - 1; i >= 0; i-- {
		if p := m.pending[i]; p.responded && m.met(p.need) {
			return m.complete(i, pos)
		}
	}
	return nil
}

func (m *Machine) learn(c string, p marker.Position) {
	if !slices.Contains(m.cfg.ThirdOrigins, c) {
		return
	}
	if q, ok := m.seen[c]; !ok || p.Compare(q) > 0 {
		m.seen[c] = p
	}
}

func (m *Machine) unknown() []string {
	if m.cfg.Fresh {
		return nil
	}
	var out []string
	for _, c := range m.cfg.ThirdOrigins {
		if _, ok := m.seen[c]; !ok {
			out = append(out, c)
		}
	}
	return out
}

func (m *Machine) marker(pos marker.Position, mk marker.Marker) []marker.Marker {
	if mk.Topic != m.cfg.Topic {
		return nil
	}
	fromRemote := mk.From == m.cfg.Remote && mk.To == m.cfg.Local
	switch mk.Kind {
	case marker.KindSnapshotRequest:
		if fromRemote {
			return m.respond(pos, mk)
		}
	case marker.KindSnapshotResponse:
		if fromRemote {
			return m.responded(pos, mk)
		}
	case marker.KindSnapshot:
		if mk.From == m.cfg.Local && mk.To == m.cfg.Remote {
			if i := slices.Index(m.unread, mk.SnapshotID); i >= 0 {
				// Completed here and cached then: not again (it may have
				// been pruned or evicted since).
				m.unread = slices.Delete(m.unread, i, i+1)
				return nil
			}
			m.cache.add(Snapshot{ID: mk.SnapshotID, Local: mk.Local, Remote: mk.Remote, Time: time.UnixMilli(mk.Time)})
		}
	}
	return nil
}

// respond answers Remote's request read at pos, unless a third origin's
// watermark is unknown.
func (m *Machine) respond(pos marker.Position, req marker.Marker) []marker.Marker {
	var wm map[string]marker.Position
	for _, c := range m.cfg.ThirdOrigins {
		q, ok := m.seen[c]
		if !ok {
			if !m.cfg.Fresh {
				m.stats.Unanswered++
				return nil
			}
			q = marker.NoneSeen // nothing of c at or before pos
		}
		if wm == nil {
			wm = make(map[string]marker.Position, len(m.cfg.ThirdOrigins))
		}
		wm[c] = q
	}
	return []marker.Marker{{
		Kind:       marker.KindSnapshotResponse,
		From:       m.cfg.Local,
		To:         m.cfg.Remote,
		Topic:      m.cfg.Topic,
		SnapshotID: req.SnapshotID,
		Local:      pos,
		Watermarks: wm,
		Time:       m.cfg.Now().UnixMilli(),
	}}
}

// responded takes Remote's response read at pos: the pending request
// completes now if the watermarks it names are met, else at a later Data.
func (m *Machine) responded(pos marker.Position, resp marker.Marker) []marker.Marker {
	i := slices.IndexFunc(m.pending, func(p *request) bool { return p.id == resp.SnapshotID })
	if i < 0 || m.pending[i].responded {
		// Unknown, dropped, or late past lateFor; or a second answer to the same request
		// (Remote re-read it after a restart): the first one stands.
		return nil
	}
	p := m.pending[i]
	p.responded, p.at, p.remote = true, pos, resp.Local
	for _, c := range m.cfg.ThirdOrigins {
		if q, ok := resp.Watermarks[c]; ok {
			if p.need == nil {
				p.need = make(map[string]marker.Position, len(m.cfg.ThirdOrigins))
			}
			p.need[c] = q
		}
	}
	if m.met(p.need) {
		return m.complete(i, pos)
	}
	return nil
}

// met reports whether every origin in need has been seen up to its
// watermark.
func (m *Machine) met(need map[string]marker.Position) bool {
	for c, q := range need {
		if q.Ledger < 0 {
			continue // NoneSeen: the responder held nothing of c
		}
		if s, ok := m.seen[c]; !ok || s.Compare(q) < 0 {
			return false
		}
	}
	return true
}

// complete ends pending request i, whose watermarks are met at pos, and
// returns its snapshot marker. The requests pending before it are dropped:
// answered in order, any of them would complete at pos or later with an
// earlier remote position, a snapshot this one makes useless.
func (m *Machine) complete(i int, pos marker.Position) []marker.Marker {
	p := m.pending[i]
	m.pending = slices.Delete(m.pending, 0, i+1)
	m.retries = 0
	// A cursor that rewinds (a consumer redelivering after a reconnect)
	// could report data before the response's position; the snapshot is
	// never earlier than the response.
	if pos.Compare(p.at) < 0 {
		pos = p.at
	}
	now := m.cfg.Now()
	m.stats.Completed++
	if p.late {
		m.stats.Late++
	}
	m.stats.LastRTT = now.Sub(p.started)
	mk := marker.Marker{
		Kind:       marker.KindSnapshot,
		From:       m.cfg.Local,
		To:         m.cfg.Remote,
		Topic:      m.cfg.Topic,
		SnapshotID: p.id,
		Local:      pos,
		Remote:     p.remote,
		Time:       now.UnixMilli(),
	}
	// Cached now rather than when the marker is read back: the pair
	// holds whether or not the marker is ever written (the marker is how
	// a restart, or another instance, learns it), and waiting for the
	// write and the read back held every follow a round of the partition
	// longer than Pulsar's, which caches at completion.
	m.cache.add(Snapshot{ID: mk.SnapshotID, Local: mk.Local, Remote: mk.Remote, Time: time.UnixMilli(mk.Time)})
	if m.unread = append(m.unread, mk.SnapshotID); len(m.unread) > maxUnread {
		m.unread = slices.Delete(m.unread, 0, len(m.unread)-maxUnread)
	}
	return []marker.Marker{mk}
}

func (m *Machine) tick(linkUp bool) []marker.Marker {
	now := m.cfg.Now()
	timedOut := 0
	for _, p := range m.pending {
		if !p.late && now.Sub(p.started) >= m.cfg.Timeout {
			p.late = true
			timedOut++
		}
	}
	m.pending = slices.DeleteFunc(m.pending, func(p *request) bool { return p.late && now.Sub(p.started) >= lateFor*m.cfg.Timeout })
	if late := len(m.pending) - m.live(); late > maxLate {
		// The oldest late ones go: a response comes in order, so the
		// newest is the first to come.
		drop := late - maxLate
		m.pending = slices.DeleteFunc(m.pending, func(p *request) bool {
			if p.late && drop > 0 {
				drop--
				return true
			}
			return false
		})
	}
	if timedOut > 0 {
		m.stats.TimedOut += int64(timedOut)
		// The data the newest request was to cover is not covered yet
		// unless a request started after it is still in time.
		if m.live() == 0 && m.retries < maxRetries {
			m.retries++
			m.dataSince = true
		}
	}
	if !linkUp || !m.dataSince || m.live() >= m.cfg.MaxPending ||
		(m.requested && now.Sub(m.lastRequest) < m.cfg.Interval) {
		return nil
	}
	id := m.cfg.NewID()
	m.pending = append(m.pending, &request{id: id, started: now})
	m.requested, m.lastRequest, m.dataSince = true, now, false
	m.stats.Started++
	return []marker.Marker{{
		Kind:       marker.KindSnapshotRequest,
		From:       m.cfg.Local,
		To:         m.cfg.Remote,
		Topic:      m.cfg.Topic,
		SnapshotID: id,
		Time:       now.UnixMilli(),
	}}
}

// live counts the pending requests that have not timed out.
func (m *Machine) live() int {
	n := 0
	for _, p := range m.pending {
		if !p.late {
			n++
		}
	}
	return n
}
