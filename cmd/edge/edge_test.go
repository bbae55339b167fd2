package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/discovery"
	"golang.org/x/sync/errgroup"
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
	e, err := newEdge(cfg, path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.closeListeners()
		e.admin.Close()
		_ = e.proxy.Close()
	})
	return e
}

// TestReloadRacesRegistry: a reload (SIGHUP) swaps the configuration while
// registry updates start and stop declared pools, whose watchers read the
// configuration's state directory; under -race the two must not conflict.
func TestReloadRacesRegistry(t *testing.T) {
	e := newTestEdge(t, `
listeners: [{address: "127.0.0.1:0"}]
admin: {address: "127.0.0.1:0"}
pools: [{name: app, backends: [{address: "127.0.0.1:9"}]}]
routes: [{default: true, pool: app}]
consul: {address: "127.0.0.1:9", routes: {allow_any_host: true}}
`)
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error { return e.dyn.declared.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		_ = g.Wait()
	})
	<-e.dyn.declared.Started()
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
		// Each update changes the declared pool's cap, so it is built
		// again, with a new watcher.
		for n := int64(1); ; n++ {
			select {
			case <-reloaded:
				return
			default:
			}
			e.dyn.declared.SetDeclared([]discovery.RouteDecl{{Service: "chat", PathPrefix: "/chat", MaxConns: n}})
		}
	}()
	wg.Wait()
	if got := len(e.dyn.pools()); got != 1 {
		t.Fatalf("declared pools: %d, want 1", got)
	}
}

// TestReloadWarnsOnlyWhenListenersChange: a reload that keeps the file's
// listeners says nothing of them; one that changes a listener setting
// says it waits for a restart.
func TestReloadWarnsOnlyWhenListenersChange(t *testing.T) {
	const base = `
listeners: [{address: "127.0.0.1:0", trusted_proxies: [10.0.0.0/8]%s}]
admin: {address: "127.0.0.1:0"}
pools: [{name: app, backends: [{address: "127.0.0.1:9"}]}]
routes: [{default: true, pool: app}]
`
	path := filepath.Join(t.TempDir(), "edge.yaml")
	write := func(extra string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf(base, extra)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	cfg, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	e, err := newEdge(cfg, path, slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.closeListeners()
		e.admin.Close()
		_ = e.proxy.Close()
	})
	const warning = "listener settings changed"
	if s := e.reload(); s != "serving; last reload ok" {
		t.Fatalf("reload: %s", s)
	}
	mu.Lock()
	if strings.Contains(logs.String(), warning) {
		t.Errorf("an unchanged file warned of changed listeners:\n%s", logs.String())
	}
	mu.Unlock()
	write(", max_header_bytes: 8192")
	if s := e.reload(); s != "serving; last reload ok" {
		t.Fatalf("reload: %s", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), warning) {
		t.Errorf("a changed listener was not reported:\n%s", logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
