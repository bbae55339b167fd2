package main

import (
	"errors"
	"net"
	"os"
)

// notifyUpgrade: Windows has no SIGUSR2, and edge cannot pass listening
// sockets there; upgrades are refused.
func notifyUpgrade(chan<- os.Signal) {}

// handoffPair is never reached on Windows: upgrades are refused first.
func handoffPair() (*net.UnixConn, *os.File, error) {
	return nil, nil, errors.ErrUnsupported
}
