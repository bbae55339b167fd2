package sockets

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// Bind is one address edge will bind, with where it comes from (a path in
// the file, for the message).
type Bind struct {
	Where, Addr string
}

// Problem is a Bind that does not resolve, or that binds the same socket
// as an earlier one.
type Problem struct {
	Where string
	Err   error
}

// Clashes resolves binds as net.Listen will and reports, in order, every
// one that does not resolve and every one that would bind the same socket
// as an earlier one. SO_REUSEPORT (set by Listen so that several edge
// processes can share a port) lets the kernel accept both, and then it
// spreads connections between them: a plain listener on localhost:P and a
// TLS one on 127.0.0.1:P would answer each other's clients. Port 0 (any
// free port) never clashes.
func Clashes(ctx context.Context, binds []Bind) []Problem {
	type socket struct {
		Bind
		ap netip.AddrPort
	}
	var out []Problem
	var socks []socket
	for _, b := range binds {
		ap, err := Resolve(ctx, b.Addr)
		if err != nil {
			out = append(out, Problem{b.Where, err})
			continue
		}
		if ap.Port() != 0 {
			socks = append(socks, socket{b, ap})
		}
	}
	for j := range socks {
		for i := range j {
			a, b := socks[i], socks[j]
			if Overlap(a.ap, b.ap) {
				out = append(out, Problem{b.Where, fmt.Errorf("%s (%s) is the same socket as %s %s (%s): edge would bind it twice",
					b.Addr, b.ap, a.Where, a.Addr, a.ap)})
			}
		}
	}
	return out
}

// Overlap reports whether two bound addresses take the same connections:
// same port, and the same address or a wildcard on either side (Go listens
// on a wildcard in dual stack).
func Overlap(a, b netip.AddrPort) bool {
	if a.Port() != b.Port() {
		return false
	}
	x, y := a.Addr().Unmap(), b.Addr().Unmap()
	return x == y || x.IsUnspecified() || y.IsUnspecified()
}

// Resolve returns the address net.Listen("tcp", addr) binds: an empty host
// is the wildcard, a name is resolved and its first IPv4 address taken,
// else its first address (as net.Listen does).
func Resolve(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s: bad port: %w", addr, err)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(p)), nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s: cannot resolve %s: %w", addr, host, err)
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("%s: %s has no address", addr, host)
	}
	pick := ips[0]
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			pick = ip
			break
		}
	}
	return netip.AddrPortFrom(pick.Unmap(), uint16(p)), nil
}
