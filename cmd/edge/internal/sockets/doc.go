// Package sockets is how edge binds its public sockets and budgets its
// descriptors.
//
// Listen binds with SO_REUSEPORT, so several edge processes share a port
// (and a new one binds before the old one has drained), and sets
// keep-alive on the listening socket: on Linux the kernel copies it to
// every accepted socket (tcp_create_openreq_child), which saves four
// setsockopt calls per connection. On Linux it also sets TCP_DEFER_ACCEPT,
// so a connection is accepted once its client has spoken and the first
// read finds its bytes. Where there is no SO_REUSEPORT (Windows, Solaris)
// a listener is an ordinary one.
//
// Clashes finds two addresses that would bind the same socket, which
// SO_REUSEPORT would otherwise let the kernel accept, spreading each one's
// clients over both. Resolve is the address net.Listen binds for a host
// and port; Overlap compares two.
//
// ConnBudget shares RLIMIT_NOFILE (DescriptorLimit) between proxied
// connections and client sockets the way HAProxy derives maxconn from
// ulimit-n.
package sockets
