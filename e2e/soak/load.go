package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// topicKind is one of the load's topics: how it is produced to.
type topicKind struct {
	Short       string
	Partitions  int // 0: not partitioned
	Batched     bool
	Compression pulsar.CompressionType
	Keyed       bool
	// LargeEvery, when more than 0, makes every LargeEvery-th message
	// (from the first) large: largeSize's 1 to 4 MiB of random bytes.
	LargeEvery int64
	// Late topics do not exist at the start: their load begins at
	// Load.LateAt, its producers creating the topic on both clusters
	// (the brokers' automatic creation, not partitioned), which the
	// sidecars must find under topic_patterns and copy from its first
	// message. No application subscribes to them.
	Late bool
	// Added topics are produced to from the start but are not under the
	// sidecars' topic_patterns until the config change (KindReconfig,
	// Options.Reconfig): the sidecars, restarted one by one with the
	// pattern added, must copy them from their first message. No
	// application subscribes to them.
	Added bool
}

// loadTopics are the topics the soak writes to on both clusters: a mix of
// partitioned and not, batched and not, keyed, compressed, and a few
// large messages (1 to 4 MiB, under the test bed brokers' 5 MiB
// maxMessageSize with room for the copy's metadata: no chunking): at the
// default rate one a minute in plain's batches (a batch of its own:
// larger than the producer's 128 KiB batch size) and one every 15 s in
// single. (Producers writing with Java's client are for later.)
var loadTopics = []topicKind{
	{Short: "plain", Batched: true, LargeEvery: 2000},
	{Short: "parted", Partitions: 4, Batched: true, Keyed: true},
	{Short: "single", Compression: pulsar.LZ4, Keyed: true, LargeEvery: 500},
	{Short: "late", Keyed: true, Late: true},
}

// addedTopic is the topic the config change adds (runTopics).
var addedTopic = topicKind{Short: "added", Keyed: true, Added: true}

// runTopics are the topics a run produces to: the load topics, and with
// the config change the topic it adds.
func runTopics(reconfig bool) []topicKind {
	if !reconfig {
		return loadTopics
	}
	return append(append([]topicKind{}, loadTopics...), addedTopic)
}

// appTopics are the load topics the applications consume (not the late
// ones).
func appTopics() []topicKind {
	var out []topicKind
	for _, tk := range loadTopics {
		if !tk.Late && !tk.Added {
			out = append(out, tk)
		}
	}
	return out
}

// The large messages' sizes.
const (
	largeMin = 1 << 20
	largeMax = 4 << 20
)

// largeSize is the size of message seq of producer id when it is large,
// 0 when it is not: drawn from the producer and the sequence number, so
// that a run's sizes do not depend on timing.
func largeSize(tk topicKind, id string, seq int64) int {
	if tk.LargeEvery <= 0 || seq%tk.LargeEvery != 0 {
		return 0
	}
	r := rand.New(rand.NewPCG(uint64(seq), fnv64(id)))
	return largeMin + r.IntN(largeMax-largeMin+1)
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// payload is message seq's body: its producer and number, then, for a
// large one, random bytes (not compressible: LZ4 leaves it large) up to
// its size.
func payload(id string, seq int64, size int) []byte {
	b := fmt.Appendf(nil, "%s %d %032d", id, seq, seq)
	if size <= len(b) {
		return b
	}
	out := make([]byte, size)
	copy(out, b)
	r := rand.New(rand.NewPCG(uint64(seq), fnv64(id)+1))
	for i := len(b); i < size; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < size; j++ {
			out[i+j] = byte(v >> (8 * j))
		}
	}
	return out
}

// burstFactor multiplies a cluster's load during a burst fault.
const burstFactor = 10

// Load produces tagged messages to every load topic on its cluster at a
// steady rate (messages per second, over all its topics), bursting while
// a burst fault says so, and records every acknowledged send.
type Load struct {
	Cluster string
	Client  pulsar.Client
	NS      string
	Rate    int

	// LateAt is when the late topics' load begins.
	LateAt time.Time
	// Topics are the topics produced to (nil: loadTopics).
	Topics []topicKind

	burstUntil atomic.Int64 // Unix ns
	mu         sync.Mutex
	sent       Sent
	produced   atomic.Int64
	failed     atomic.Int64
	large      atomic.Int64 // large messages acknowledged
	largeBytes atomic.Int64
}

// Burst makes the load burstFactor times its rate until the given time.
func (l *Load) Burst(until time.Time) { l.burstUntil.Store(until.UnixNano()) }

// Run produces until ctx is done, then flushes and closes the producers
// (waiting at most 30 s for the sends in flight), and returns the first
// error creating a producer. Sends that fail are counted, not retried: a
// send the producer did not acknowledge is not expected anywhere.
func (l *Load) Run(ctx context.Context) error {
	topics := l.Topics
	if topics == nil {
		topics = loadTopics
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(topics))
	per := float64(l.Rate) / float64(len(topics))
	for _, tk := range topics {
		if tk.Late {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-ctx.Done():
					errs <- nil
					return
				case <-time.After(time.Until(l.LateAt)):
				}
				errs <- l.start(ctx, tk, per)
			}()
			continue
		}
		p, err := l.producer(tk)
		if err != nil {
			return err
		}
		id := l.Cluster + "-" + tk.Short
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.produce(ctx, p, tk, id, per)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// start produces to tk (a late topic) until ctx is done.
// Its producer is created again every lateRetry while the cluster does
// not answer: a broker restart may hold the cluster down when the late
// load begins (seed 3810: west down 74 s from 32 s in, the late topic's
// producer timed out at 1 m and failed the run). An error is returned
// only when no producer could be made before ctx ended.
func (l *Load) start(ctx context.Context, tk topicKind, rate float64) error {
	for {
		p, err := l.producer(tk)
		if err == nil {
			return l.produce(ctx, p, tk, l.Cluster+"-"+tk.Short, rate)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(lateRetry):
		}
	}
}

// lateRetry is the pause between two tries of a late topic's producer.
const lateRetry = 2 * time.Second

// producer opens the load's producer on tk.
func (l *Load) producer(tk topicKind) (pulsar.Producer, error) {
	p, err := l.Client.CreateProducer(pulsar.ProducerOptions{
		Topic:                   "persistent://" + l.NS + "/" + tk.Short,
		DisableBatching:         !tk.Batched,
		BatchingMaxPublishDelay: 10 * time.Millisecond,
		CompressionType:         tk.Compression,
		MaxPendingMessages:      5000,
		SendTimeout:             30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("producer on %s %s: %w", l.Cluster, tk.Short, err)
	}
	return p, nil
}

func (l *Load) produce(ctx context.Context, p pulsar.Producer, tk topicKind, id string, rate float64) error {
	defer p.Close()
	var seq int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	carry := 0.0
	for {
		select {
		case <-ctx.Done():
			done := make(chan struct{})
			go func() { _ = p.FlushWithCtx(context.Background()); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
			}
			return nil
		case <-tick.C:
		}
		n := rate / 20
		if time.Now().UnixNano() < l.burstUntil.Load() {
			n *= burstFactor
		}
		carry += n
		for ; carry >= 1; carry-- {
			s := seq
			seq++
			size := largeSize(tk, id, s)
			msg := &pulsar.ProducerMessage{
				Payload: payload(id, s, size),
				Properties: map[string]string{
					PropOrigin: l.Cluster, PropProducer: id, PropSeq: strconv.FormatInt(s, 10),
				},
			}
			if tk.Keyed {
				msg.Key = "k" + strconv.FormatInt(s%32, 10)
			}
			p.SendAsync(context.Background(), msg, func(mid pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					l.failed.Add(1)
					return
				}
				l.produced.Add(1)
				if size > 0 {
					l.large.Add(1)
					l.largeBytes.Add(int64(size))
				}
				part := "persistent://" + l.NS + "/" + tk.Short
				if tk.Partitions > 0 {
					part = fmt.Sprintf("%s-partition-%d", part, mid.PartitionIdx())
				}
				l.mu.Lock()
				l.sent.Add(part, l.Cluster, id, s, time.Now())
				l.mu.Unlock()
			})
		}
	}
}
