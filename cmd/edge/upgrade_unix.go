//go:build !windows

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyUpgrade delivers SIGUSR2, the upgrade signal of HAProxy and nginx,
// on c. Registered before anything else so that an early SIGUSR2 is
// refused instead of killing the process (its default action).
func notifyUpgrade(c chan<- os.Signal) { signal.Notify(c, syscall.SIGUSR2) }
