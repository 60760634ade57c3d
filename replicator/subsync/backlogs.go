package subsync

// The follow's last step, the lag (lag.go's gauges): the backlogs here
// and on the remote, taken from the shared stats readings (moved.go) or
// read by themselves in the cluster's budget; a tracked subscription the
// remote lacks is created there (create.go).

import (
	"context"
	"fmt"
	"time"
)

// lag sets, per tracked subscription, how many messages the remote copy of
// the subscription would deliver again after a failover right now, and how
// old the snapshot behind its last update is.
func (s *Sync) lag(ctx context.Context) error {
	s.lags.at = time.Time{}
	local, remote, err := s.backlogs(ctx, s.fl.prio)
	if err != nil {
		return err
	}
	s.lags.report(s.gauges(), local, remote, s.Tracked, func(sub string) { s.createOnRemote(ctx, sub) }, s.pace.at)
	return nil
}

// lagAged moves the age gauges on without reading the backlogs.
func (s *Sync) lagAged() { s.lags.aged(s.gauges()) }

// backlogs returns the tracked subscriptions' backlogs here, from the
// follow's stats reading, and on the remote, from the remote's shared
// reading; each read by itself when there is none.
func (s *Sync) backlogs(ctx context.Context, prio float64) (local, remote map[string]int64, err error) {
	if s.fl.servlet && s.Servlet != nil {
		// Both from the brokers' servlets where they answer: one request
		// per broker for every partition (servletbacklogs.go). The local
		// broker must list the pair's cursor (it has the partition), the
		// remote every tracked subscription here (one it does not list
		// may be missing there, which the stats reading tells and the lag
		// then creates).
		if l, ok := s.Servlet.Backlogs(ctx, s.Topic, []string{s.Cursor}, lagServletAge); ok {
			local = l
			var want []string
			for sub := range l {
				if s.Tracked(sub) {
					want = append(want, sub)
				}
			}
			if s.RemoteServlet != nil && len(want) > 0 {
				if r, ok := s.RemoteServlet.Backlogs(ctx, s.Topic, want, lagServletAge); ok {
					return local, r, nil
				}
			}
		}
	}
	if local != nil {
		// From the servlet; the remote's below.
	} else if s.fl.servlet && s.Stats != nil {
		// The topic's shared reading (positions came from the servlet,
		// with no reading of this follow's own).
		r, err := s.Stats.Read(ctx, max(s.fl.maxAge, lagRemoteAge), s.aged(prio))
		if err != nil {
			return nil, nil, fmt.Errorf("local backlogs: %w", err)
		}
		local = backlogsOf(r.Partitions[s.Topic])
	} else if s.fl.reading != nil {
		local = backlogsOf(s.fl.reading)
	} else {
		if err := s.AdminRate.Take(ctx, s.aged(prio)); err != nil {
			return nil, nil, err
		}
		if local, err = s.LocalAdmin.Backlogs(ctx, s.Topic); err != nil {
			return nil, nil, fmt.Errorf("local backlogs: %w", err)
		}
	}
	if s.RemoteStats != nil {
		if r, err := s.RemoteStats.Read(ctx, max(s.fl.maxAge, lagRemoteAge), s.aged(prio)); err == nil {
			if subs, ok := r.Partitions[s.Topic]; ok {
				return local, backlogsOf(subs), nil
			}
		} else if ctx.Err() != nil {
			return nil, nil, err
		}
	}
	if remote, err = s.RemoteAdmin.Backlogs(ctx, s.Topic); err != nil {
		return nil, nil, fmt.Errorf("remote backlogs: %w", err)
	}
	return local, remote, nil
}

// lagRemoteAge is how old the remote's reading behind the lag gauges may
// be at least: the follows of an active topic, each asking for one at
// most half an interval old, made the remote's stats reading its largest
// admin cost where only updates move the copy (issue 23's bench: about
// two a second per topic). The gauge's remote half lags by as much.
const lagRemoteAge = 5 * time.Second / 2

func backlogsOf(subs map[string]SubStat) map[string]int64 {
	out := make(map[string]int64, len(subs))
	for name, st := range subs {
		out[name] = st.Backlog
	}
	return out
}
