package positions

import (
	"slices"
	"sort"
)

// Key names one subscription on one topic partition.
type Key struct {
	Topic        string
	Subscription string
}

// View is what one broker last said of the subscriptions in one scope.
// It does no I/O: the caller asks the broker for Query (Client.Get) and
// hands the answer to Apply, which returns only what changed since the
// previous answer. Not safe for concurrent use: one View per broker and
// scope, used by one goroutine.
type View struct {
	q     Query
	known map[Key]State
}

// NewView follows the subscriptions named subscriptions on the topics of
// namespaces (on the broker whose answers it is given).
func NewView(namespaces, subscriptions []string) *View {
	return &View{
		q:     Query{Namespaces: slices.Clone(namespaces), Subscriptions: slices.Clone(subscriptions)},
		known: map[Key]State{},
	}
}

// Query is what to ask the broker next: the scope, and only the changes
// since the last answer Apply took (none yet: everything).
func (v *View) Query() Query { return v.q }

// Apply takes the broker's decoded answer to Query into the view and
// returns the states that changed since the previous answer, gone ones
// included (from a full answer, every subscription known before and not
// listed), in the broker's order (gone ones of a full answer last, by
// topic). The first answer, and any after the broker restarted (a full
// one), returns every subscription present. A failed request is not
// applied: the view stays as it was.
func (v *View) Apply(a Answer) []State {
	var changed []State
	if a.Full {
		listed := make(map[Key]bool, len(a.States))
		for _, s := range a.States {
			listed[Key{s.Topic, s.Subscription}] = true
		}
		var gone []State
		for k := range v.known {
			if !listed[k] {
				gone = append(gone, State{Topic: k.Topic, Subscription: k.Subscription, Seq: a.Seq, Gone: true})
				delete(v.known, k)
			}
		}
		sort.Slice(gone, func(i, j int) bool {
			if gone[i].Topic != gone[j].Topic {
				return gone[i].Topic < gone[j].Topic
			}
			return gone[i].Subscription < gone[j].Subscription
		})
		for _, s := range a.States {
			k := Key{s.Topic, s.Subscription}
			if old, ok := v.known[k]; ok && same(old, s) {
				v.known[k] = s
				continue
			}
			v.known[k] = s
			changed = append(changed, s)
		}
		changed = append(changed, gone...)
	} else {
		for _, s := range a.States {
			k := Key{s.Topic, s.Subscription}
			if s.Gone {
				if _, ok := v.known[k]; !ok {
					continue
				}
				delete(v.known, k)
			} else {
				v.known[k] = s
			}
			changed = append(changed, s)
		}
	}
	v.q.Epoch, v.q.Since = a.Epoch, a.Seq
	return changed
}

// Known is the view's last state of k.
func (v *View) Known(k Key) (State, bool) {
	s, ok := v.known[k]
	return s, ok
}

// same: a and b say the same of a subscription (their numbers aside).
func same(a, b State) bool {
	return a.Gone == b.Gone && a.MarkDelete == b.MarkDelete && a.Truncated == b.Truncated && slices.Equal(a.Acked, b.Acked)
}
