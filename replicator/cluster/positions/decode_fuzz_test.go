package positions

// A fuzz target for the decoder of the positions servlet's answers, outside
// input. It checks properties of what Decode accepts, not only that nothing
// panics. .ci/fuzz.sh finds it by name.

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode: whatever Decode accepts names only asked namespaces and
// subscriptions, each once, with numbers inside the answer's bounds and
// runs in order after the mark-delete; and it says the same again when
// written in the servlet's form and decoded again.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"epoch":"e1","seq":0,"full":true,"subscriptions":[]}`,
		`{"v":1,"epoch":"e1","seq":7,"full":true,"subscriptions":[{"topic":"persistent://t/ns/a-partition-0","subscription":"app","seq":7,"markDelete":[10,5],"acked":[[10,6,10,7],[10,8,10,9],[11,-1,11,3]]}]}`,
		`{"v":1,"epoch":"e1","seq":9,"full":false,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app","seq":6,"gone":true},{"topic":"persistent://t/ns/b","subscription":"app2","seq":9,"markDelete":[3,4],"acked":[],"truncated":true}]}`,
		`{"v":1,"epoch":"e1","seq":9,"full":true,"subscriptions":[{"topic":"persistent://t/other/a","subscription":"app","seq":3,"markDelete":[1,1],"acked":[]}]}`,
		`{"v":1,"epoch":"e1","seq":9,"full":true,"subscriptions":[{"topic":"persistent://t/ns/a","subscription":"app","seq":3,"markDelete":[1,1],"acked":[[1,2,1,5],[1,4,1,7]]}]}`,
	} {
		f.Add(s, int64(0), "")
		f.Add(s, int64(5), "e1")
	}
	f.Fuzz(func(t *testing.T, body string, since int64, epoch string) {
		q := Query{Namespaces: []string{"t/ns"}, Subscriptions: []string{"app", "app2"}, Since: since, Epoch: epoch}
		a, err := Decode([]byte(body), q)
		if err != nil {
			return
		}
		if a.Epoch == "" || a.Seq < 0 || (!a.Full && (a.Epoch != epoch || since <= 0 || a.Seq < since)) {
			t.Fatalf("answer header %q %d full=%t for since %d epoch %q", a.Epoch, a.Seq, a.Full, since, epoch)
		}
		seen := map[Key]bool{}
		for _, s := range a.States {
			rest, ok := strings.CutPrefix(s.Topic, "persistent://t/ns/")
			if !ok || rest == "" || strings.Contains(rest, "/") {
				t.Fatalf("topic %q outside t/ns", s.Topic)
			}
			if s.Subscription != "app" && s.Subscription != "app2" {
				t.Fatalf("subscription %q not asked", s.Subscription)
			}
			k := Key{s.Topic, s.Subscription}
			if seen[k] {
				t.Fatalf("%v twice", k)
			}
			seen[k] = true
			if s.Seq < 1 || s.Seq > a.Seq || (!a.Full && s.Seq <= since) {
				t.Fatalf("seq %d outside (%d, %d]", s.Seq, since, a.Seq)
			}
			if s.Gone {
				if a.Full || s.Acked != nil || s.Truncated || s.MarkDelete != (State{}).MarkDelete {
					t.Fatalf("gone state %+v", s)
				}
				continue
			}
			if s.MarkDelete.Ledger < 0 || s.MarkDelete.Entry < -1 || s.MarkDelete.Batch != -1 {
				t.Fatalf("mark-delete %v", s.MarkDelete)
			}
			prev := s.MarkDelete
			for _, r := range s.Acked {
				if r.From.Compare(prev) < 0 || r.To.Compare(r.From) <= 0 || r.From.Batch != -1 || r.To.Batch != -1 {
					t.Fatalf("run %+v after %v", r, prev)
				}
				prev = r.To
			}
		}
		again, err := Decode([]byte(encode(a)), q)
		if err != nil {
			t.Fatalf("re-encoded answer refused: %v\n%s", err, encode(a))
		}
		if !reflect.DeepEqual(normal(again), normal(a)) {
			t.Fatalf("round trip: %+v\nwant %+v", again, a)
		}
	})
}

// normal makes empty and nil run lists alike (JSON [] decodes to neither
// consistently across the two paths).
func normal(a Answer) Answer {
	for i := range a.States {
		if len(a.States[i].Acked) == 0 {
			a.States[i].Acked = nil
		}
	}
	if a.States == nil {
		a.States = []State{}
	}
	return a
}
