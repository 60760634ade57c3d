package cluster

// OwnStack runs f on a goroutine of its own and returns what it returned.
//
// For admin reads made by goroutines that live as long as a partition
// (its subscription sync): decoding an answer (encoding/json over
// pulsaradmin's stats structs) grows the stack of the goroutine that
// decodes to 16 KiB or more, and a long-lived goroutine keeps that stack
// while it waits for its next round, until enough garbage collections
// have halved it again (the runtime halves a stack at most once per
// collection, and an idle process collects every two minutes).
// Such stacks were a large share of an idle process's memory with many
// topics (docs/benchmark.md, History). A goroutine that ends
// frees its stack at once; starting one costs about a microsecond beside
// the request's milliseconds.
func OwnStack[T any](f func() (T, error)) (T, error) {
	var (
		v    T
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		v, err = f()
	}()
	<-done
	return v, err
}
