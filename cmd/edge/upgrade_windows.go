package main

import "os"

// notifyUpgrade: Windows has no SIGUSR2, and edge cannot pass listening
// sockets there; upgrades are refused.
func notifyUpgrade(chan<- os.Signal) {}
