// Package stats holds the pure numerics of the benchmark: a mergeable
// log-bucketed latency histogram with percentiles, summaries of repeated runs
// (median and spread), and the split of a load over generator processes.
// Nothing here touches the clock or the network, so it is unit-tested without
// load.
package stats
