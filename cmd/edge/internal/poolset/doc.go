// Package poolset holds the running pools of edge's file and what a reload
// keeps of them. SpecOf is the one place a pool's settings are read: it
// maps a conf.Pool onto the options of balance, proxy and health, for the
// file's pools and the pools services declare in the registry alike.
// Builder.Build makes the running parts without touching any running pool,
// and its reuse rules are stated once, in Builder.New: a pool that ran
// under the same name keeps its balancer (live connections keep their
// *Backend and least-connections its memory, traefik#13913), its limiter
// while the per-client limits are unchanged, and its admission bucket
// while its rate and its fleet scope are. Apply then makes a reload live,
// and returns the backends the file no longer names.
package poolset
