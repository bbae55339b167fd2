package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

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
	// slotsLost reads the fleet upgrade slots lost (WatchUpgradeSlots);
	// nil until then, and the series reads 0.
	slotsLost atomic.Pointer[func() uint64]
}

// newUpgradeMetrics registers the upgrade series on reg, every label at 0.
func newUpgradeMetrics(reg *prometheus.Registry) *upgradeMetrics {
	u := &upgradeMetrics{
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_upgrades_total", Help: "Hand-offs to a new binary, by result: ok, failed (the new process did not start or become ready; this one keeps serving), refused (one was under way, or this process may not start one)."}, []string{"result"}),
		conns:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_upgrade_connections_total", Help: "Live WebSockets of the old process at an upgrade: moved to the new process, or closed there (1012, or on their own before theirs was due)."}, []string{"outcome"}),
	}
	lost := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "edge_upgrade_slots_lost_total",
		Help: "Fleet upgrade slots (upgrade.fleet_concurrency) this process lost while it held them: its Consul session ended before the hand-off did, so another edge may have started its upgrade meanwhile.",
	}, func() float64 {
		if f := u.slotsLost.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	reg.MustRegister(u.upgrades, u.conns, lost)
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

// WatchUpgradeSlots makes edge_upgrade_slots_lost_total read lost (the
// fleet's upgrade slots, fleet.UpgradeSlots.Lost).
func (m *Registry) WatchUpgradeSlots(lost func() uint64) { m.upgrade.slotsLost.Store(&lost) }

// HandedOff counts the live WebSockets of the old process at an upgrade in
// edge_upgrade_connections_total: moved to the new process, or closed.
func (m *Registry) HandedOff(moved, closed int) {
	m.upgrade.conns.WithLabelValues("moved").Add(float64(moved))
	m.upgrade.conns.WithLabelValues("closed").Add(float64(closed))
}
