// Package gcpace paces Go's collector for a process holding many idle
// WebSockets.
//
// Such a process has a live heap of many small long-lived objects (one TLS
// state per connection), and GOGC=100 lets the heap grow to twice that
// before collecting: most of the memory per idle connection. The Tuner
// keeps the percent at 50, and raises it while the live heap is small, so
// the heap may always grow by at least 16 MiB between collections (at a
// few MiB of live heap 50 % would collect every few dozen handshakes, each
// cycle paying fixed costs). It reads /gc/heap/live:bytes (runtime/metrics)
// every half second and changes the percent only when the wanted one moved
// by more than a tenth.
//
// ReturnMemory is what the proxy calls once a burst of new connections is
// over (proxy.Options.Quiet): one forced collection gives back the garbage
// the handshakes left, which the collector would otherwise keep as
// headroom.
//
// cmd/edge runs the Tuner only when GOGC is not set: an operator's GOGC
// wins.
package gcpace
