//go:build !linux

package e2e

import "syscall"

// ChildProcAttr is nil where the parent's death cannot be passed on to a
// child (see the Linux version).
func ChildProcAttr() *syscall.SysProcAttr { return nil }
