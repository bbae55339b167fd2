package proxy

import (
	"syscall"
	"unsafe"
)

// canPeek reports that peekReady is implemented here.
const canPeek = true

// peekReady is the syscall.RawConn.Read callback that waits for readability
// without a buffer: it peeks one byte into the stack with
// MSG_PEEK|MSG_DONTWAIT. EAGAIN returns false (park until the poller says
// readable); data, EOF or an error return true and the following Read
// reports them.
func peekReady(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}
