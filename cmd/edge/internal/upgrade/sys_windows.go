package upgrade

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// supported: Windows has no descriptors to pass through exec; upgrades
// are refused there.
const supported = false

func dupConn(syscall.Conn, string) (*os.File, error) { return nil, errors.ErrUnsupported }

func inheritFD(int, string) (*os.File, error) { return nil, errors.ErrUnsupported }

func handoffPair() (*net.UnixConn, *os.File, error) { return nil, nil, errors.ErrUnsupported }
