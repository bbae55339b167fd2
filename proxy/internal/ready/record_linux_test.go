package ready

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/edgelb/edge/tls/record"
	"golang.org/x/sys/unix"
)

// TestRecConnTrickledRecord: a client announces a record of 2^14 bytes
// and sends it a byte at a time. Edge holds the part that came (at most
// one record, record.MaxRecord), and each byte must not cost a copy of
// all that came before into fresh memory: that makes the heap churn by
// the square of the record's length (about 128 MiB a record) for a few
// hundred KiB of packets.
func TestRecordConnTrickledRecord(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	st, err := record.New(record.TLS_AES_128_GCM_SHA256, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32))
	if err != nil {
		t.Fatal(err)
	}
	rc := NewRecordConn(NewSock(fds[0]), st, nil, nil, testBufs{})
	defer rc.sock.Close()
	const body = 1<<14 + 16
	buf := make([]byte, record.MaxRecord)
	send := func(b []byte) {
		if _, err := unix.Write(fds[1], b); err != nil {
			t.Fatal(err)
		}
		if n, err := rc.Read(buf); n != 0 || !errors.Is(err, ErrWouldBlock) {
			t.Fatalf("read %d, %v; want nothing yet", n, err)
		}
	}
	send([]byte{23, 3, 3, body >> 8, body & 0xff})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range body - 1 {
		send([]byte{0})
	}
	runtime.ReadMemStats(&after)
	if held := len(rc.tail); held != 5+body-1 {
		t.Fatalf("holding %d bytes, want %d", held, 5+body-1)
	}
	if churn := after.TotalAlloc - before.TotalAlloc; churn > 1<<20 {
		t.Fatalf("%d MiB allocated while %d bytes trickled in", churn>>20, body)
	}
}

// testBufs lends fresh buffers.
type testBufs struct{}

func (testBufs) GetBuf() *[]byte {
	b := make([]byte, record.MaxRecord)
	return &b
}

func (testBufs) PutBuf(*[]byte) {}
