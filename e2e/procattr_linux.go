package e2e

import "syscall"

// ChildProcAttr makes a sidecar started by a test or the benchmark die
// with the process that started it: a test binary that panics or times
// out, or a benchmark whose client library panics, would otherwise leave
// its sidecars copying against the shared test bed (one such sidecar,
// with 10,000 topics, ran on beside two later benchmark runs).
func ChildProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
