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

// VersionMetaKey is the service meta key that gives an instance's version,
// which canaries split connections by (balance.Canary).
const VersionMetaKey = "edge-version"

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
//   - The version is the VersionMetaKey meta value; one that
//     balance.CheckVersion refuses is dropped with a Warning (the instance
//     serves, of no version).
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
		m, warn, ok := member(e, key, opts.IncludeWarning)
		if warn != "" {
			warns = append(warns, Warning{ID: m.ID, Message: warn})
		}
		if !ok {
			continue
		}
		if seen[m.ID] {
			warns = append(warns, Warning{ID: m.ID, Message: "duplicate instance"})
			continue
		}
		seen[m.ID] = true
		out = append(out, m)
	}
	sortMembers(out)
	return out, warns
}

// member translates one instance: ok is false when it must not serve (its
// checks, or no usable address); warn says what was wrong with it, if
// anything, even when it serves.
func member(e *api.ServiceEntry, key string, includeWarning bool) (m balance.Member, warn string, ok bool) {
	node, nodeAddr := "", ""
	if e.Node != nil {
		node, nodeAddr = e.Node.Node, e.Node.Address
	}
	m.ID = node + "/" + e.Service.ID
	var weight int
	switch e.Checks.AggregatedStatus() {
	case api.HealthPassing:
		weight = e.Service.Weights.Passing
	case api.HealthWarning:
		if !includeWarning {
			return m, "", false
		}
		weight = e.Service.Weights.Warning
	default:
		return m, "", false
	}
	host := e.Service.Address
	if host == "" {
		host = nodeAddr
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return m, fmt.Sprintf("unusable address %q", host), false
	}
	if e.Service.Port <= 0 || e.Service.Port > 65535 {
		return m, fmt.Sprintf("unusable port %d", e.Service.Port), false
	}
	m.Addr = net.JoinHostPort(host, strconv.Itoa(e.Service.Port))
	m.Weight, warn = memberWeight(weight, e.Service.Meta, key)
	if v := e.Service.Meta[VersionMetaKey]; v != "" {
		if err := balance.CheckVersion(v); err != nil {
			warn = strings.TrimPrefix(warn+"; ", "; ") + "meta " + VersionMetaKey + ": " + err.Error() + "; ignored"
		} else {
			m.Version = v
		}
	}
	return m, warn, true
}

// memberWeight applies the meta override (key "-" turns it off) and the
// bounds: absent or 0 means 1, and weights are capped at maxWeight.
func memberWeight(weight int, meta map[string]string, key string) (int, string) {
	warn := ""
	if key != "-" {
		if v, ok := meta[key]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 {
				warn = fmt.Sprintf("meta %s=%q is not a weight >= 1; ignored", key, v)
			} else {
				weight = n
			}
		}
	}
	switch {
	case weight < 1:
		weight = 1 // catalog registrations may carry no weights at all
	case weight > maxWeight:
		warn = fmt.Sprintf("weight %d capped at %d", weight, maxWeight)
		weight = maxWeight
	}
	return weight, warn
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
