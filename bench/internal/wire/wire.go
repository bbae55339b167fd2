// Package wire defines the line protocol between the benchmark orchestrator
// and its load-generator processes: the orchestrator writes commands, one per
// line, on the generator's standard input ("start", "stop"; end of input
// means quit), and the generator answers with Event values, one JSON object
// per line, on its standard output.
package wire

import (
	"time"

	"github.com/edgelb/edge/bench/internal/stats"
)

// Commands the orchestrator sends.
const (
	// CmdStart opens the measurement window.
	CmdStart = "start"
	// CmdStop closes it; the generator answers with an EventResult.
	CmdStop = "stop"
	// CmdEcho asks an idle-mode generator for one more small echo on every
	// connection it holds, at any time after EventReady; it answers with an
	// EventEchoed. It shows that connections held for a while still carry
	// traffic end to end.
	CmdEcho = "echo"
)

// Event kinds the generator sends.
const (
	// EventReady says every connection is established (and, for the connect
	// phase, every worker has warmed up) and the generator awaits CmdStart.
	EventReady = "ready"
	// EventResult carries the counts of the window closed by CmdStop.
	EventResult = "result"
	// EventFatal says the generator gave up; Error says why.
	EventFatal = "fatal"
	// EventEchoed answers CmdEcho: Messages counts the connections whose
	// echo came back, out of Conns.
	EventEchoed = "echoed"
)

// Event is one line written by a generator.
type Event struct {
	Event string `json:"event"`
	// Conns is the number of connections established (idle, echo, rate).
	Conns int `json:"conns,omitempty"`
	// Errors counts failed dials, handshakes, upgrades, reads or writes;
	// ErrorSample is the text of the first one.
	Errors      uint64 `json:"errors"`
	ErrorSample string `json:"error_sample,omitempty"`
	// Messages counts echoed messages inside the window (or, in an
	// EventEchoed, the connections that answered CmdEcho).
	Messages uint64 `json:"messages,omitempty"`
	// Ops counts completed connect+handshake+upgrade+echo cycles inside the
	// window (connect phase); Resumed counts those whose TLS session was
	// resumed (tls.ConnectionState.DidResume).
	Ops     uint64 `json:"ops,omitempty"`
	Resumed uint64 `json:"resumed,omitempty"`
	// Latency holds echo round trips (rate) or connect cycles (connect).
	Latency *stats.Histogram `json:"latency,omitempty"`
	// Cipher and Curve describe the negotiated TLS parameters of one
	// connection, so a report can show that every proxy was measured alike.
	Cipher string `json:"cipher,omitempty"`
	Curve  string `json:"curve,omitempty"`
	// Window is the measured duration between CmdStart and CmdStop.
	Window time.Duration `json:"window_ns,omitempty"`
	// Error is the reason of an EventFatal.
	Error string `json:"error,omitempty"`
}
