// Package wire defines the line protocol between the benchmark orchestrator
// and its load-generator processes: the orchestrator writes commands, one per
// line, on the generator's standard input ("start", "stop"; end of input
// means quit), and the generator answers with Event values, one JSON object
// per line, on its standard output. It also fixes how a generator counts its
// source addresses, which the orchestrator must know to keep its listeners
// out of their range.
package wire
