package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
)

// newTestEdge builds an edge in-process from cfgText, bound to loopback,
// without serving; its listeners close with the test.
func newTestEdge(t *testing.T, cfgText string) *edge {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEdge(cfg, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.closeListeners()
		e.admin.close()
		_ = e.proxy.Close()
	})
	return e
}

// TestReloadRacesRegistry: a reload (SIGHUP) swaps the configuration while
// the registry starts a watcher for a declared pool, which reads the state
// directory of the configuration; under -race the two must not conflict.
func TestReloadRacesRegistry(t *testing.T) {
	e := newTestEdge(t, `
listeners: [{address: "127.0.0.1:0"}]
admin: {address: "127.0.0.1:0"}
pools: [{name: app, backends: [{address: "127.0.0.1:9"}]}]
routes: [{default: true, pool: app}]
`)
	client, err := discovery.NewClient(discovery.ClientOptions{Address: "127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	e.dyn.client = client
	bal := e.allPools()[0]
	var wg sync.WaitGroup
	wg.Add(2)
	reloaded := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(reloaded)
		for range 100 {
			if s := e.reload(); s != "serving; last reload ok" {
				t.Errorf("reload: %s", s)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-reloaded:
				return
			default:
			}
			if _, err := e.dyn.newWatcher("consul:chat", "chat", "", "", true, bal); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
}
