// Package sdnotify speaks the service manager's notification protocol
// (sd_notify(3)): one datagram per state change to the socket named by
// NOTIFY_SOCKET, a path or an abstract socket ("@name").
//
// FromEnv reads and unsets NOTIFY_SOCKET, so nothing edge starts talks to
// the manager in its name; a process an upgrade starts gets it back
// explicitly (Socket). Ready carries a one-line STATUS= for `systemctl
// status`; ReadyAsMain adds MAINPID= in the same datagram, so the manager
// never sees a ready process that is not the unit's main one; Reloading
// carries MONOTONIC_USEC from CLOCK_MONOTONIC on Linux, the clock systemd
// compares it with; Stopping marks the start of the drain.
//
// Without a manager every call does nothing; with one, a failure is
// returned for the caller to log and never stops edge.
package sdnotify
