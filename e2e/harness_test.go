package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestClusterLockNotOvertaken: a test waiting to disrupt a cluster gets it
// before a shared request that came after it, though the shared holder of
// the moment would let that one in (with three lanes, two may take turns
// holding west shared for their whole run). Goroutines play the lanes:
// flock(2) locks of separate opens conflict within one process as they do
// across processes.
func TestClusterLockNotOvertaken(t *testing.T) {
	name := "locktest-" + uuid.NewString()[:8]
	t.Cleanup(func() {
		files, _ := filepath.Glob(filepath.Join(os.TempDir(), "geo-sidecar-testbed*-"+name+"*.lock"))
		for _, f := range files {
			os.Remove(f)
		}
	})
	order := make(chan string, 3)
	releases := make(chan func(), 3)
	take := func(who string, how int) {
		release, _, err := takeClusters(how, []string{name})
		if err != nil {
			t.Error(err)
			release = func() {}
		}
		order <- who
		releases <- release
	}
	take("first shared", syscall.LOCK_SH)
	releaseFirst := <-releases
	go take("exclusive", syscall.LOCK_EX)
	// The exclusive request holds the cluster's gate while it waits.
	Eventually(t, 10*time.Second, func() error {
		gate, _, err := flockFile(name+"-gate", syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			gate.Close()
			return errors.New("the exclusive request is not waiting yet")
		}
		return nil
	})
	go take("second shared", syscall.LOCK_SH)
	time.Sleep(300 * time.Millisecond) // lets the second request reach the lock (without the gate it would get it now)
	releaseFirst()
	got := []string{<-order}
	for range 2 {
		(<-releases)()
		got = append(got, <-order)
	}
	if want := []string{"first shared", "exclusive", "second shared"}; !slices.Equal(got, want) {
		t.Fatalf("locks granted in the order %q, want %q", got, want)
	}
}
