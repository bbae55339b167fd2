package proxy

import (
	"testing"

	"github.com/edgelb/edge/balance"
)

func TestRouteMatch(t *testing.T) {
	bp, _ := balance.NewPool(balance.PoolOptions{})
	pools := map[string]*Pool{}
	p := func(n string) *Pool {
		if pools[n] == nil {
			pools[n] = &Pool{Name: n, Balancer: bp}
		}
		return pools[n]
	}
	tbl, err := compileRoutes([]Route{
		{Hosts: []string{"chat.example.com"}, Pool: p("chat")},
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/admin", Pool: p("admin")},
		{Hosts: []string{"*.example.com"}, Pool: p("wild")},
		{Hosts: []string{"*.eu.example.com"}, Pool: p("eu")},
		{PathPrefix: "/any", Pool: p("any")},
		{Default: true, Pool: p("default")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ host, path, want string }{
		{"chat.example.com", "/", "chat"},
		{"Chat.Example.Com:443", "/x", "chat"},
		{"chat.example.com.", "/x", "chat"},
		{"chat.example.com", "/admin", "admin"},
		{"chat.example.com", "/admin/users", "admin"},
		{"chat.example.com", "/administrator", "chat"},
		{"chat.example.com", "/x/../admin", "admin"},
		{"a.example.com", "/", "wild"},
		{"a.b.example.com", "/", "wild"},
		{"x.eu.example.com", "/", "eu"},
		{"example.com", "/", "default"},
		{"other.org", "/any/thing", "any"},
		{"other.org", "/", "default"},
		{"[::1]:8443", "/", "default"},
	} {
		if got := matchedPool(tbl, tc.host, tc.path); got != tc.want {
			t.Errorf("match(%q, %q): got %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}

	noDefault, _ := compileRoutes([]Route{{Hosts: []string{"a.example.com"}, Pool: p("a")}})
	if r := noDefault.match("b.example.com", "/"); r != nil {
		t.Errorf("unknown host without default: got %s, want nil (421)", r.pool.name)
	}

	for _, bad := range [][]Route{
		{{Default: true, Pool: p("a")}, {Default: true, Pool: p("b")}},
		{{Hosts: []string{"a.*.com"}, Pool: p("a")}},
		{{Hosts: []string{"*"}, Pool: p("a")}},
		{{Hosts: []string{"a.com"}, Pool: nil}},
		{{Hosts: []string{"a.com"}, PathPrefix: "x", Pool: p("a")}},
		{{Hosts: []string{"a.com"}, Pool: p("a")}, {Hosts: []string{"A.com"}, Pool: p("b")}},
	} {
		if _, err := compileRoutes(bad); err == nil {
			t.Errorf("compileRoutes(%+v): got nil error", bad)
		}
	}
}

// TestRouteTiersFileFirst: a declared route never takes a host the file
// names (exactly or by a wildcard, whatever the path or the spelling), a
// path the file routes for any host, nor more than the hosts it declares
// from the default route; a declared route that duplicates or breaks never
// makes the table fail.
func TestRouteTiersFileFirst(t *testing.T) {
	bp, _ := balance.NewPool(balance.PoolOptions{})
	p := func(n string) *Pool { return &Pool{Name: n, Balancer: bp} }
	tbl, err := compileRoutes([]Route{
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/ws", Pool: p("file-chat")},
		{Hosts: []string{"*.corp.example.com"}, PathPrefix: "/", Pool: p("file-corp")},
		{PathPrefix: "/metrics", Pool: p("file-metrics")},
		{Default: true, Pool: p("default")},
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/api", Declared: true, Pool: p("decl-chat-api")},
		{Hosts: []string{"x.corp.example.com"}, PathPrefix: "/", Declared: true, Pool: p("decl-corp")},
		{Hosts: []string{"*.example.com"}, PathPrefix: "/", Declared: true, Pool: p("decl-wild")},
		{Hosts: []string{"new.example.com"}, PathPrefix: "/", Declared: true, Pool: p("decl-new")},
		{Hosts: []string{"New.Example.com."}, PathPrefix: "/", Declared: true, Pool: p("decl-new-again")},
		{Hosts: []string{"a.*.example.com"}, Declared: true, Pool: p("decl-bad")},
		{Default: true, Declared: true, Pool: p("decl-default")},
	})
	if err != nil {
		t.Fatalf("declared routes made the table fail: %v", err)
	}
	for _, tc := range []struct{ host, path, want string }{
		{"chat.example.com", "/ws", "file-chat"},
		{"chat.example.com", "/api", "default"}, // the file names the host: declared routes never see it
		{"CHAT.example.com.:443", "/api/x", "default"},
		{"x.corp.example.com", "/", "file-corp"},
		{"new.example.com", "/", "decl-new"},
		{"new.example.com", "/metrics", "file-metrics"},
		{"other.example.com", "/", "decl-wild"},
		{"other.org", "/", "default"},
	} {
		if got := matchedPool(tbl, tc.host, tc.path); got != tc.want {
			t.Errorf("match(%q, %q): got %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}
	if len(tbl.dropped) != 3 {
		t.Errorf("dropped: got %q, want the duplicate, the bad pattern and the declared default", tbl.dropped)
	}
}

// matchedPool is the name of the pool tbl routes host and path to, or
// "<nil>" when no route matches.
func matchedPool(tbl *routeTable, host, path string) string {
	if r := tbl.match(host, path); r != nil {
		return r.pool.name
	}
	return "<nil>"
}
