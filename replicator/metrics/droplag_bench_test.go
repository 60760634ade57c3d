package metrics

import (
	"fmt"
	"testing"
)

// BenchmarkDropLag: every partition's sync drops its lags when it stops,
// and at exit they all stop together. The time per drop must not grow
// with the series of other partitions (ns/drop flat across the sizes):
// one topic of one partition and one subscription per sync, both ways,
// as the scale rows run.
func BenchmarkDropLag(b *testing.B) {
	for _, syncs := range []int{2000, 4000, 8000} {
		b.Run(fmt.Sprintf("syncs=%d", syncs), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				m := New(nil)
				keys := make([]string, syncs)
				for i := range syncs {
					topic := fmt.Sprintf("t/ns/topic-%d", i/2)
					src, dst := "east", "west"
					if i%2 == 1 {
						src, dst = dst, src
					}
					keys[i] = dst + " persistent://" + topic
					m.SetLag([4]string{src, dst, topic, "billing"}, keys[i], 1, 0)
				}
				b.StartTimer()
				for _, k := range keys {
					m.DropLag(k)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*syncs), "ns/drop")
		})
	}
}
