package main

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestUpgraderRefusesUntilServing: a process that has not told its parent
// (or, without one, not started) that it serves refuses an upgrade, so a
// new process still waiting to become ready never starts a third one.
func TestUpgraderRefusesUntilServing(t *testing.T) {
	u := newUpgrader(time.Second, "", slog.New(slog.DiscardHandler))
	defer u.stop()
	if u.tf == nil {
		t.Skip("tableflip allows one upgrader per process, made by an earlier run of this test")
	}
	err := u.upgrade("", "test")
	var ue *upgradeError
	if !errors.As(err, &ue) || !ue.refused {
		t.Fatalf("upgrade before serving: got %v, want a refusal", err)
	}
	if got := u.state(); got != "this process is not serving yet" {
		t.Errorf("state before serving: %q", got)
	}
}
