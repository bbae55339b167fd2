//go:build !unix || aix

package main

import "errors"

// monotonicMicros has no CLOCK_MONOTONIC to read here (golang.org/x/sys/unix
// has no clock_gettime on AIX). No service manager speaks sd_notify on these
// systems, so a notifier never has a socket and never asks.
func monotonicMicros() (int64, error) { return 0, errors.ErrUnsupported }
