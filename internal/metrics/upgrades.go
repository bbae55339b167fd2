package metrics

import "github.com/prometheus/client_golang/prometheus"

// upgradeResults are edge_upgrades_total's results and handOffOutcomes
// edge_upgrade_connections_total's outcomes, each created at 0 so the
// alerts and the dashboard see them before the first upgrade.
var (
	upgradeResults  = []string{"ok", "failed", "refused"}
	handOffOutcomes = []string{"moved", "closed"}
)

// upgradeMetrics count process upgrades and what became of the
// connections the old process held.
type upgradeMetrics struct {
	upgrades *prometheus.CounterVec
	conns    *prometheus.CounterVec
}

// newUpgradeMetrics registers the upgrade series on reg, every label at 0.
func newUpgradeMetrics(reg *prometheus.Registry) *upgradeMetrics {
	u := &upgradeMetrics{
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_upgrades_total", Help: "Hand-offs to a new binary, by result: ok, failed (the new process did not start or become ready; this one keeps serving), refused (one was under way, or this process may not start one)."}, []string{"result"}),
		conns:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_upgrade_connections_total", Help: "Live WebSockets of the old process at an upgrade: moved to the new process, or closed there (1012, or on their own before theirs was due)."}, []string{"outcome"}),
	}
	reg.MustRegister(u.upgrades, u.conns)
	for _, r := range upgradeResults {
		u.upgrades.WithLabelValues(r)
	}
	for _, o := range handOffOutcomes {
		u.conns.WithLabelValues(o)
	}
	return u
}

// ProcessUpgraded counts one process upgrade in edge_upgrades_total by result:
// ok, failed or refused.
func (m *Registry) ProcessUpgraded(result string) { m.upgrade.upgrades.WithLabelValues(result).Inc() }

// HandedOff counts the live WebSockets of the old process at an upgrade in
// edge_upgrade_connections_total: moved to the new process, or closed.
func (m *Registry) HandedOff(moved, closed int) {
	m.upgrade.conns.WithLabelValues("moved").Add(float64(moved))
	m.upgrade.conns.WithLabelValues("closed").Add(float64(closed))
}
