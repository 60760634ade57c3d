package entrypath

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The two permanent refusals that retried for ever (issue 21, item 4): a
// target topic that was terminated, and a schema version the source no
// longer serves.

// schemaNotFound is the source broker's answer to the fetch of a schema
// version it does not have (the schema deleted).
var schemaNotFound = &wire.BrokerError{Op: "get schema of persistent://t/ns/x", Code: wire.TopicNotFound, Message: "Topic not found or no-schema"}

func terminatedOn(op string) error {
	return &wire.BrokerError{Op: op, Code: wire.TopicTerminatedError, Message: "Topic was already terminated"}
}

// refuseFrom2 is a fake receipt: entries from e2 on refused with err.
func refuseFrom2(err error) func(name string) (bool, error) {
	return func(name string) (bool, error) {
		if name >= "e2" {
			return false, err
		}
		return false, nil
	}
}

// stopLines are the error lines that say the partition stops.
func stopLines(logs *observer.ObservedLogs) []observer.LoggedEntry {
	return logs.Filter(func(e observer.LoggedEntry) bool {
		return e.Level == zapcore.ErrorLevel && strings.Contains(e.Message, "this partition stops here")
	}).All()
}

// A terminated target topic takes no message ever again: the partition
// stops at the first entry it refuses whatever on_refused says (skip
// would acknowledge every entry from there on, unsent), with one error
// line and partitions_stopped{reason="target-terminated"}, and is not
// retried. Before, the session ended with an ordinary error, retried every
// 10 s for ever with partitions_stopped at 0. The broker says it on a send
// (SEND_ERROR), or when the producer opens (the broker closes a
// terminated topic's producers, and refuses them after): the wire
// producer then gives up reconnecting, and its next Send fails with it.
func TestEntryPipeTargetTerminated(t *testing.T) {
	tests := []struct {
		name  string
		setup func(w *fakeEntryWorld)
	}{
		{"a send refused", func(w *fakeEntryWorld) {
			w.receipt = refuseFrom2(terminatedOn("send to t"))
		}},
		{"the producer gave up reconnecting: Send fails", func(w *fakeEntryWorld) {
			w.sendErr = map[string]error{"e2": terminatedOn("create producer on t")}
		}},
		{"the link lost, then the next producer refused", func(w *fakeEntryWorld) {
			w.receipt = func(name string) (bool, error) { // w.mu held
				if name < "e2" {
					return false, nil
				}
				w.openErr = terminatedOn("create producer on t")
				return false, &wire.ConnError{Addr: "west:6650", Err: io.EOF}
			}
		}},
	}
	for _, tt := range tests {
		for _, skip := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/skip=%v", tt.name, skip), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newFakeEntryWorld()
					w.add(2, nil)
					w.add(1, nil)
					w.add(1, nil)
					tt.setup(w)
					p := newTestEntryPartition(t, w)
					core, logs := observer.New(zap.InfoLevel)
					p.log = zap.New(core)
					p.skipRefused = skip
					stop := runEntryPartition(t, p)
					defer stop() // also when waitFor gives up
					waitFor(t, "the partition stopped", func() bool {
						return metricstest.Gauge(p.m.PartitionsStopped, "east", "west", stopTargetTerminated) == 1
					})
					w.mu.Lock()
					opens := w.opens
					w.mu.Unlock()
					time.Sleep(time.Minute)
					synctest.Wait()
					acks, remote, _ := w.snapshot()
					w.mu.Lock()
					reopened := w.opens - opens
					w.mu.Unlock()
					stop()
					slices.Sort(acks)
					if !slices.Equal(acks, []string{"e0", "e1"}) {
						t.Errorf("acknowledged %v, want e0 e1 (stopped at e2)", acks)
					}
					if slices.Contains(remote, "e2") || slices.Contains(remote, "e3") {
						t.Errorf("remote holds %v, want neither e2 nor e3", remote)
					}
					for _, reason := range []string{stopTargetTerminated, entryrule.SkipRejectedNotAllowed, entryrule.SkipRejectedSchema, entryrule.SkipRejectedTooBig} {
						if got := metricstest.Counter(p.m.Skipped, "east", "west", reason); got != 0 {
							t.Errorf("skipped{reason=%s} = %v, want nothing skipped", reason, got)
						}
					}
					if reopened != 0 {
						t.Errorf("%d producers opened after the stop, want none (no retry)", reopened)
					}
					lines := stopLines(logs)
					if len(lines) != 1 {
						t.Fatalf("%d stop lines, want 1: %v", len(lines), lines)
					}
					f := lines[0].ContextMap()
					if !strings.Contains(lines[0].Message, "target topic is terminated") || f["reason"] != stopTargetTerminated || f["position"] != "10:2:-1" {
						t.Errorf("stop line %q %v, want it to say the target topic is terminated, at 10:2:-1", lines[0].Message, f)
					}
					if n := logs.FilterMessageSnippet("partition session failed").Len(); n > 1 {
						t.Errorf("%d 'partition session failed' lines, want at most the lost link's", n)
					}
					for _, v := range w.violations {
						t.Error(v)
					}
				})
			})
		}
	}
}

// The stop line of a schema version the source no longer serves names
// the entry's position and the version (Pulsar's 8-byte number, in
// decimal); with skip, every entry of that version is skipped and
// counted, and the others are copied.
func TestEntryPipeSourceSchemaMissing(t *testing.T) {
	v3 := []byte("\x00\x00\x00\x00\x00\x00\x00\x03")
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("skip=%v", skip), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(1, nil)
				w.add(1, nil, schemaVersion(v3))
				w.add(1, nil)
				w.add(1, nil, schemaVersion(v3))
				w.schemaErr = fetchSchemaError("east", schemaNotFound)
				p := newTestEntryPartition(t, w)
				core, logs := observer.New(zap.InfoLevel)
				p.log = zap.New(core)
				p.skipRefused = skip
				stop := runEntryPartition(t, p)
				defer stop() // also when waitFor gives up
				if skip {
					waitFor(t, "every entry acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 4 })
				} else {
					waitFor(t, "the partition stopped", func() bool {
						return metricstest.Gauge(p.m.PartitionsStopped, "east", "west", entryrule.SkipSourceSchemaMissing) == 1
					})
					time.Sleep(time.Minute)
					synctest.Wait()
				}
				acks, remote, _ := w.snapshot()
				stop()
				if skip {
					if got := metricstest.Counter(p.m.Skipped, "east", "west", entryrule.SkipSourceSchemaMissing); got != 4 {
						t.Errorf("skipped{reason=source-schema-missing} = %v messages, want e1's and e3's 4", got)
					}
					if !slices.Equal(remote, []string{"e0", "e2"}) {
						t.Errorf("remote holds %v, want e0 e2", remote)
					}
					if n := len(stopLines(logs)); n != 0 {
						t.Errorf("%d stop lines with skip, want none", n)
					}
					return
				}
				if !slices.Equal(acks, []string{"e0"}) {
					t.Errorf("acknowledged %v, want e0 (stopped at e1)", acks)
				}
				lines := stopLines(logs)
				if len(lines) != 1 {
					t.Fatalf("%d stop lines, want 1: %v", len(lines), lines)
				}
				if !strings.Contains(lines[0].Message, "source no longer serves") {
					t.Errorf("stop line %q, want it to say the source no longer serves the schema version", lines[0].Message)
				}
				if f := lines[0].ContextMap(); f["reason"] != entryrule.SkipSourceSchemaMissing || f["position"] != "10:1:-1" || f["schema_version"] != "3" {
					t.Errorf("stop line fields %v, want reason source-schema-missing, position 10:1:-1, schema_version 3", f)
				}
			})
		})
	}
}

// Failures to get a schema that may pass are not refusals: whatever
// on_refused says, the entry waits (nothing skipped, nothing stopped),
// the fetch is asked again with backoff, and once it answers the entry is
// copied. Only the source broker's own "not found" for the version is
// gone for good.
func TestEntryPipeSchemaFailuresRetried(t *testing.T) {
	v3 := []byte("\x00\x00\x00\x00\x00\x00\x00\x03")
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"the source's schema storage failing (UnknownError)",
			fetchSchemaError("east", &wire.BrokerError{Op: "get schema of persistent://t/ns/x", Code: wire.UnknownError, Message: "bookie down"})},
		{"the lookup before the fetch answering TopicNotFound",
			fetchSchemaError("east", fmt.Errorf("wire: get schema of persistent://t/ns/x: %w", &wire.BrokerError{Op: "lookup persistent://t/ns/x", Code: wire.TopicNotFound, Message: "not found"}))},
		{"a lost connection",
			fetchSchemaError("east", &wire.ConnError{Addr: "east:6650", Err: io.EOF})},
		{"the target not serving the topic while registering",
			fmt.Errorf("register on west: %w", &wire.BrokerError{Op: "get or create schema on persistent://t/ns/x", Code: wire.TopicNotFound, Message: "not found"})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newFakeEntryWorld()
				w.add(1, nil)
				w.add(1, nil, schemaVersion(v3))
				w.add(1, nil)
				w.schemaErr = tt.err
				w.schemas = map[string][]byte{string(v3): []byte("\x00\x00\x00\x00\x00\x00\x00\x07")}
				p := newTestEntryPartition(t, w)
				p.skipRefused = true
				stop := runEntryPartition(t, p)
				defer stop()
				time.Sleep(time.Minute)
				synctest.Wait()
				acks, _, _ := w.snapshot()
				w.mu.Lock()
				asks := w.schemaAsks
				w.schemaErr = nil
				w.mu.Unlock()
				if !slices.Equal(acks, []string{"e0"}) {
					t.Errorf("acknowledged %v, want e0 alone while the schema cannot be had", acks)
				}
				if asks < 3 {
					t.Errorf("schema asked %d times in a minute, want it retried", asks)
				}
				for _, reason := range []string{entryrule.SkipSourceSchemaMissing, entryrule.SkipRejectedSchema, entryrule.SkipRejectedNotAllowed} {
					if got := metricstest.Gauge(p.m.PartitionsStopped, "east", "west", reason); got != 0 {
						t.Errorf("partitions_stopped{reason=%s} = %v, want 0", reason, got)
					}
					if got := metricstest.Counter(p.m.Skipped, "east", "west", reason); got != 0 {
						t.Errorf("skipped{reason=%s} = %v, want 0", reason, got)
					}
				}
				waitFor(t, "every entry acknowledged once the schema answers", func() bool { a, _, _ := w.snapshot(); return len(a) == 3 })
				if _, remote, _ := w.snapshot(); !slices.Equal(remote, []string{"e0", "e1", "e2"}) {
					t.Errorf("remote holds %v, want e0 e1 e2", remote)
				}
			})
		})
	}
}

// TestEntryPipeProducerGaveUpIdle: the target topic is terminated while
// the partition has nothing to send. The broker closes the producer and
// refuses its reconnect for good (the wire producer gives up), so its
// link stays down; the remote still answers a lookup. When the step-down
// falls due the session ends with the producer's error, named in the
// log, instead of watching a dead producer in silence until the next
// entry (before: nothing said, the cursor kept, the producer counted as
// connected), and without a "stepped down" line (the remote answers; a
// step-down would only move the partition). The next entry then meets
// the terminated topic as a new producer opens, and the partition stops
// there.
//
// Fails for: the gaveUp check removed from stepDown.due.
func TestEntryPipeProducerGaveUpIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = 20 * time.Second
		terminated := &wire.BrokerError{Op: "create producer", Code: wire.TopicTerminatedError, Message: "Topic was already terminated"}
		w := newFakeEntryWorld()
		w.add(3, nil)
		p := newTestEntryPartition(t, w)
		p.stepDownAfter = bound
		core, logs := observer.New(zap.InfoLevel)
		p.log = zap.New(core)
		stop := runEntryPartition(t, p)
		defer stop()
		waitFor(t, "e0..e2 acknowledged", func() bool { a, _, _ := w.snapshot(); return len(a) == 3 })

		w.mu.Lock()
		w.latest.gaveUp = terminated
		w.openErr = terminated
		w.mu.Unlock()
		w.link(false)
		time.Sleep(bound + 2*time.Second)
		synctest.Wait()

		ended := logs.Filter(func(e observer.LoggedEntry) bool {
			err, _ := e.ContextMap()["error"].(string)
			return e.Message == "partition session failed, retrying with backoff" &&
				strings.Contains(err, "gave up") && strings.Contains(err, "TopicTerminatedError")
		})
		if ended.Len() != 1 {
			t.Errorf("%d lines saying the session ended on the producer's terminated topic, want 1", ended.Len())
		}
		w.mu.Lock()
		cursors := len(w.sources)
		w.mu.Unlock()
		if cursors != 2 {
			t.Errorf("%d cursors opened, want 2 (the session ended, the next one waits for an entry)", cursors)
		}
		if got := metricstest.Gauge(p.m.Connected, "east", "west"); got != 0 {
			t.Errorf("connected = %v with the producer given up, want 0", got)
		}

		w.add(1, nil) // e3
		waitFor(t, "the partition stopped", func() bool {
			return metricstest.Gauge(p.m.PartitionsStopped, "east", "west", stopTargetTerminated) == 1
		})
		if a, _, _ := w.snapshot(); len(a) != 3 {
			t.Errorf("%d entries acknowledged, want 3 (e3 waits on the cursor)", len(a))
		}
		if n := logs.FilterMessageSnippet("stepped down").Len(); n != 0 {
			t.Errorf("%d 'stepped down' lines, want none: the remote answers", n)
		}
		if got := metricstest.Counter(p.m.Links.StepDowns, "west"); got != 0 {
			t.Errorf("step-downs = %v, want 0", got)
		}
		for _, v := range w.violations {
			t.Error(v)
		}
	})
}
