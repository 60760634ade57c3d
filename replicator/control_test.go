package replicator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// fakeControl is one cluster's control plane: topics by name with their
// partition count (0: non-partitioned), as Pulsar's admin API answers.
type fakeControl struct {
	// slow, when set, runs at the start of each Partitions call (outside
	// mu): tests count the calls in flight with it.
	slow      func()
	mu        sync.Mutex
	have      map[string]int // topic -> partitions; partitioned topics have > 0
	stale     []string       // listed partitions whose topic metadata is gone
	cursorsOf map[string][]string
	fail      error // every call fails with it when set
	listFail  bool  // Topics fails
	calls     []string
}

func (f *fakeControl) call(format string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	return f.fail
}

func (f *fakeControl) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakeControl) Topics(_ context.Context, namespace string) (partitioned, plain []string, err error) {
	if err := f.call("topics %s", namespace); err != nil {
		return nil, nil, err
	}
	if f.listFail {
		return nil, nil, errAdminDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, n := range f.have {
		if n == 0 {
			plain = append(plain, name)
			continue
		}
		partitioned = append(partitioned, name)
		for i := range n {
			plain = append(plain, fmt.Sprintf("%s-partition-%d", name, i))
		}
	}
	plain = append(plain, f.stale...)
	slices.Sort(partitioned)
	slices.Sort(plain)
	return partitioned, plain, nil
}

func (f *fakeControl) Partitions(_ context.Context, topic string) (int, bool, error) {
	if f.slow != nil {
		f.slow()
	}
	if err := f.call("partitions %s", shortName(topic)); err != nil {
		return 0, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.have[topic]
	return n, ok, nil
}

func (f *fakeControl) CreateTopic(_ context.Context, topic string, partitions int) error {
	if err := f.call("create %s %d", shortName(topic), partitions); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.have[topic]; ok {
		return cluster.ErrTopicExists
	}
	f.have[topic] = partitions
	return nil
}

func (f *fakeControl) GrowTopic(_ context.Context, topic string, partitions int) error {
	if err := f.call("grow %s %d", shortName(topic), partitions); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.have[topic] = partitions
	return nil
}

func (f *fakeControl) Layout(_ context.Context, topic string) (*cluster.Layout, error) {
	if err := f.call("layout %s", shortName(topic)); err != nil {
		return nil, err
	}
	return &cluster.Layout{Cursors: f.cursorsOf[topic]}, nil
}

func (f *fakeControl) MarkDeletes(context.Context, string) (map[string]marker.Position, error) {
	return nil, f.call("markDeletes")
}

func (f *fakeControl) Backlogs(context.Context, string) (map[string]int64, error) {
	return nil, f.call("backlogs")
}

const ctlNS = "persistent://acme/all/"

var errAdminDown = errors.New("admin down")

func TestListTopics(t *testing.T) {
	cfg, err := config.Parse([]byte(selectYAML))
	if err != nil {
		t.Fatal(err)
	}
	listed, all := cfg.Replication[0], cfg.Replication[1]
	cp := &fakeControl{have: map[string]int{
		ctlNS + "orders":          3,
		ctlNS + "plain":           0,
		ctlNS + "__change_events": 0,
	}, stale: []string{ctlNS + "gone-partition-1"}}
	got, err := listTopics(context.Background(), cp, all)
	if err != nil {
		t.Fatal(err)
	}
	want := []topicInfo{{name: ctlNS + "orders", partitions: 3}, {name: ctlNS + "plain"}}
	if !slices.Equal(got, want) {
		t.Errorf("listTopics() = %v, want %v (no partitions listed as topics, no system topics, no partition without its topic)", got, want)
	}
	if calls := cp.takeCalls(); !slices.Equal(calls, []string{"topics acme/all", "partitions orders"}) {
		t.Errorf("admin calls %v: one list, one metadata call per selected partitioned topic", calls)
	}
	if got, _ := listTopics(context.Background(), cp, listed); !slices.Equal(got, want[:1]) {
		t.Errorf("listTopics() for a list of names = %v, want %v", got, want[:1])
	}
	cp.fail = errors.New("admin down")
	if _, err := listTopics(context.Background(), cp, all); err == nil {
		t.Error("listTopics() with the admin API down: no error")
	}
}

func TestEnsureRemote(t *testing.T) {
	const topic = ctlNS + "orders"
	tests := []struct {
		name     string
		remote   map[string]int // the remote's topics before
		source   int            // the source's partitions
		want     error          // nil, errPartitionMismatch or errAny
		calls    []string
		after    int // the remote's partitions after
		hasAfter bool
	}{
		{name: "absent, partitioned", remote: map[string]int{}, source: 4,
			calls: []string{"partitions orders", "create orders 4"}, after: 4, hasAfter: true},
		{name: "absent, non-partitioned: the producer creates it", remote: map[string]int{}, source: 0,
			calls: []string{"partitions orders"}},
		{name: "same partitions", remote: map[string]int{topic: 4}, source: 4,
			calls: []string{"partitions orders"}, after: 4, hasAfter: true},
		{name: "both non-partitioned", remote: map[string]int{topic: 0}, source: 0,
			calls: []string{"partitions orders"}, after: 0, hasAfter: true},
		{name: "source grew", remote: map[string]int{topic: 2}, source: 5,
			calls: []string{"partitions orders", "grow orders 5"}, after: 5, hasAfter: true},
		{name: "remote has more", remote: map[string]int{topic: 8}, source: 4, want: errPartitionMismatch,
			calls: []string{"partitions orders"}, after: 8, hasAfter: true},
		{name: "remote non-partitioned, source partitioned", remote: map[string]int{topic: 0}, source: 4, want: errPartitionMismatch,
			calls: []string{"partitions orders", "create orders 4"}, after: 0, hasAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := &fakeControl{have: tt.remote}
			err := ensureRemote(context.Background(), cp, topicInfo{name: topic, partitions: tt.source})
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("ensureRemote() = %v, want %v", err, tt.want)
			}
			if calls := cp.takeCalls(); !slices.Equal(calls, tt.calls) {
				t.Errorf("admin calls %v, want %v", calls, tt.calls)
			}
			if n, ok := cp.have[topic]; ok != tt.hasAfter || n != tt.after {
				t.Errorf("remote topic after: %d partitions (exists %v), want %d (exists %v)", n, ok, tt.after, tt.hasAfter)
			}
		})
	}
}

// A topic found right on the remote is not asked about again until its
// partition count changes or a check fails.
func TestRemoteChecksCache(t *testing.T) {
	const topic = ctlNS + "orders"
	cp := &fakeControl{have: map[string]int{}}
	var c remoteChecks
	ctx := context.Background()
	steps := []struct {
		partitions int
		fail       error
		calls      int
	}{
		{partitions: 2, calls: 2}, // read, create
		{partitions: 2, calls: 0}, // trusted
		{partitions: 3, calls: 2}, // grew: read, grow
		{partitions: 3, calls: 0},
	}
	for i, s := range steps {
		if err := c.ensure(ctx, cp, topicInfo{name: topic, partitions: s.partitions}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if calls := cp.takeCalls(); len(calls) != s.calls {
			t.Errorf("step %d: admin calls %v, want %d", i, calls, s.calls)
		}
	}
	// A failure forgets the topic: the next discovery asks again.
	delete(c, topic)
	cp.fail = errors.New("admin down")
	if err := c.ensure(ctx, cp, topicInfo{name: topic, partitions: 3}); err == nil {
		t.Fatal("ensure with the admin API down: no error")
	}
	cp.fail = nil
	cp.takeCalls()
	if err := c.ensure(ctx, cp, topicInfo{name: topic, partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if calls := cp.takeCalls(); len(calls) != 1 {
		t.Errorf("after a failure: admin calls %v, want the metadata read again", calls)
	}
}

// The remote checks of one discovery run remoteCheckers at a time, not
// one after another and not all at once, and each topic's failure is its
// own.
func TestRemoteChecksParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		have := map[string]int{}
		var topics []topicInfo
		for i := range 50 {
			name := fmt.Sprintf("%st%02d", ctlNS, i)
			topics = append(topics, topicInfo{name: name, partitions: 2})
			have[name] = 2
		}
		delete(have, topics[7].name) // created by the check
		have[topics[9].name] = 0     // refused: non-partitioned there
		var mu sync.Mutex
		var now, most int
		cp := &fakeControl{have: have, slow: func() {
			mu.Lock()
			now++
			most = max(most, now)
			mu.Unlock()
			time.Sleep(time.Second)
			mu.Lock()
			now--
			mu.Unlock()
		}}
		var c remoteChecks
		start := time.Now()
		failed := c.ensureAll(context.Background(), cp, topics)
		if most != remoteCheckers {
			t.Errorf("%d checks at once, want %d", most, remoteCheckers)
		}
		if took, want := time.Since(start), 7*time.Second; took != want {
			t.Errorf("50 checks of 1 s took %s, want %s (%d at a time)", took, want, remoteCheckers)
		}
		if len(failed) != 1 || !errors.Is(failed[topics[9].name], errPartitionMismatch) {
			t.Errorf("failed = %v, want only %s's partition mismatch", failed, topics[9].name)
		}
		if got := cp.have[topics[7].name]; got != 2 {
			t.Errorf("the missing topic has %d partitions on the remote, want 2 (created)", got)
		}
		if len(c) != 49 {
			t.Errorf("%d topics trusted after the checks, want 49", len(c))
		}
		cp.takeCalls()
		if failed := c.ensureAll(context.Background(), cp, topics); len(failed) != 1 {
			t.Errorf("second pass failed = %v", failed)
		}
		if calls := cp.takeCalls(); !slices.Equal(calls, []string{"partitions t09", "create t09 2"}) {
			t.Errorf("second pass asked %v, want only the refused topic again", calls)
		}
	})
}

// Expired checks of partitioned topics are made again recheckPerPass a
// pass, oldest first; new topics and changed partition counts are checked
// whatever their number.
func TestRemoteChecksRecheckBound(t *testing.T) {
	have := map[string]int{}
	var topics []topicInfo
	c := remoteChecks{}
	old := time.Now().Add(-recheckRemote)
	for i := range recheckPerPass + 10 {
		name := fmt.Sprintf("%st%02d", ctlNS, i)
		topics = append(topics, topicInfo{name: name, partitions: 2})
		have[name] = 2
		// t00 is the oldest, then t01, ...
		c[name] = remoteCheck{partitions: 2, at: old.Add(time.Duration(i-100) * time.Second)}
	}
	fresh := topicInfo{name: ctlNS + "fresh"}
	topics = append(topics, fresh)
	cp := &fakeControl{have: have}
	if failed := c.ensureAll(context.Background(), cp, topics); len(failed) != 0 {
		t.Fatal(failed)
	}
	calls := cp.takeCalls()
	if len(calls) != recheckPerPass+1 || !slices.Contains(calls, "partitions fresh") {
		t.Fatalf("first pass asked %d: %v; want the new topic and %d expired ones", len(calls), calls, recheckPerPass)
	}
	for i := range recheckPerPass {
		if !slices.Contains(calls, fmt.Sprintf("partitions t%02d", i)) {
			t.Errorf("t%02d, among the oldest checks, was not checked again", i)
		}
	}
	c.ensureAll(context.Background(), cp, topics)
	if calls := cp.takeCalls(); len(calls) != 10 {
		t.Errorf("second pass asked %v, want the 10 expired ones left", calls)
	}
}

// Expired non-partitioned topics are trusted again from one listing of
// the remote namespace, whatever their number; one the listing shows
// partitioned there since is checked by itself (and refused). Below
// listingWorth, or when the listing fails, each is checked by itself.
func TestRemoteChecksRecheckListing(t *testing.T) {
	tests := []struct {
		name       string
		n          int
		listFails  bool
		wantList   bool
		wantSingle int // checks of single topics
		wantFresh  int // topics trusted again
	}{
		{"many: one listing", 2*recheckPerPass + 7, false, true, 1, 2*recheckPerPass + 6},
		{"listing fails: one by one, bounded", 2*recheckPerPass + 7, true, true, recheckPerPass, recheckPerPass - 1},
		{"few: one by one", listingWorth - 1, false, false, listingWorth - 1, listingWorth - 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			have := map[string]int{}
			var topics []topicInfo
			c := remoteChecks{}
			old := time.Now().Add(-recheckRemote - time.Minute)
			for i := range tt.n {
				name := fmt.Sprintf("%st%03d", ctlNS, i)
				topics = append(topics, topicInfo{name: name})
				have[name] = 0
				c[name] = remoteCheck{at: old}
			}
			turned := topics[0].name // made partitioned on the remote since
			have[turned] = 3
			c[turned] = remoteCheck{at: old.Add(-time.Minute)} // the oldest check
			cp := &fakeControl{have: have, listFail: tt.listFails}
			failed := c.ensureAll(context.Background(), cp, topics)
			var single int
			listed := false
			for _, call := range cp.takeCalls() {
				if strings.HasPrefix(call, "topics ") {
					listed = true
				} else {
					single++
				}
			}
			if listed != tt.wantList || single != tt.wantSingle {
				t.Errorf("namespace listed %v, %d single checks; want %v, %d", listed, single, tt.wantList, tt.wantSingle)
			}
			if !errors.Is(failed[turned], errPartitionMismatch) {
				t.Errorf("the topic made partitioned on the remote: %v, want a partition mismatch", failed[turned])
			}
			var fresh int
			for _, tp := range topics {
				if v, ok := c[tp.name]; ok && time.Since(v.at) < time.Minute {
					fresh++
				}
			}
			if fresh != tt.wantFresh {
				t.Errorf("%d topics trusted again, want %d", fresh, tt.wantFresh)
			}
		})
	}
}
