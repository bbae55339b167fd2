package ready

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw system calls for the readiness splice. Every call here is on a
// non-blocking descriptor and returns in microseconds, so it skips the
// runtime's entersyscall/exitsyscall. That matters with GOMAXPROCS=1: the
// runtime's monitor treats a P sitting in a system call for one of its
// ticks (20 µs, about as long as a loopback write) as blocked and hands it to
// another thread, and the poller then pays thread wake-ups and futex calls
// on top of every write (runtime/proc.go retake; golang/go#20168 describes
// the same hand-off cost). A raw call is never seen as blocking; a call
// that could block (connect, close with linger) never takes this path.

// rawRead is read(2) without the runtime's system call bookkeeping.
func rawRead(fd int, p []byte) (int, error) {
	n, err := rawIO(unix.SYS_READ, fd, p)
	raceKernelWrites(p[:n])
	return n, err
}

// rawWrite is write(2) without the runtime's system call bookkeeping.
func rawWrite(fd int, p []byte) (int, error) {
	raceKernelReads(p)
	return rawIO(unix.SYS_WRITE, fd, p)
}

func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawEpollPoll is epoll_wait(2) with a zero timeout: it never blocks.
func rawEpollPoll(epfd int, evs []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
