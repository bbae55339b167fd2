//go:build !linux

package proxy

// canPeek is false here: directions fall back to blocking reads.
const canPeek = false

func peekReady(uintptr) bool { return true }
