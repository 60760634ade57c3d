package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// ---- bytes of a ZSTD topic -------------------------------------------------

// zstdRound is one arm of one round of the ZSTD workload. The byte counts
// are deltas of the topic's bytesInCounter over the round: what east
// stored from the application producer and what west took in from the
// replicator.
type zstdRound struct {
	Arm      string
	Round    int
	Msgs     int
	Payload  int64 // uncompressed message bytes published
	East     int64 // bytes stored on east (the origin)
	West     int64 // bytes taken in by west (the target)
	WestMsgs int64 // messages taken in by west (Msgs, unless something was sent twice)
	Dur      time.Duration
	CPU      time.Duration // the sidecar's CPU in the round (sidecar arm)
}

// perStored is bytes into the target per byte stored at the origin.
func (z zstdRound) perStored() float64 {
	if z.East == 0 {
		return 0
	}
	return float64(z.West) / float64(z.East)
}

// compression is how many payload bytes one stored byte holds.
func (z zstdRound) compression() float64 {
	if z.East == 0 {
		return 0
	}
	return float64(z.Payload) / float64(z.East)
}

type zstdResult struct {
	Messages int
	Rounds   []zstdRound
	Sidecar  sidecarRun
}

// median of f over arm's rounds.
func (z *zstdResult) median(arm string, f func(zstdRound) float64) float64 {
	var xs []float64
	for _, r := range z.Rounds {
		if r.Arm == arm {
			xs = append(xs, f(r))
		}
	}
	return median(xs)
}

// zstdProducer is the batching producer of the throughput workloads with
// ZSTD compression (pulsar-client-go's default level): a batch is
// compressed as a whole, so one stored entry is up to 128 KiB of messages,
// compressed.
func zstdProducer(topic string) pulsar.ProducerOptions {
	o := batching(topic)
	o.CompressionType = pulsar.ZSTD
	return o
}

// zstdWords make up the free-text field of compressible.
var zstdWords = []string{"order", "shipped", "pending", "warehouse", "customer", "express", "standard", "return",
	"invoice", "paid", "north", "south", "priority", "gift", "fragile", "bulk"}

var zstdStatuses = []string{"created", "paid", "packed", "shipped", "delivered", "returned"}

// compressible is message seq of the ZSTD workload: 1 KiB of JSON-like
// text, an order event with a counter, a random customer, trace id and
// eight line items, and a note of words drawn from sixteen. Its values
// come from a generator seeded with seq, so the bytes are the same on
// every run. A batch of them (128 KiB) compresses about fivefold with
// ZSTD; the run reports the factor the brokers saw.
func compressible(seq int) []byte {
	r := rand.New(rand.NewPCG(uint64(seq), 0x9e3779b97f4a7c15))
	var b strings.Builder
	b.Grow(msgSize + 64)
	fmt.Fprintf(&b, `{"seq":%d,"event":"order.%s","customer":"cust-%05d","trace":"%016x","items":[`,
		seq, zstdStatuses[r.IntN(len(zstdStatuses))], r.IntN(100000), r.Uint64())
	for i := range 8 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%04d","qty":%d,"price":%d.%02d}`, r.IntN(10000), 1+r.IntN(9), r.IntN(500), r.IntN(100))
	}
	b.WriteString(`],"note":"`)
	const tail = "\"}\n"
	for b.Len() < msgSize-len(tail) {
		b.WriteString(zstdWords[r.IntN(len(zstdWords))])
		b.WriteByte(' ')
	}
	return []byte(b.String()[:msgSize-len(tail)] + tail)
}

// zstd measures what each replicator sends the target for a ZSTD topic:
// a batching producer with ZSTD compression publishes ZstdMessages
// compressible messages on east; once west has them all, the bytes west
// took in are divided by the bytes east stored. A replicator that
// forwards stored entries as they are sends about one byte per byte
// (plus what it adds to each entry's metadata); one that decompresses
// and sends again uncompressed sends the compression factor. There is no
// direct arm: nothing is replicated.
func (e *env) zstd() (*zstdResult, error) {
	const name = "zstd"
	n := e.o.Sizes.ZstdMessages
	all, from := e.armTopics(name)
	topics := map[string]string{armBuiltin: all[armBuiltin], armSidecar: all[armSidecar]}
	for _, t := range topics {
		if err := e.createTopic(t, 1, "east", "west"); err != nil {
			return nil, err
		}
	}
	sc, err := e.sidecarFor(e.o.Binary, name, nsSidecar, name)
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	// Connections and the replicators' producers on west are up before
	// anything is counted (the counts are deltas: the warm-up does not
	// enter them).
	if err := e.warmUp(topics, from); err != nil {
		return nil, err
	}
	res := &zstdResult{Messages: n}
	var payloadBytes int64
	for i := range n {
		payloadBytes += int64(len(compressible(i)))
	}
	timeout := max(2*time.Minute, time.Duration(n/500)*time.Second)
	for r := range e.o.Sizes.Rounds {
		for _, arm := range order(r, armBuiltin, armSidecar) {
			var zr zstdRound
			err := e.attempt(name+" "+arm, func() error {
				time.Sleep(e.o.Sizes.Settle)
				topic := topics[arm]
				bg := context.Background()
				east0, err := e.counters(bg, "east", topic)
				if err != nil {
					return err
				}
				west0, err := e.counters(bg, "west", topic)
				if err != nil {
					return err
				}
				u0, _ := sc.usage()
				ctx, cancel := context.WithTimeout(bg, timeout)
				defer cancel()
				t0 := time.Now()
				if err := e.produceWith(ctx, "east", zstdProducer(topic), n, compressible); err != nil {
					return fmt.Errorf("publish: %w", err)
				}
				_, done, err := e.waitReceived("west", topic, west0.Msgs, west0.Msgs+int64(n), timeout)
				if err != nil {
					return err
				}
				u1, _ := sc.usage()
				east1, err := e.counters(bg, "east", topic)
				if err != nil {
					return err
				}
				west1, err := e.counters(bg, "west", topic)
				if err != nil {
					return err
				}
				if e.restarted() {
					return errRestarted // the counters started again from zero
				}
				if got := east1.Msgs - east0.Msgs; got != int64(n) {
					return fmt.Errorf("east took %d messages into %s, not the %d published", got, topic, n)
				}
				zr = zstdRound{Arm: arm, Round: r, Msgs: n, Payload: payloadBytes,
					East: east1.Bytes - east0.Bytes, West: west1.Bytes - west0.Bytes, WestMsgs: west1.Msgs - west0.Msgs,
					Dur: done.Sub(t0)}
				if arm == armSidecar {
					zr.CPU = u1.CPU - u0.CPU
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", name, arm, err)
			}
			res.Rounds = append(res.Rounds, zr)
			if arm == armSidecar {
				res.Sidecar.CPU += zr.CPU
				res.Sidecar.Messages += zr.Msgs
			}
			e.logf("zstd round %d %-8s %.3f bytes into west per byte stored on east (east %d B, west %d B, %d of %d messages; payload %.2f× the stored bytes; %s)",
				r+1, arm, zr.perStored(), zr.East, zr.West, zr.WestMsgs, n, zr.compression(), zr.Dur.Round(time.Millisecond))
		}
	}
	run := e.finish(sc, name)
	e.dropWorkload(topics[armBuiltin], topics[armSidecar])
	run.CPU, run.Messages = res.Sidecar.CPU, res.Sidecar.Messages
	res.Sidecar = run
	return res, nil
}
