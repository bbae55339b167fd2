package ready

import "net"

// wouldBlockError is what a taken-over socket returns instead of waiting.
// crypto/tls keeps its record state across errors whose Temporary() is
// true, so the next readiness event resumes a half-read record.
type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "socket would block" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

// ErrWouldBlock is what a Sock's Read returns when nothing is there.
var ErrWouldBlock net.Error = wouldBlockError{}
