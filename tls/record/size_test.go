package record

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestStateSize: the State stays small. It reports unsafe.Sizeof(State)
// and the heap bytes per State, active (AEADs built) and idle. An idle
// connection keeps its State: the key is not kept beside the secret, and
// the State fits the 208-byte size class (the next is 224).
func TestStateSize(t *testing.T) {
	if size := unsafe.Sizeof(State{}); size > 208 {
		t.Errorf("unsafe.Sizeof(State) = %d, want at most 208 (the 208-byte size class)", size)
	} else {
		t.Logf("unsafe.Sizeof(State) = %d bytes", size)
	}
	for _, suite := range suites {
		const n = 2000
		states := make([]*State, n)
		cvs := make([]*State, n)
		for i := range states {
			states[i], cvs[i] = statePair(t, suite)
			states[i].Open(cvs[i].Seal(nil, []byte("x")))
			states[i].Seal(nil, []byte("y"))
			cvs[i] = nil
		}
		active := heapAfterGC()
		for _, s := range states {
			s.Idle()
		}
		idle := heapAfterGC()
		runtime.KeepAlive(states)
		states = nil
		none := heapAfterGC()
		perActive, perIdle := float64(active-none)/n, float64(idle-none)/n
		t.Logf("suite %#04x: heap per State %.0f bytes active, %.0f bytes idle", suite, perActive, perIdle)
		if perIdle > 240 {
			t.Errorf("suite %#04x: an idle State holds %.0f heap bytes, want at most 240", suite, perIdle)
		}
	}
}

func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestNoAllocations: once the AEADs exist, Open and Seal allocate nothing
// per record (cap(dst) enough for Seal).
func TestNoAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	for _, suite := range suites {
		s, cv := statePair(t, suite)
		msg := message(1000, 1)
		in := make([]byte, 0, 2*MaxRecord)
		out := make([]byte, 0, 2*MaxRecord)
		s.Open(cv.Seal(in[:0], msg)) // build the AEADs
		s.Seal(out[:0], msg)
		allocs := testing.AllocsPerRun(100, func() {
			rec := cv.Seal(in[:0], msg)
			if _, _, err := s.Open(rec); err != nil {
				t.Fatal(err)
			}
			out = s.Seal(out[:0], msg)
		})
		if allocs != 0 {
			t.Errorf("suite %#04x: %.1f allocations per Seal+Open+Seal", suite, allocs)
		}
	}
}

// TestCiphersAfterIdle: Ciphers follows the AEADs: none before the first
// record, built by Seal and by Open, none again after Idle.
func TestCiphersAfterIdle(t *testing.T) {
	for _, suite := range suites {
		s, cv := statePair(t, suite)
		if s.Ciphers() {
			t.Fatalf("suite %#04x: a new State holds ciphers", suite)
		}
		s.Seal(nil, []byte("out"))
		if !s.Ciphers() {
			t.Fatalf("suite %#04x: no ciphers after Seal", suite)
		}
		s.Idle()
		if s.Ciphers() {
			t.Fatalf("suite %#04x: ciphers after Idle", suite)
		}
		if _, _, err := s.Open(cv.Seal(nil, []byte("in"))); err != nil {
			t.Fatal(err)
		}
		if !s.Ciphers() {
			t.Fatalf("suite %#04x: no ciphers after Open", suite)
		}
	}
}
