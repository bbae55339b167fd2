package discovery

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/edgelb/edge/balance"
	"github.com/hashicorp/consul/api"
)

// DefaultWeightMetaKey is the service meta key that overrides the weight.
const DefaultWeightMetaKey = "edge-weight"

// maxWeight caps weights from the registry so one typo ("10000000") cannot
// starve every other member.
const maxWeight = 1000

// MemberOptions control the translation of a health answer into members.
type MemberOptions struct {
	// IncludeWarning also admits instances whose aggregated status is
	// "warning"; their weight is Weights.Warning. By default only passing
	// instances become members.
	IncludeWarning bool
	// WeightMetaKey names the service meta key that overrides
	// Service.Weights. Empty means DefaultWeightMetaKey; "-" disables it.
	WeightMetaKey string
}

// Warning is a problem with one instance of an answer; the instance is
// skipped (or its weight ignored) and the rest of the answer is used.
type Warning struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

func (w Warning) String() string { return w.ID + ": " + w.Message }

// Members translates a health-endpoint answer into the full, sorted member
// list of a pool. It is pure: the same entries always give the same list.
//
// Rules:
//   - An instance is a member when its aggregated check status is passing
//     (or warning, with IncludeWarning). Instances in maintenance mode are
//     critical and never members.
//   - ID is "node/serviceID": service IDs are unique per agent only, so two
//     nodes may both run "chat-1".
//   - The address is Service.Address, falling back to Node.Address (Consul's
//     own rule for an empty service address), joined with Service.Port.
//   - The weight is Weights.Passing (Weights.Warning for warning instances),
//     overridden by the WeightMetaKey meta value (an integer >= 1); absent or
//     0 means 1, and weights are capped at 1000.
//   - Instances with no usable address or port, or a duplicate ID, are skipped
//     with a Warning.
func Members(entries []*api.ServiceEntry, opts MemberOptions) ([]balance.Member, []Warning) {
	key := opts.WeightMetaKey
	if key == "" {
		key = DefaultWeightMetaKey
	}
	var (
		out   []balance.Member
		warns []Warning
		seen  = map[string]bool{}
	)
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		node := ""
		nodeAddr := ""
		if e.Node != nil {
			node, nodeAddr = e.Node.Node, e.Node.Address
		}
		id := node + "/" + e.Service.ID
		status := e.Checks.AggregatedStatus()
		weight := 0
		switch status {
		case api.HealthPassing:
			weight = e.Service.Weights.Passing
		case api.HealthWarning:
			if !opts.IncludeWarning {
				continue
			}
			weight = e.Service.Weights.Warning
		default:
			continue
		}
		host := e.Service.Address
		if host == "" {
			host = nodeAddr
		}
		if host == "" || strings.ContainsAny(host, " /") {
			warns = append(warns, Warning{ID: id, Message: fmt.Sprintf("unusable address %q", host)})
			continue
		}
		if e.Service.Port <= 0 || e.Service.Port > 65535 {
			warns = append(warns, Warning{ID: id, Message: fmt.Sprintf("unusable port %d", e.Service.Port)})
			continue
		}
		if key != "-" {
			if v, ok := e.Service.Meta[key]; ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 1 {
					warns = append(warns, Warning{ID: id, Message: fmt.Sprintf("meta %s=%q is not a weight >= 1; ignored", key, v)})
				} else {
					weight = n
				}
			}
		}
		switch {
		case weight < 1:
			weight = 1 // catalog registrations may carry no weights at all
		case weight > maxWeight:
			warns = append(warns, Warning{ID: id, Message: fmt.Sprintf("weight %d capped at %d", weight, maxWeight)})
			weight = maxWeight
		}
		if seen[id] {
			warns = append(warns, Warning{ID: id, Message: "duplicate instance"})
			continue
		}
		seen[id] = true
		out = append(out, balance.Member{ID: id, Addr: net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), Weight: weight})
	}
	sortMembers(out)
	return out, warns
}

// Listed returns the IDs (as Members makes them) of the instances an answer
// still lists and that are not in maintenance, whatever their checks say.
// An instance missing from it has left the registry for good (deregistered,
// or put in maintenance, service or node), as opposed to one whose check
// fails, which Members drops too but which may pass again in a moment.
func Listed(entries []*api.ServiceEntry) map[string]bool {
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		node := ""
		if e.Node != nil {
			node = e.Node.Node
		}
		if !inMaintenance(e) {
			out[node+"/"+e.Service.ID] = true
		}
	}
	return out
}

// inMaintenance reports whether an instance or its node is in maintenance
// mode: Consul adds a critical check with a reserved ID for it.
func inMaintenance(e *api.ServiceEntry) bool {
	for _, c := range e.Checks {
		if c != nil && (c.CheckID == api.NodeMaint || strings.HasPrefix(c.CheckID, api.ServiceMaintPrefix)) {
			return true
		}
	}
	return false
}

func sortMembers(m []balance.Member) {
	sort.Slice(m, func(i, j int) bool { return m[i].ID < m[j].ID })
}

func sameMembers(a, b []balance.Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
