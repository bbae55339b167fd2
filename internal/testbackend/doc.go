// Package testbackend is the small WebSocket backend that edge's tests, demo
// and benchmarks run behind the edge. It echoes every message, answers the
// text message "whoami" with its id and "headers" with a JSON object of the
// upgrade request's headers (so tests can see what the edge forwarded), and
// serves the same answers over plain HTTP at /whoami and /headers.
package testbackend
