// Package gcpace paces Go's collector for a process holding many idle
// WebSockets.
//
// Such a process has a live heap of many small long-lived objects (one TLS
// state per connection), and GOGC=100 lets the heap grow to twice that
// before collecting: most of the memory per idle connection. What the heap
// may grow by between collections, the headroom, is memory every process
// pays, so the Tuner sizes it by the allocation rate rather than by the
// live heap: the least headroom that keeps the collector under a quarter
// percent of a core (Headroom). A burst of TLS handshakes allocates fast
// and gets what the fixed policy before it gave, 16 MiB for a heap under
// 32 MiB and half a bigger one, so a burst's CPU does not change; a
// process holding its connections with light traffic allocates little and
// keeps 2 MiB, or a tenth of its live heap. It reads /gc/heap/live:bytes
// and /gc/heap/allocs:bytes (runtime/metrics) every half second and
// changes the percent only when the wanted one moved by more than a tenth.
//
// ReturnMemory is what the proxy calls once a burst of new connections is
// over (proxy.Options.Quiet), whatever the traffic of those up: one forced
// collection gives back the garbage the handshakes left, which the
// collector would otherwise keep until the lower headroom is used up.
//
// cmd/edge runs the Tuner only when GOGC is not set: an operator's GOGC
// wins.
package gcpace
