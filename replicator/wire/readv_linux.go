package wire

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// vectoredRead returns a readv over nc (see frameReader), or nil when nc
// is no plain socket (TLS, in memory).
func vectoredRead(nc net.Conn) func(a, b []byte) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func(a, b []byte) (int, error) {
		var iov [2]syscall.Iovec
		iov[0].Base, iov[1].Base = &a[0], &b[0]
		iov[0].SetLen(len(a))
		iov[1].SetLen(len(b))
		var n uintptr
		var errno syscall.Errno
		if err := raw.Read(func(fd uintptr) bool {
			for {
				n, _, errno = syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), 2)
				switch errno {
				case syscall.EINTR:
					continue
				case syscall.EAGAIN:
					return false // wait until readable
				}
				return true
			}
		}); err != nil {
			return 0, err
		}
		if errno != 0 {
			return 0, os.NewSyscallError("readv", errno)
		}
		if n == 0 {
			return 0, io.EOF
		}
		return int(n), nil
	}
}
