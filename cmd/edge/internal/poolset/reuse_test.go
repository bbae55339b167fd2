package poolset

import (
	"log/slog"
	"testing"

	"github.com/edgelb/edge/conf"
)

// filePool is a file pool named chat with one backend.
func filePool() conf.Pool {
	pc := conf.DefaultPool()
	pc.Name = "chat"
	pc.Backends = []conf.Backend{{ID: "b1", Address: "127.0.0.1:1"}}
	return pc
}

// build builds pc over running (nil for none).
func build(t *testing.T, pc conf.Pool, running map[string]*Pool) *Pool {
	t.Helper()
	b := Builder{Log: slog.New(slog.DiscardHandler)}
	out, err := b.Build(&conf.Config{Pools: []conf.Pool{pc}}, running)
	if err != nil {
		t.Fatal(err)
	}
	return out[pc.Name]
}

// TestReloadKeepsWhatItMay: a reload keeps a pool's balancer whatever
// changed, its limiter while the per-client limits are the same and its
// admission bucket while its rate and scope are; it changes nothing of the
// running pool until Apply.
func TestReloadKeepsWhatItMay(t *testing.T) {
	pc := filePool()
	pc.Limits.ConnectionRate, pc.Limits.ConnectionBurst = 100, 10
	first := build(t, pc, nil)
	if first.Reused() {
		t.Fatal("a new pool reports reused")
	}
	if _, err := Apply(map[string]*Pool{"chat": first}); err != nil {
		t.Fatal(err)
	}
	running := map[string]*Pool{"chat": first}

	same := build(t, pc, running)
	if !same.Reused() || same.Bal != first.Bal || same.Limiter != first.Limiter || same.Admit != first.Admit {
		t.Errorf("unchanged pool: reused %v, balancer %v, limiter %v, bucket %v kept; want all",
			same.Reused(), same.Bal == first.Bal, same.Limiter == first.Limiter, same.Admit == first.Admit)
	}

	perClient := pc
	perClient.Limits.MaxConnectionsPerClientIP = 3
	pcl := build(t, perClient, running)
	if pcl.Bal != first.Bal || pcl.Limiter == first.Limiter || pcl.Admit != first.Admit {
		t.Errorf("per-client limits changed: want the balancer and bucket kept and a new limiter")
	}

	fleetRate := pc
	fleetRate.Limits.ConnectionRateScope = conf.ScopeFleet
	fr := build(t, fleetRate, running)
	if fr.Admit == first.Admit {
		t.Errorf("rate became of fleet scope: want a new bucket, not the one running a local rate")
	}
	if fr.Spec.Fleet.Rate != 100 || fr.FleetPool().ConnectionRate != 100 {
		t.Errorf("fleet scope: %+v", fr.Spec.Fleet)
	}
	if len(first.Bal.Snapshot().Backends) != 1 {
		t.Errorf("building changed the running pool")
	}
}
