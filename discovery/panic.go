package discovery

import "github.com/edgelb/edge/balance"

// panicDecision is the result of applying the panic threshold.
type panicDecision struct {
	publish []balance.Member // what the pool gets
	panic   bool             // the answer was held back
}

// applyPanic decides what to publish for a successful answer. base is the
// last set accepted without panic (what the pool held before the drop),
// answer the translated answer, threshold the minimum fraction of len(base)
// that an answer must keep (<= 0 disables), holding whether the panic hold
// time has run out (true means "still hold").
//
// The rule: when base is non-empty and the answer has fewer than
// threshold*len(base) members, publish base united with the answer (members
// of the answer win on address and weight), and report panic. A registry that
// flaps, a Consul server that restarted with an empty catalog, or a network
// partition between Consul and the checks then cannot empty a pool in one
// step; a genuine large scale-down takes effect once the hold time passes.
func applyPanic(base, answer []balance.Member, threshold float64, holding bool) panicDecision {
	if threshold <= 0 || len(base) == 0 || !holding ||
		float64(len(answer)) >= threshold*float64(len(base)) {
		return panicDecision{publish: answer}
	}
	byID := make(map[string]balance.Member, len(base)+len(answer))
	for _, m := range base {
		byID[m.ID] = m
	}
	for _, m := range answer {
		byID[m.ID] = m
	}
	out := make([]balance.Member, 0, len(byID))
	for _, m := range byID {
		out = append(out, m)
	}
	sortMembers(out)
	return panicDecision{publish: out, panic: true}
}
