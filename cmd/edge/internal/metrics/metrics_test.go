package metrics

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/discovery"
	"github.com/edgelb/edge/fleet"
	"github.com/edgelb/edge/proxy"
	edgetls "github.com/edgelb/edge/tls"
)

// series returns every series of name as "k=v,k=v" (sorted labels) to its
// value.
func series(t *testing.T, m *Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := -1.0
			switch {
			case mt.Counter != nil:
				v = mt.Counter.GetValue()
			case mt.Gauge != nil:
				v = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				v = float64(mt.Histogram.GetSampleCount())
			}
			out[strings.Join(ls, ",")] = v
		}
	}
	return out
}

// TestPoolGaugesAtScrape: the pool gauges are read from the pools at
// scrape time: a member that leaves stops being reported, except for its
// live connections, which keep their series until they close.
func TestPoolGaugesAtScrape(t *testing.T) {
	p, err := balance.NewPool(balance.PoolOptions{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1", Weight: 2}, {ID: "b2", Addr: "127.0.0.1:2"}}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Pools: func() []*balance.Pool { return []*balance.Pool{p} }})
	if got := series(t, m, "edge_pool_backends"); got["pool=app"] != 2 {
		t.Fatalf("edge_pool_backends %v, want app 2", got)
	}
	if got := series(t, m, "edge_backend_weight"); got["address=127.0.0.1:1,backend=b1,pool=app"] != 2 {
		t.Fatalf("edge_backend_weight %v, want b1 at 2", got)
	}
	var b2 *balance.Backend
	for _, b := range p.Snapshot().Backends {
		if b.ID() == "b2" {
			b2 = b
		}
	}
	b2.Acquire()
	if _, err := p.UpdateLeft([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1", Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	if got := series(t, m, "edge_backend_weight"); len(got) != 1 {
		t.Fatalf("edge_backend_weight %v after b2 left, want b1 only", got)
	}
	if got := series(t, m, "edge_backend_active_connections"); got["address=127.0.0.1:2,backend=b2,pool=app"] != 1 {
		t.Fatalf("edge_backend_active_connections %v, want b2's live connection", got)
	}
	b2.Release()
	if got := series(t, m, "edge_backend_active_connections"); len(got) != 1 {
		t.Fatalf("edge_backend_active_connections %v after b2's last connection, want b1 only", got)
	}
}

// TestInitSeriesAndForgetPool: every known label set of a pool exists at
// zero before its first event, and goes with the pool.
func TestInitSeriesAndForgetPool(t *testing.T) {
	m := New(Options{})
	m.InitSeries([]string{"app", "other"}, []string{"public"})
	closes := series(t, m, "edge_websocket_closes_total")
	for _, k := range []string{"code=1000,pool=app,side=client", "code=none,pool=app,side=edge", "code=other,pool=app,side=backend"} {
		if v, ok := closes[k]; !ok || v != 0 {
			t.Errorf("edge_websocket_closes_total{%s} = %v, %v; want 0, present", k, v, ok)
		}
	}
	if got := series(t, m, "edge_tls_handshake_failures_total"); got["listener=public,reason=protocol_version"] != 0 || len(got) != len(tlsFailureReasons) {
		t.Errorf("edge_tls_handshake_failures_total %v, want every reason at 0", got)
	}
	if got := series(t, m, "edge_config_reloads_total"); len(got) != 3 {
		t.Errorf("edge_config_reloads_total %v, want ok, partial and error", got)
	}
	m.ForgetPool("app")
	for _, name := range []string{"edge_websocket_closes_total", "edge_websocket_pings_sent_total", "edge_discovery_updates_total", "edge_websocket_upgrade_duration_seconds"} {
		for k := range series(t, m, name) {
			if strings.Contains(k, "pool=app") {
				t.Errorf("%s{%s} left after ForgetPool", name, k)
			}
		}
		if !hasPool(series(t, m, name), "other") {
			t.Errorf("%s lost the other pool's series", name)
		}
	}
}

func hasPool(s map[string]float64, pool string) bool {
	for k := range maps.Keys(s) {
		if strings.Contains(k, "pool="+pool) {
			return true
		}
	}
	return false
}

// TestObserverCounts: a connection that moved to another process counts
// as closed here, but its life and bytes are counted where it ends.
func TestObserverCounts(t *testing.T) {
	m := New(Options{})
	var o proxy.Observer = m
	o.ConnClosed("app", "b1", string(proxy.ReasonMoved), time.Minute, 10, 20)
	o.ConnClosed("app", "b1", string(proxy.ReasonDrain), time.Second, 1, 2)
	if got := series(t, m, "edge_connections_closed_total"); got["pool=app,reason=moved"] != 1 || got["pool=app,reason=drain"] != 1 {
		t.Errorf("edge_connections_closed_total %v, want one moved and one drain", got)
	}
	if got := series(t, m, "edge_bytes_total"); got["direction=in,pool=app"] != 1 || got["direction=out,pool=app"] != 2 {
		t.Errorf("edge_bytes_total %v, want only the drained connection's bytes", got)
	}
	if got := series(t, m, "edge_connection_duration_seconds"); got["pool=app"] != 1 {
		t.Errorf("edge_connection_duration_seconds %v, want one observation", got)
	}
	m.ProbeResult("app", "b1", false, time.Millisecond)
	m.Reloaded("partial")
	if got := series(t, m, "edge_health_probes_total"); got["backend=b1,pool=app,result=fail"] != 1 {
		t.Errorf("edge_health_probes_total %v", got)
	}
	if got := series(t, m, "edge_config_reloads_total"); got["result=partial"] != 1 {
		t.Errorf("edge_config_reloads_total %v", got)
	}
}

// TestStateGauges: the state gauges are what the sources say at scrape
// time; a missing source reports nothing.
func TestStateGauges(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := New(Options{})
	ready := true
	m.WatchState(State{
		Ready:    func() bool { return ready },
		Draining: func() bool { return false },
		Discovery: func() []discovery.Status {
			return []discovery.Status{{Pool: "app", LastContact: now.Add(-time.Second)}}
		},
		Now:          func() time.Time { return now },
		Listeners:    func() []ListenerConns { return []ListenerConns{{Name: "public", Open: 7}} },
		ClosePending: func() int { return 3 },
		TLS: func() []ListenerTLS {
			return []ListenerTLS{{Name: "public", RotateEvery: time.Hour, Status: edgetls.Status{
				Tickets:      edgetls.TicketStatus{Enabled: true, LastChange: now.Add(-time.Minute), Source: "generated"},
				Certificates: []edgetls.CertStatus{{CertFile: "a.pem", Served: true, NotAfter: now.Add(time.Hour)}},
			}}, {Name: "fleet", Status: edgetls.Status{
				Tickets: edgetls.TicketStatus{Enabled: true, Source: "source", Refused: "unopened"},
			}}, {Name: "fleet-ok", Status: edgetls.Status{
				Tickets: edgetls.TicketStatus{Enabled: true, Source: "source", LastError: "consul down"},
			}}}
		},
	})
	want := map[string]map[string]float64{
		"edge_ready":    {"": 1},
		"edge_draining": {"": 0},
		"edge_discovery_last_success_timestamp_seconds":    {"pool=app": float64(now.Unix() - 1)},
		"edge_listener_active_connections":                 {"listener=public": 7},
		"edge_drain_connections_pending":                   {"": 3},
		"edge_tls_ticket_key_age_seconds":                  {"listener=public": 60},
		"edge_tls_ticket_key_rotation_interval_seconds":    {"listener=public": 3600},
		"edge_tls_ticket_keys_refused":                     {"listener=fleet": 1, "listener=fleet-ok": 0},
		"edge_tls_certificate_served":                      {"cert_file=a.pem,listener=public": 1},
		"edge_tls_certificate_not_after_timestamp_seconds": {"cert_file=a.pem,listener=public": float64(now.Unix() + 3600)},
		"edge_tls_record_layer_total":                      {},
	}
	for name, w := range want {
		if got := series(t, m, name); !maps.Equal(got, w) {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
	ready = false
	if got := series(t, m, "edge_ready"); got[""] != 0 {
		t.Errorf("edge_ready %v after readiness went, want 0", got)
	}
}

// TestFailureSeriesExistBeforeAFailure: every member's dial-failure,
// probe and opened counters exist at zero before any event, for the
// members a pool has at start and for those a discovery update adds; a
// certificate that names a responder reports 0 for its staple until it
// has one, and one without a responder reports nothing.
func TestFailureSeriesExistBeforeAFailure(t *testing.T) {
	p, err := balance.NewPool(balance.PoolOptions{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Pools: func() []*balance.Pool { return []*balance.Pool{p} }})
	m.InitBackends(p)
	if err := p.Update([]balance.Member{{ID: "b1", Addr: "127.0.0.1:1"}, {ID: "b2", Addr: "127.0.0.1:2"}}); err != nil {
		t.Fatal(err)
	}
	m.Updated("app", 2)
	for name, want := range map[string][]string{
		"edge_dial_failures_total":      {"backend=b1,pool=app", "backend=b2,pool=app"},
		"edge_connections_opened_total": {"backend=b1,pool=app", "backend=b2,pool=app"},
		"edge_health_probes_total":      {"backend=b1,pool=app,result=fail", "backend=b2,pool=app,result=fail", "backend=b2,pool=app,result=pass"},
	} {
		got := series(t, m, name)
		for _, k := range want {
			if v, ok := got[k]; !ok || v != 0 {
				t.Errorf("%s{%s}: %v, %v; want a series at 0 before any event", name, k, v, ok)
			}
		}
	}
	for _, c := range []struct {
		o    edgetls.OCSPStatus
		want float64
		ok   bool
	}{
		{edgetls.OCSPStatus{State: "pending"}, 0, true},
		{edgetls.OCSPStatus{State: "error"}, 0, true},
		{edgetls.OCSPStatus{State: "good", Stapled: true, NextUpdate: time.Unix(1000, 0)}, 1000, true},
		{edgetls.OCSPStatus{State: "none"}, 0, false},
		{edgetls.OCSPStatus{State: "disabled"}, 0, false},
	} {
		if got, ok := stapleNext(c.o); got != c.want || ok != c.ok {
			t.Errorf("stapleNext(%+v) = %v, %v; want %v, %v", c.o, got, ok, c.want, c.ok)
		}
	}
}

// TestFleetActionGauges: the fleet's actions are counted by state, every
// state has a series at 0 before any action, and unapplied and refused
// entries are reported.
func TestFleetActionGauges(t *testing.T) {
	m := New(Options{})
	st := fleet.ActionsStatus{}
	m.WatchFleetActions(func() fleet.ActionsStatus { return st })
	if got := series(t, m, "edge_fleet_actions"); len(got) != 3 || got["state=drain"] != 0 || got["state=disabled"] != 0 || got["state=ready"] != 0 {
		t.Errorf("no actions: %v, want drain, disabled and ready at 0", got)
	}
	st = fleet.ActionsStatus{Refused: 2, Actions: []fleet.ActionDoc{
		{Pool: "app", Backend: "b1", State: "drain", Applied: true},
		{Pool: "app", Backend: "b2", State: "drain"},
		{Pool: "app", Backend: "b3", State: "ready", Weight: 5, Applied: true},
	}}
	if got := series(t, m, "edge_fleet_actions"); got["state=drain"] != 2 || got["state=ready"] != 1 || got["state=disabled"] != 0 {
		t.Errorf("actions by state: %v", got)
	}
	if got := series(t, m, "edge_fleet_actions_unapplied"); got[""] != 1 {
		t.Errorf("unapplied: %v, want 1", got)
	}
	if got := series(t, m, "edge_fleet_actions_refused"); got[""] != 2 {
		t.Errorf("refused: %v, want 2", got)
	}
}

// TestUpgradeCounters: every upgrade result and hand-off outcome has a
// series at 0 before the first upgrade, and each upgrade and hand-off is
// counted under its own label.
func TestUpgradeCounters(t *testing.T) {
	m := New(Options{})
	if got := series(t, m, "edge_upgrades_total"); len(got) != 3 || got["result=ok"] != 0 || got["result=failed"] != 0 || got["result=refused"] != 0 {
		t.Errorf("before an upgrade: %v, want ok, failed and refused at 0", got)
	}
	if got := series(t, m, "edge_upgrade_connections_total"); len(got) != 2 || got["outcome=moved"] != 0 || got["outcome=closed"] != 0 {
		t.Errorf("before a hand-off: %v, want moved and closed at 0", got)
	}
	if got := series(t, m, "edge_upgrade_slots_lost_total"); len(got) != 1 || got[""] != 0 {
		t.Errorf("before a fleet slot: %v, want 0", got)
	}
	m.WatchUpgradeSlots(func() uint64 { return 3 })
	if got := series(t, m, "edge_upgrade_slots_lost_total"); got[""] != 3 {
		t.Errorf("slots lost: %v, want 3", got)
	}
	m.ProcessUpgraded("refused")
	m.ProcessUpgraded("refused")
	m.ProcessUpgraded("ok")
	m.HandedOff(7, 2)
	m.HandedOff(1, 0)
	if got := series(t, m, "edge_upgrades_total"); got["result=ok"] != 1 || got["result=failed"] != 0 || got["result=refused"] != 2 {
		t.Errorf("upgrades: %v, want ok 1, failed 0, refused 2", got)
	}
	if got := series(t, m, "edge_upgrade_connections_total"); got["outcome=moved"] != 8 || got["outcome=closed"] != 2 {
		t.Errorf("hand-offs: %v, want moved 8, closed 2", got)
	}
}
