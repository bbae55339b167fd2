//go:build race

package ready

import (
	"runtime"
	"unsafe"
)

// Under the race detector the raw calls report the buffer accesses the
// kernel makes, as unix.Read and unix.Write do, so a buffer reused while a
// call still uses it shows up in tests.

func raceKernelWrites(p []byte) {
	if len(p) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&p[0]), len(p))
	}
}

func raceKernelReads(p []byte) {
	if len(p) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(&p[0]), len(p))
	}
}
