package balance

import "net/netip"

// Hashing for client-IP affinity must be the same in every process of a
// fleet and across restarts, so that two edges given the same members send a
// client to the same backend. That rules out hash/maphash and any per-process
// seed: we use FNV-1a 64 (a fixed, documented function) followed by the
// splitmix64 finalizer, which spreads FNV's weak low bits over all 64 bits.

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnv1a64 hashes s with 64-bit FNV-1a.
func fnv1a64(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// splitmix64 is the finalizer of Vigna's SplitMix64 generator, a bijection
// with full avalanche.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hashID is the stable 64-bit identity hash of a backend ID.
func hashID(id string) uint64 { return splitmix64(fnv1a64(id)) }

// hashAddr hashes the 16-byte form of ip, so an IPv4 address and its
// IPv4-mapped IPv6 form hash alike; the zone is ignored.
func hashAddr(ip netip.Addr) uint64 {
	a := ip.As16()
	h := uint64(fnvOffset64)
	for _, c := range a {
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return splitmix64(h)
}
