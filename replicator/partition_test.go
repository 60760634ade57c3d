package replicator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The partition tests run Run or session against the fakes in
// fakes_test.go, inside synctest bubbles: synctest.Wait says when the
// pipeline is idle, and backoff sleeps take no real time.

func TestPartitionForwardsInOrderAndSkips(t *testing.T) {
	for _, maxPending := range []int{1, 4, 100} {
		t.Run(fmt.Sprintf("maxPending=%d", maxPending), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				testForwardsInOrderAndSkips(t, maxPending)
			})
		})
	}
}

func testForwardsInOrderAndSkips(t *testing.T, maxPending int) {
	w := newFakeWorld()
	ms := make([]*fakeMsg, 12)
	for i := range ms {
		ms[i] = msg(i)
	}
	ms[1].props[marker.Property] = "request"
	ms[2].key, ms[2].orderingKey, ms[2].props["app"] = "k2", "ok2", "v2"
	ms[3].props[PropOriginCluster] = "north"
	ms[4].props[PropReplicateTo] = "north"
	ms[5].props[PropReplicateTo] = "north, west"
	ms[6].replicated = true
	ms[7].payload = []byte{}
	ms[8].payload, ms[8].null = nil, true
	ms[10].props[PropReplicateTo] = ""
	forwarded := []int{0, 2, 5, 7, 8, 9, 11}
	skipped := map[string]int{skipMarker: 1, skipRemoteOrigin: 1, skipReplicateTo: 2, skipBrokerReplica: 1}
	var wantBytes int
	for _, i := range forwarded {
		wantBytes += len(ms[i].payload)
	}
	w.publish(ms...)

	p := newTestPartition(t, w, maxPending)
	r := startRun(t, p, w)
	waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == len(ms) })
	if got := gauge(p.m.Connected, "east", "west"); got != 1 {
		t.Errorf("connected while running = %v, want 1", got)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("Run() = %v, want nil on a clean stop", err)
	}

	if got, want := w.sent(-1), names(forwarded...); !slices.Equal(got, want) {
		t.Errorf("sent %v, want %v (in order, once each)", got, want)
	}
	acks := w.acks()
	var fwdAcks []string
	for _, a := range acks {
		if slices.Contains(names(forwarded...), a) {
			fwdAcks = append(fwdAcks, a)
		}
	}
	if want := names(forwarded...); !slices.Equal(fwdAcks, want) {
		t.Errorf("forwarded messages acknowledged in order %v, want %v", fwdAcks, want)
	}
	slices.Sort(acks)
	allNames := names(span(0, len(ms))...)
	slices.Sort(allNames)
	if !slices.Equal(acks, allNames) {
		t.Errorf("acknowledged %v, want every message once", acks)
	}
	w.checkInvariants(t)
	w.checkClosed(t)
	if s, tg := w.opens(); s != 1 || tg != 1 {
		t.Errorf("opened %d cursors and %d producers, want 1 and 1", s, tg)
	}
	if got, want := w.remoteHas(), names(forwarded...); !slices.Equal(got, want) {
		t.Errorf("remote holds %v, want %v", got, want)
	}

	// What the remote got is a faithful copy.
	for _, s := range w.sendLog() {
		var src *fakeMsg
		for _, m := range ms {
			if positionOf(m.id).String() == s.pm.Properties[PropOriginID] {
				src = m
			}
		}
		if (s.pm.Payload == nil) != src.null || string(s.pm.Payload) != string(src.payload) {
			t.Errorf("%s: payload %#v, want %#v", s.name, s.pm.Payload, src.payload)
		}
		if s.pm.Key != src.key || s.pm.OrderingKey != src.orderingKey {
			t.Errorf("%s: key %q / %q, want %q / %q", s.name, s.pm.Key, s.pm.OrderingKey, src.key, src.orderingKey)
		}
		for k, v := range src.props {
			if s.pm.Properties[k] != v {
				t.Errorf("%s: property %q = %q, want %q", s.name, k, s.pm.Properties[k], v)
			}
		}
	}

	m := p.m
	if got := counter(m.Messages, "east", "west"); got != float64(len(forwarded)) {
		t.Errorf("replicated messages = %v, want %d", got, len(forwarded))
	}
	if got := counter(m.Bytes, "east", "west"); got != float64(wantBytes) {
		t.Errorf("replicated bytes = %v, want %d", got, wantBytes)
	}
	if w.copiedCalls != 1 {
		t.Errorf("copiedSince called %d times, want once, when the producer opened", w.copiedCalls)
	}
	skipped[skipAlreadyCopied] = 0
	for reason, want := range skipped {
		if got := counter(m.Skipped, "east", "west", reason); got != float64(want) {
			t.Errorf("skipped{reason=%q} = %v, want %d", reason, got, want)
		}
	}
	for _, c := range []struct {
		name string
		got  float64
	}{
		{"send errors", counter(m.SendErrors, "east", "west")},
		{"unproven duplicates", counter(m.DupsUnproven, "east", "west")},
		{"connected after stop", gauge(m.Connected, "east", "west")},
	} {
		if c.got != 0 {
			t.Errorf("%s = %v, want 0", c.name, c.got)
		}
	}
}

// A "duplicate" receipt is not proof that the message is on the remote:
// the partition does not acknowledge it, ends the session, and the next
// one acknowledges it only if it reads the copy back from the remote.
func TestPartitionDuplicateReceiptNeedsProof(t *testing.T) {
	tests := []struct {
		name     string
		onRemote bool // whether m3 really is on the remote
	}{
		{name: "copy on the remote (a resend after a reconnect)", onRemote: true},
		{name: "no copy (a later message set the broker's record)", onRemote: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				for i := range 6 {
					w.publish(msg(i))
				}
				w.outcome = func(name string, attempt int) outcome {
					if name == "m3" && attempt == 1 {
						return outcome{dup: true, stored: tt.onRemote}
					}
					return outcome{}
				}
				g := w.hold("m3", 1) // until m4 and m5 went out behind it
				p := newTestPartition(t, w, 100)
				r := startRun(t, p, w)
				synctest.Wait()
				g.release()
				waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
				if err := r.stop(); err != nil {
					t.Fatalf("Run() = %v", err)
				}
				if got := counter(p.m.DupsUnproven, "east", "west"); got != 1 {
					t.Errorf("unproven duplicates = %v, want 1", got)
				}
				if _, tg := w.opens(); tg != 2 {
					t.Errorf("opened %d producers, want 2 (the duplicate receipt ends the first session)", tg)
				}
				// m4 and m5 went out behind m3 in the first session and are
				// on the remote: the second session finds them there.
				want := names(0, 1, 2, 4, 5)
				if tt.onRemote {
					want = names(0, 1, 2, 3, 4, 5)
				}
				if got := w.sent(0); !slices.Equal(got, names(span(0, 6)...)) {
					t.Errorf("first session sent %v, want m0..m5", got)
				}
				if got := w.sent(1); tt.onRemote != (len(got) == 0) {
					t.Errorf("second session sent %v, want m3 again only if it is not on the remote", got)
				}
				got := w.remoteHas()
				slices.Sort(got)
				if !tt.onRemote {
					want = names(span(0, 6)...)
				}
				if !slices.Equal(got, want) {
					t.Errorf("remote holds %v, want %v once each", got, want)
				}
				w.checkInvariants(t)
				w.checkClosed(t)
			})
		})
	}
}

// The remote's deduplication keeps the highest sequence id it persisted
// for the producer name. Whatever the origin positions (the entry id and
// batch index widths that an id derived from the position once overflowed,
// the largest ledger ids) and whatever the remote's record, a restarted
// partition's new messages are never taken for duplicates.
func TestPartitionRestartNeverBelowRemoteRecord(t *testing.T) {
	maxLedger := int64(1<<63 - 1)
	positions := []*fakeMsg{
		msgAt(10, 131_070, -1, "a"), msgAt(10, 131_071, -1, "b"),
		msgAt(10, 131_072, -1, "c"), msgAt(10, 131_073, -1, "d"),
		msgAt(11, 5, 1022, "e"), msgAt(11, 5, 1023, "f"),
		msgAt(11, 5, 1024, "g"), msgAt(11, 5, 1025, "h"),
		msgAt(1<<36-1, 0, -1, "i"), msgAt(1<<36, 0, -1, "j"),
		msgAt(maxLedger, 1<<40, 0, "k"), msgAt(maxLedger, 1<<40, 1, "l"),
	}
	tests := []struct {
		name   string
		record int64 // the remote's record for the producer name before the first run
	}{
		{name: "no record", record: -1},
		{name: "small record", record: 7},
		{name: "record far ahead of any position", record: 1 << 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				w.dedup, w.dedupLast = true, tt.record
				// Three runs (restarts) over the positions, four at a time.
				for run := range 3 {
					w.publish(positions[4*run : 4*run+4]...)
					p := newTestPartition(t, w, 100)
					r := startRun(t, p, w)
					waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 4*run+4 })
					if err := r.stop(); err != nil {
						t.Fatalf("run %d: Run() = %v", run, err)
					}
					if got := counter(p.m.DupsUnproven, "east", "west"); got != 0 {
						t.Errorf("run %d: %v sends answered as duplicates, want 0", run, got)
					}
				}
				var want []string
				for _, m := range positions {
					want = append(want, w.names[positionOf(m.id).String()])
				}
				if got := w.remoteHas(); !slices.Equal(got, want) {
					t.Errorf("remote holds %v, want %v (in order, none dropped)", got, want)
				}
				w.checkInvariants(t)
				w.checkClosed(t)
			})
		})
	}
}

func TestPartitionSendErrorRewinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom: connection reset")
		w := newFakeWorld()
		for i := range 6 {
			w.publish(msg(i))
		}
		// A connection reset fails m3 the first time, and m4 and m5 sent
		// behind it.
		w.outcome = func(name string, attempt int) outcome {
			if attempt == 1 && (name == "m3" || name == "m4" || name == "m5") {
				return outcome{err: boom}
			}
			return outcome{}
		}
		g := w.hold("m3", 1)
		p := newTestPartition(t, w, 100)
		r := startRun(t, p, w)

		synctest.Wait()
		if got, want := w.sent(0), names(span(0, 6)...); !slices.Equal(got, want) {
			t.Fatalf("first session sent %v, want %v", got, want)
		}
		g.release()

		// The session ends; Run is backing off before the next one.
		synctest.Wait()
		if got, want := w.acks(), names(0, 1, 2); !slices.Equal(got, want) {
			t.Errorf("after m3 failed: acknowledged %v, want %v (nothing from m3 on)", got, want)
		}
		if s, tg := w.opens(); s != 1 || tg != 1 {
			t.Errorf("after m3 failed: opened %d cursors and %d producers, want 1 and 1 (backing off)", s, tg)
		}
		w.checkClosed(t)
		if got := counter(p.m.SendErrors, "east", "west"); got != 1 {
			t.Errorf("send errors = %v, want 1", got)
		}

		// The next session resends from m3.
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if got, want := w.acks(), names(span(0, 6)...); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v", got, want)
		}
		if got, want := w.sent(1), names(3, 4, 5); !slices.Equal(got, want) {
			t.Errorf("second session sent %v, want %v", got, want)
		}
		if s, tg := w.opens(); s != 2 || tg != 2 {
			t.Errorf("opened %d cursors and %d producers, want 2 and 2", s, tg)
		}
		if got, want := w.remoteHas(), names(span(0, 6)...); !slices.Equal(got, want) {
			t.Errorf("remote holds %v, want %v", got, want)
		}
		if got := counter(p.m.SendErrors, "east", "west"); got != 1 {
			t.Errorf("send errors = %v, want 1 (the errors behind the first do not count)", got)
		}
		if got := counter(p.m.Messages, "east", "west"); got != 6 {
			t.Errorf("replicated messages = %v, want 6", got)
		}
		w.checkInvariants(t)
		w.checkClosed(t)
	})
}

func TestSessionSendErrorIsReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		w := newFakeWorld()
		for i := range 4 {
			w.publish(msg(i))
		}
		w.outcome = func(name string, _ int) outcome {
			if name == "m2" {
				return outcome{err: boom}
			}
			return outcome{}
		}
		p := newTestPartition(t, w, 10)
		progress, err := p.session(context.Background())
		if !errors.Is(err, boom) {
			t.Fatalf("session() error = %v, want one wrapping %v", err, boom)
		}
		if !strings.Contains(err.Error(), "send") {
			t.Errorf("session() error = %q, want it to say what failed (send)", err)
		}
		if !progress {
			t.Error("session() progress = false, want true (m0 and m1 were replicated)")
		}
		if got, want := w.acks(), names(0, 1); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v", got, want)
		}
		w.checkInvariants(t)
		w.checkClosed(t)
	})
}

func TestPartitionSkipsWhatRemoteHas(t *testing.T) {
	tests := []struct {
		name      string
		preload   []string // on the remote before the run
		copied    func(from marker.Position) (copySet, error)
		wantSent  []string
		wantSkips int
	}{
		{name: "remote empty", wantSent: names(span(0, 6)...)},
		{name: "crash after m2 was confirmed", preload: names(0, 1, 2),
			wantSent: names(3, 4, 5), wantSkips: 3},
		{name: "everything copied", preload: names(span(0, 6)...), wantSkips: 6},
		{name: "a gap: m2 failed while m3 landed", preload: names(0, 1, 3),
			wantSent: names(2, 4, 5), wantSkips: 3},
		{name: "copiedSince fails", preload: names(0, 1, 2),
			copied:   func(marker.Position) (copySet, error) { return copySet{}, errors.New("admin down") },
			wantSent: names(span(0, 6)...)},
		{name: "copiedSince fails after reading some", preload: names(0, 1, 2),
			copied: func(marker.Position) (copySet, error) {
				return copySet{{Ledger: 10, Entry: 1, Batch: -1}: {}, {Ledger: 10, Entry: 2, Batch: -1}: {}}, errors.New("admin down")
			},
			wantSent: names(0, 3, 4, 5), wantSkips: 2},
		{name: "batch index counts", preload: names(0, 1, 2),
			copied: func(marker.Position) (copySet, error) {
				return copySet{{Ledger: 10, Entry: 0, Batch: -1}: {}, {Ledger: 10, Entry: 1, Batch: 0}: {}, {Ledger: 10, Entry: 2, Batch: -1}: {}}, nil
			},
			wantSent: names(1, 3, 4, 5), wantSkips: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				for i := range 6 {
					w.publish(msg(i))
				}
				w.preload(tt.preload...)
				w.copiedFunc = tt.copied
				p := newTestPartition(t, w, 10)
				r := startRun(t, p, w)
				waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
				if err := r.stop(); err != nil {
					t.Fatalf("Run() = %v", err)
				}
				if got := w.sent(-1); !slices.Equal(got, tt.wantSent) {
					t.Errorf("sent %v, want %v", got, tt.wantSent)
				}
				// Copies found on the remote are acknowledged when read,
				// possibly before earlier messages in flight.
				acks := w.acks()
				slices.Sort(acks)
				if want := names(span(0, 6)...); !slices.Equal(acks, want) {
					t.Errorf("acknowledged %v, want %v", acks, want)
				}
				if got := counter(p.m.Skipped, "east", "west", skipAlreadyCopied); got != float64(tt.wantSkips) {
					t.Errorf("skipped{reason=%q} = %v, want %d", skipAlreadyCopied, got, tt.wantSkips)
				}
				if got := counter(p.m.Messages, "east", "west"); got != float64(len(tt.wantSent)) {
					t.Errorf("replicated messages = %v, want %d", got, len(tt.wantSent))
				}
				w.checkInvariants(t)
				w.checkClosed(t)
			})
		})
	}
}

// A send that fails while a later one still reaches the remote (the
// client fails a pending message, for instance on a broker's NotAllowed
// error, while a send made before the partition noticed lands) leaves a
// gap on the remote. The next session must not take the later copy as
// proof of the earlier message.
func TestPartitionNoLossWhenALaterSendLanded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		for i := range 6 {
			w.publish(msg(i))
		}
		// m3 times out in the client; m4 and m5, still pending, are resent
		// on reconnect and persisted before the producer is closed.
		w.outcome = func(name string, attempt int) outcome {
			if name == "m3" && attempt == 1 {
				return outcome{err: pulsar.ErrSendTimeout}
			}
			return outcome{}
		}
		g := w.hold("m3", 1)
		p := newTestPartition(t, w, 10)
		r := startRun(t, p, w)
		synctest.Wait()
		g.release()
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if got := w.remoteHas(); !slices.Contains(got, "m3") {
			t.Errorf("remote holds %v: m3 lost (acknowledged as %q without ever being copied)", got, skipAlreadyCopied)
		}
	})
}

// A producer given up on while closing (the drain timeout passed) may
// still write its pending messages when it gets through. The next
// producer must wait for it, so that its read-back of the remote sees
// those late writes: otherwise they land as duplicates after the new
// producer's copies.
func TestPartitionWaitsForAbandonedProducer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom: broker error")
		w := newFakeWorld()
		for i := range 6 {
			w.publish(msg(i))
		}
		w.outcome = func(name string, attempt int) outcome {
			switch {
			case attempt > 1:
				return outcome{}
			case name == "m2":
				return outcome{err: boom}
			case name == "m3" || name == "m4" || name == "m5":
				return outcome{late: true}
			}
			return outcome{}
		}
		g := w.hold("m2", 1)
		w.closeHold = &gate{ch: make(chan struct{})}
		p := newTestPartition(t, w, 100)
		r := startRun(t, p, w)
		synctest.Wait()
		g.release()

		// m2 failed; the producer is stuck closing past the drain timeout,
		// and the next session waits for it.
		time.Sleep(2 * p.drainTimeout)
		synctest.Wait()
		if _, tg := w.opens(); tg != 1 {
			t.Fatalf("opened %d producers while the first was still closing, want 1", tg)
		}
		w.closeHold.release()
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		// The late writes are on the remote before the second producer
		// opened: it finds them and sends only m2.
		if got, want := w.remoteHas(), names(0, 1, 3, 4, 5, 2); !slices.Equal(got, want) {
			t.Errorf("remote holds %v, want %v (each once)", got, want)
		}
		if got, want := w.sent(1), names(2); !slices.Equal(got, want) {
			t.Errorf("second producer sent %v, want %v", got, want)
		}
		w.checkInvariants(t)
		w.checkClosed(t)
	})
}

// The cursor's client reconnects (or the broker redelivers) while sends
// are in flight: messages come again that are in flight or on the remote.
// They are neither sent twice nor acknowledged twice.
func TestPartitionCursorRedelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		for i := range 6 {
			w.publish(msg(i))
		}
		g := w.hold("m3", 1)
		p := newTestPartition(t, w, 100)
		r := startRun(t, p, w)
		synctest.Wait()
		if got := w.sent(0); !slices.Equal(got, names(span(0, 6)...)) {
			t.Fatalf("sent %v before the redelivery, want m0..m5", got)
		}
		// m0..m2 acknowledged, m3..m5 in flight (m4, m5 stored, their
		// callbacks queued behind m3's): the cursor redelivers from m3.
		w.source(0).rewind()
		synctest.Wait()
		g.release()
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 6 })
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		got := w.remoteHas()
		slices.Sort(got)
		if want := names(span(0, 6)...); !slices.Equal(got, want) {
			t.Errorf("remote holds %v, want %v once each", got, want)
		}
		w.checkInvariants(t)
		w.checkClosed(t)
	})
}

// A message the remote can never take (too large, invalid) stops the
// partition by default (on_refused: stop): nothing from it on is
// acknowledged, one error is logged, partitions_stopped says so. With
// on_refused: skip it is counted and skipped.
func TestPartitionRemoteRefusesForGood(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		reason string
	}{
		{"too large", pulsar.ErrMessageTooLarge, skipRejectedTooBig},
		{"too large, wrapped", fmt.Errorf("send: %w", pulsar.ErrMessageTooLarge), skipRejectedTooBig},
		{"too large for the entry pipe", fmt.Errorf("x: %w", wire.ErrTooLarge), skipRejectedTooBig},
		{"invalid", pulsar.ErrInvalidMessage, skipRejectedInvalid},
		{"invalid, joined", errors.Join(pulsar.ErrInvalidMessage, errors.New("message is nil")), skipRejectedInvalid},
	}
	for _, tt := range tests {
		for _, skip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/skip=%v", tt.name, skip), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newFakeWorld()
					for i := range 5 {
						w.publish(msg(i))
					}
					w.outcome = func(name string, _ int) outcome {
						if name == "m2" {
							return outcome{err: tt.err}
						}
						return outcome{}
					}
					p := newTestPartition(t, w, 10)
					p.skipRefused = skip
					r := startRun(t, p, w)
					if skip {
						waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 5 })
					} else {
						waitFor(t, "the partition stopped", func() bool {
							return gauge(p.m.PartitionsStopped, "east", "west", tt.reason) == 1
						})
					}
					time.Sleep(time.Minute) // a stopped partition stays stopped
					synctest.Wait()
					wantAcks := names(span(0, 5)...)
					if !skip {
						wantAcks = names(0, 1)
					}
					if got := w.acks(); !slices.Equal(got, wantAcks) {
						t.Errorf("acknowledged %v, want %v", got, wantAcks)
					}
					if s, tg := w.opens(); s != 1 || tg != 1 {
						t.Errorf("opened %d cursors and %d producers, want 1 and 1 (no retry)", s, tg)
					}
					if err := r.stop(); err != nil {
						t.Fatalf("Run() = %v", err)
					}
					if got := gauge(p.m.PartitionsStopped, "east", "west", tt.reason); got != 0 {
						t.Errorf("partitions_stopped after Run returned = %v, want 0", got)
					}
					wantSkips := 0.0
					if skip {
						wantSkips = 1
					}
					if got := counter(p.m.Skipped, "east", "west", tt.reason); got != wantSkips {
						t.Errorf("skipped{reason=%q} = %v, want %v", tt.reason, got, wantSkips)
					}
					w.checkInvariants(t)
					w.checkClosed(t)
				})
			})
		}
	}
}

func TestPartitionOpenFailures(t *testing.T) {
	remoteDown := errors.New("remote down")
	localDown := errors.New("local down")
	tests := []struct {
		name     string
		setup    func(w *fakeWorld)
		wantErr  error
		wantText string
		opens    func(w *fakeWorld) int
	}{
		{
			name:     "producer",
			setup:    func(w *fakeWorld) { w.openTargetErr = remoteDown },
			wantErr:  remoteDown,
			wantText: "open producer",
			opens:    func(w *fakeWorld) int { _, tg := w.opens(); return tg },
		},
		{
			name:     "cursor",
			setup:    func(w *fakeWorld) { w.openSourceErr = localDown },
			wantErr:  localDown,
			wantText: "open cursor",
			opens:    func(w *fakeWorld) int { s, _ := w.opens(); return s },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/session", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				w.publish(msg(0))
				tt.setup(w)
				p := newTestPartition(t, w, 10)
				progress, err := p.session(context.Background())
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantText) {
					t.Errorf("session() error = %v, want %q wrapping %v", err, tt.wantText, tt.wantErr)
				}
				if progress {
					t.Error("session() progress = true, want false")
				}
				if got := w.acks(); len(got) != 0 {
					t.Errorf("acknowledged %v, want nothing", got)
				}
				w.checkClosed(t)
			})
		})
		t.Run(tt.name+"/Run retries", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeWorld()
				w.publish(msg(0))
				tt.setup(w)
				p := newTestPartition(t, w, 10)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := p.Run(ctx); err != nil {
					t.Errorf("Run() = %v, want nil when ctx ends", err)
				}
				// Five seconds of fake time with a 200ms backoff doubling
				// each time: a handful of attempts, not one, not a hot loop.
				if n := tt.opens(w); n < 2 || n > 8 {
					t.Errorf("%d open attempts, want a few (backoff between them)", n)
				}
				if got := w.acks(); len(got) != 0 {
					t.Errorf("acknowledged %v, want nothing", got)
				}
				if got := w.sent(-1); len(got) != 0 {
					t.Errorf("sent %v, want nothing", got)
				}
				w.checkClosed(t)
			})
		})
	}
}

func TestPartitionCleanStopDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		for i := range 5 {
			w.publish(msg(i))
		}
		var gates []*gate
		for i := 1; i < 5; i++ {
			gates = append(gates, w.hold(fmt.Sprintf("m%d", i), 1))
		}
		p := newTestPartition(t, w, 10)
		r := startRun(t, p, w)

		synctest.Wait()
		if got, want := w.sent(-1), names(span(0, 5)...); !slices.Equal(got, want) {
			t.Fatalf("sent %v, want %v", got, want)
		}
		if got, want := w.acks(), names(0); !slices.Equal(got, want) {
			t.Fatalf("acknowledged %v, want %v", got, want)
		}

		r.cancel()
		synctest.Wait()
		// Stopping: the producer is being flushed; m1..m4 are in flight.
		if n := w.target(0).flushCount(); n < 1 {
			t.Errorf("%d flushes, want a drain flush", n)
		}
		if got, want := w.acks(), names(0); !slices.Equal(got, want) {
			t.Errorf("while draining: acknowledged %v, want %v", got, want)
		}
		for _, g := range gates {
			g.release()
		}
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v, want nil on a clean stop", err)
		}
		if got, want := w.acks(), names(span(0, 5)...); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v (in-flight messages confirmed during the drain)", got, want)
		}
		if got := counter(p.m.Messages, "east", "west"); got != 5 {
			t.Errorf("replicated messages = %v, want 5", got)
		}
		if got := gauge(p.m.Connected, "east", "west"); got != 0 {
			t.Errorf("connected after stop = %v, want 0", got)
		}
		w.checkInvariants(t)
		w.checkClosed(t)
	})
}

func TestPartitionStopWithStuckRemote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		for i := range 3 {
			w.publish(msg(i))
		}
		g := w.hold("m1", 1)
		p := newTestPartition(t, w, 10)
		p.drainTimeout = 2 * time.Second
		r := startRun(t, p, w)
		synctest.Wait()

		start := time.Now()
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v, want nil", err)
		}
		if d := time.Since(start); d > p.drainTimeout {
			t.Errorf("stopping took %v (fake clock), want at most the drain timeout %v", d, p.drainTimeout)
		}
		if got, want := w.acks(), names(0); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v", got, want)
		}
		if !w.source(0).isClosedNow() {
			t.Error("cursor not closed")
		}
		// The remote answers late: nothing more is acknowledged.
		g.release()
		synctest.Wait()
		if got, want := w.acks(), names(0); !slices.Equal(got, want) {
			t.Errorf("after a late answer: acknowledged %v, want %v", got, want)
		}
		w.checkInvariants(t)
	})
}

func (s *fakeSource) isClosedNow() bool {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.isClosed
}

func TestPartitionStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.publish(msg(0), msg(1))
		p := newTestPartition(t, w, 10)
		r := startRun(t, p, w)
		waitFor(t, "m0 and m1 acknowledged", func() bool { return len(w.acks()) == 2 })

		// Becoming a standby while holding the producer ends the session
		// at once (the producer's name must be free for the active
		// instance); the next session waits as a plain standby.
		w.setActive(false)
		w.publish(msg(2), msg(3))
		synctest.Wait()
		if got, want := w.sent(-1), names(0, 1); !slices.Equal(got, want) {
			t.Errorf("standby: sent %v, want %v", got, want)
		}
		if got, want := w.acks(), names(0, 1); !slices.Equal(got, want) {
			t.Errorf("standby: acknowledged %v, want %v", got, want)
		}
		if !w.target(0).isClosed() {
			t.Error("standby: producer still open")
		}
		if got := gauge(p.m.Connected, "east", "west"); got != 0 {
			t.Errorf("standby: connected = %v, want 0", got)
		}
		if _, tg := w.opens(); tg != 1 {
			t.Errorf("standby: opened %d producers, want 1", tg)
		}

		// Active again: the broker redelivers what the standby dropped.
		w.setActive(true)
		waitFor(t, "every message acknowledged", func() bool { return len(w.acks()) == 4 })
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if got, want := w.sent(-1), names(0, 1, 2, 3); !slices.Equal(got, want) {
			t.Errorf("sent %v, want %v", got, want)
		}
		if got, want := w.acks(), names(0, 1, 2, 3); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v", got, want)
		}
		if s, tg := w.opens(); s != 2 || tg != 2 {
			t.Errorf("opened %d cursors and %d producers, want 2 and 2 (one session each side of the standby spell)", s, tg)
		}
		w.checkInvariants(t)
		w.checkClosed(t)
	})
}

func TestPartitionStandbyReleasesProducerWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		w.publish(msg(0))
		p := newTestPartition(t, w, 10)
		r := startRun(t, p, w)
		waitFor(t, "m0 acknowledged", func() bool { return len(w.acks()) == 1 })

		w.setActive(false)
		synctest.Wait()
		time.Sleep(5 * time.Second) // fake clock: room for a timer-based release
		synctest.Wait()
		if !w.target(0).isClosed() {
			t.Error("standby with no traffic: producer still open")
		}
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
	})
}

func TestSessionReportsReceiveError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		closed := errors.New("consumer closed")
		w := newFakeWorld()
		w.recvErr = closed
		p := newTestPartition(t, w, 10)
		if _, err := p.session(context.Background()); !errors.Is(err, closed) {
			t.Errorf("session() error = %v, want one wrapping %v", err, closed)
		}

		// Run backs off between sessions like after any other failure.
		w.sourceOpenLimit = 50 // a hot loop blocks here instead of spinning
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run() = %v", err)
		}
		if s, _ := w.opens(); s > 5 {
			t.Errorf("%d cursors opened in one second (fake clock), want a few (backoff)", s)
		}
	})
}

func TestPartitionRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Two partitions of one pair share the limiters.
		msgRate, byteRate := newLimiter(1000), newLimiter(20_000)
		const n = 300
		var worlds []*fakeWorld
		var runners []*runner
		for range 2 {
			w := newFakeWorld()
			for i := range n {
				w.publish(msg(i))
			}
			p := newTestPartition(t, w, 16)
			p.msgRate, p.byteRate = msgRate, byteRate
			worlds = append(worlds, w)
			runners = append(runners, startRun(t, p, w))
		}
		for i, w := range worlds {
			waitFor(t, fmt.Sprintf("partition %d acknowledged everything", i), func() bool { return len(w.acks()) == n })
		}
		for i, r := range runners {
			if err := r.stop(); err != nil {
				t.Errorf("partition %d: Run() = %v", i, err)
			}
			if got, want := worlds[i].acks(), names(span(0, n)...); !slices.Equal(got, want) {
				t.Errorf("partition %d: acknowledged %d messages out of order or incomplete", i, len(got))
			}
			worlds[i].checkInvariants(t)
		}
	})
}

func TestPartitionStopWhileRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld()
		for i := range 5 {
			w.publish(msg(i))
		}
		p := newTestPartition(t, w, 10)
		p.msgRate = newLimiter(0.001) // burst 1: one message, then a very long wait
		r := startRun(t, p, w)
		waitFor(t, "m0 acknowledged", func() bool { return len(w.acks()) == 1 })
		synctest.Wait()
		if err := r.stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if got, want := w.acks(), names(0); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v", got, want)
		}
		w.checkClosed(t)
	})
}
