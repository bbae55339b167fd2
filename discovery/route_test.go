package discovery

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/hostname"
	"github.com/hashicorp/consul/api"
)

func TestParseRouteDecl(t *testing.T) {
	tests := []struct {
		name    string
		tags    []string
		meta    map[string]string
		want    RouteDecl
		wantErr string // substring; "" means no error
	}{
		{name: "nothing declared", tags: []string{"v1", "primary"}, meta: map[string]string{"version": "3"}},
		{name: "marker alone declares nothing", tags: []string{"edge"}},
		{
			name: "tags",
			tags: []string{"edge.host=Chat.Example.com", "edge.path=/ws", "edge.sticky=cookie", "edge.max-conns=100", "other"},
			want: RouteDecl{Hosts: []string{"chat.example.com"}, PathPrefix: "/ws", Sticky: balance.Cookie.String(), MaxConns: 100},
		},
		{
			name: "hosts accumulate, comma lists, wildcard, sorted, deduplicated",
			tags: []string{"edge.host=b.example.com,*.example.org", "edge.host=a.example.com", "edge.host=b.example.com"},
			want: RouteDecl{Hosts: []string{"*.example.org", "a.example.com", "b.example.com"}, PathPrefix: "/"},
		},
		{
			name: "meta",
			tags: []string{"edge"},
			meta: map[string]string{"edge-route-host": "chat.example.com", "edge-route-path": "/socket", "edge-route-sticky": "client_ip", "edge-route-max-conns": "0"},
			want: RouteDecl{Hosts: []string{"chat.example.com"}, PathPrefix: "/socket", Sticky: balance.ClientIP.String()},
		},
		{
			name: "tag and meta agree",
			tags: []string{"edge.path=/ws"},
			meta: map[string]string{"edge-route-path": "/ws"},
			want: RouteDecl{PathPrefix: "/ws"},
		},
		{
			name: "keys case-insensitive, values trimmed",
			tags: []string{"EDGE.Path= /ws ", "Edge.STICKY=None"},
			want: RouteDecl{PathPrefix: "/ws", Sticky: balance.LeastConn.String()},
		},
		{
			name: "pool settings: per-client cap and edge's own health check",
			tags: []string{"edge.path=/ws", "edge.max-conns-per-client-ip=3", "edge.health=TCP", "edge.health-interval=250ms"},
			want: RouteDecl{PathPrefix: "/ws", MaxConnsPerClientIP: 3, Health: "tcp", HealthInterval: 250 * time.Millisecond},
		},
		{name: "bad per-client cap", tags: []string{"edge.path=/", "edge.max-conns-per-client-ip=x"}, wantErr: "max-conns-per-client-ip"},
		{name: "bad health", tags: []string{"edge.path=/", "edge.health=t c p"}, wantErr: "want tcp, http or websocket"},
		{name: "health interval too short", tags: []string{"edge.path=/", "edge.health-interval=1ms"}, wantErr: "want a duration from 100ms"},
		{name: "tag and meta conflict", tags: []string{"edge.path=/a"}, meta: map[string]string{"edge-route-path": "/b"}, wantErr: "conflicts with"},
		{name: "two paths", tags: []string{"edge.path=/a", "edge.path=/b"}, wantErr: "conflicts with"},
		{name: "unknown key (typo)", tags: []string{"edge.hots=a.example.com"}, wantErr: `unknown route key "hots"`},
		{name: "unknown meta key", meta: map[string]string{"edge-route-weight": "3"}, wantErr: "unknown route key"},
		{name: "no equals sign", tags: []string{"edge.host"}, wantErr: "want edge.<key>=<value>"},
		{name: "sticky only is not a route", tags: []string{"edge.sticky=cookie"}, wantErr: "needs edge.host or edge.path"},
		{name: "bad sticky", tags: []string{"edge.path=/", "edge.sticky=source"}, wantErr: "want none, cookie or client_ip"},
		{name: "bad max-conns", tags: []string{"edge.path=/", "edge.max-conns=-1"}, wantErr: "want an integer"},
		{name: "relative path", tags: []string{"edge.path=ws"}, wantErr: "must start with /"},
		{name: "path with query", tags: []string{"edge.path=/ws?x=1"}, wantErr: "not allowed"},
		{name: "path with dot segment", tags: []string{"edge.path=/a/../b"}, wantErr: "dot segments"},
		{
			name: "hosts canonical: case and trailing dot, as in the file and the request",
			tags: []string{"edge.host=Chat.Example.COM.", "edge.host=chat.example.com"},
			want: RouteDecl{Hosts: []string{"chat.example.com"}, PathPrefix: "/"},
		},
		{name: "host with port", tags: []string{"edge.host=chat.example.com:443"}, wantErr: "has a port"},
		{name: "host with percent-encoding", tags: []string{"edge.host=ch%61t.example.com"}, wantErr: "character"},
		{name: "host not ASCII (write the A-label)", tags: []string{"edge.host=b\u00fccher.example"}, wantErr: "character"},
		{name: "host with two trailing dots", tags: []string{"edge.host=chat.example.com.."}, wantErr: "empty label"},
		{name: "empty host", tags: []string{"edge.host="}, wantErr: "empty"},
		{name: "host with empty label", tags: []string{"edge.host=a..b"}, wantErr: "empty label"},
		{name: "inner wildcard", tags: []string{"edge.host=a.*.com"}, wantErr: "wildcard"},
		{name: "all errors reported", tags: []string{"edge.hots=x", "edge.path=ws"}, wantErr: "hots"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRouteDecl(tt.tags, tt.meta)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error: got %v, want one containing %q", err, tt.wantErr)
				}
				if got.Declared() {
					t.Errorf("decl on error: got %+v, want zero", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: got %v, want nil", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseRouteDecl(f *testing.F) {
	// A complete tag declaration.
	f.Add("edge.host=chat.example.com,*.example.org", "edge.path=/ws", "edge-route-sticky", "cookie")
	// Meta-only declaration behind the marker tag.
	f.Add("edge", "", "edge-route-path", "/socket")
	// Pool settings: per-client cap, health check and its interval.
	f.Add("edge.max-conns-per-client-ip=2", "edge.health=tcp", "edge-route-health-interval", "150ms")
	// Conflict between tag and meta.
	f.Add("edge.path=/a", "edge.max-conns=10", "edge-route-path", "/b")
	// Typo, missing '=', odd bytes.
	f.Add("edge.hots=x", "edge.host", "edge-route-host", "a..b\x00")
	// Unrelated tags and meta.
	f.Add("v1", "primary", "version", "3")
	// Spellings of one host that only normalisation makes equal.
	f.Add("edge.host=Chat.Example.COM.", "edge.host=chat.example.com", "edge-route-host", "CHAT.example.com")
	// A wildcard, a port, an IPv6 literal, a U-label, percent-encoding.
	f.Add("edge.host=*.Apps.example.com.", "edge.host=a.example.com:80", "edge-route-host", "[::1],b\u00fccher.example,%41.example")
	f.Fuzz(func(t *testing.T, tag1, tag2, metaKey, metaValue string) {
		d, err := ParseRouteDecl([]string{tag1, tag2}, map[string]string{metaKey: metaValue})
		if err != nil {
			if d.Declared() {
				t.Fatalf("error %v with a declared route %+v", err, d)
			}
			return
		}
		if !d.Declared() {
			return
		}
		if !strings.HasPrefix(d.PathPrefix, "/") {
			t.Fatalf("path %q does not start with /", d.PathPrefix)
		}
		for _, h := range d.Hosts {
			if h == "" || strings.ContainsAny(h, " /:,") || h != strings.ToLower(h) {
				t.Fatalf("host %q is not a clean lower-case name", h)
			}
			if c, err := hostname.Pattern(h); err != nil || c != h {
				t.Fatalf("host %q is not canonical: Pattern gives %q, %v", h, c, err)
			}
		}
		// Whatever the spelling in the file, a file host equal to a
		// declared one takes the declaration out, and so does a file
		// route for any host at "/".
		if len(d.Hosts) > 0 {
			fileHost := strings.ToUpper(d.Hosts[0]) + "."
			policy := RoutePolicy{AllowedHosts: d.Hosts, File: []FileRoute{{Hosts: []string{fileHost}, PathPrefix: "/"}}}
			if got, refused := AdmitRoutes([]RouteDecl{d}, policy, nil); len(got) != 0 || len(refused) != 1 {
				t.Fatalf("declaration %+v beside file host %q: admitted %+v, refused %+v", d, fileHost, got, refused)
			}
		}
		anyHost := RoutePolicy{AllowedHosts: []string{"*.example.com"}, AllowAnyHost: true, File: []FileRoute{{PathPrefix: "/"}}}
		if got, _ := AdmitRoutes([]RouteDecl{d}, anyHost, nil); len(got) != 0 {
			t.Fatalf("declaration %+v admitted under a file route for any host at /", d)
		}
		switch d.Sticky {
		case "", balance.LeastConn.String(), balance.Cookie.String(), balance.ClientIP.String():
		default:
			t.Fatalf("sticky %q", d.Sticky)
		}
		if d.MaxConns < 0 {
			t.Fatalf("max conns %d", d.MaxConns)
		}
		// Parsing is deterministic.
		again, err := ParseRouteDecl([]string{tag1, tag2}, map[string]string{metaKey: metaValue})
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("second parse: got %+v, %v, want %+v", again, err, d)
		}
	})
}

func inst(node, id string, tags []string, meta map[string]string) *api.CatalogService {
	return &api.CatalogService{Node: node, ServiceID: id, ServiceTags: tags, ServiceMeta: meta}
}

func TestServiceDecl(t *testing.T) {
	a := []string{"edge.host=a.example.com"}
	tests := []struct {
		name   string
		insts  []*api.CatalogService
		wantOK bool
		want   RouteDecl
		warns  int
	}{
		{"agreeing instances", []*api.CatalogService{inst("n1", "x1", a, nil), inst("n2", "x2", a, nil)}, true,
			RouteDecl{Service: "x", Hosts: []string{"a.example.com"}, PathPrefix: "/"}, 0},
		{"silent instance abstains", []*api.CatalogService{inst("n1", "x1", a, nil), inst("n2", "x2", nil, nil)}, true,
			RouteDecl{Service: "x", Hosts: []string{"a.example.com"}, PathPrefix: "/"}, 0},
		{"malformed instance ignored", []*api.CatalogService{inst("n1", "x1", a, nil), inst("n2", "x2", []string{"edge.hots=a"}, nil)}, true,
			RouteDecl{Service: "x", Hosts: []string{"a.example.com"}, PathPrefix: "/"}, 1},
		{"only malformed", []*api.CatalogService{inst("n2", "x2", []string{"edge.path=ws"}, nil)}, false, RouteDecl{}, 1},
		{"disagreeing instances", []*api.CatalogService{inst("n1", "x1", a, nil), inst("n2", "x2", []string{"edge.host=b.example.com"}, nil)}, false, RouteDecl{}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, warns := serviceDecl("x", tt.insts)
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) || len(warns) != tt.warns {
				t.Errorf("got %+v ok=%v warns=%v, want %+v ok=%v %d warnings", got, ok, warns, tt.want, tt.wantOK, tt.warns)
			}
		})
	}
}

// TestAdmitRoutesConflicts: between services claiming the same host and
// path prefix, the older registration keeps it, whatever the names; a
// service holding a route keeps it while it declares it; losers are
// refused whole, with a reason naming the owner.
func TestAdmitRoutesConflicts(t *testing.T) {
	all := RoutePolicy{AllowedHosts: []string{"*.example.com"}, AllowAnyHost: true}
	decls := []RouteDecl{
		{Service: "zzz-legit", Hosts: []string{"chat.example.com"}, PathPrefix: "/", Registered: 10},
		{Service: "aaa-evil", Hosts: []string{"chat.example.com"}, PathPrefix: "/", Registered: 20},
		{Service: "beta", Hosts: []string{"a.example.com", "b.example.com"}, PathPrefix: "/", Registered: 40},
		{Service: "alpha", Hosts: []string{"b.example.com"}, PathPrefix: "/", Registered: 30},
		{Service: "gamma", Hosts: []string{"b.example.com"}, PathPrefix: "/ws", Registered: 50},
		{Service: "delta", PathPrefix: "/api", Registered: 60},
	}
	got, refused := AdmitRoutes(decls, all, nil)
	if names := services(got); !reflect.DeepEqual(names, []string{"delta", "alpha", "gamma", "zzz-legit"}) {
		t.Errorf("admitted: got %v, want delta, alpha, gamma, zzz-legit", names)
	}
	if len(refused) != 2 || refused[0].Service != "aaa-evil" || !strings.Contains(refused[0].Reason, `"zzz-legit"`) ||
		refused[1].Service != "beta" || !strings.Contains(refused[1].Reason, `"alpha"`) {
		t.Errorf("refused: got %+v, want aaa-evil (owner zzz-legit) and beta (owner alpha)", refused)
	}

	// The holder keeps its route even when an older registration claims
	// it later (its instances all re-registered, say); a holder that
	// changes its route competes again like anyone else.
	held := got
	decls = append(decls, RouteDecl{Service: "old", Hosts: []string{"chat.example.com"}, PathPrefix: "/", Registered: 1})
	got, refused = AdmitRoutes(decls, all, held)
	if names := services(got); !slices.Contains(names, "zzz-legit") || slices.Contains(names, "old") {
		t.Errorf("admitted with holders: got %v, want zzz-legit kept and old refused", names)
	}
	if got2, _ := AdmitRoutes(decls, all, nil); !slices.Contains(services(got2), "old") {
		t.Errorf("admitted without holders: got %v, want the oldest registration, old", services(got2))
	}
	_ = refused

	// Two spellings of one host collide.
	got, refused = AdmitRoutes([]RouteDecl{
		{Service: "a", Hosts: []string{"Chat.Example.com."}, PathPrefix: "/", Registered: 1},
		{Service: "b", Hosts: []string{"chat.example.com"}, PathPrefix: "/", Registered: 2},
	}, all, nil)
	if len(got) != 1 || len(refused) != 1 || refused[0].Service != "b" {
		t.Errorf("spellings of one host: admitted %+v, refused %+v", got, refused)
	}
}

// TestAdmitRoutesPolicy: what the file allows and what it keeps for itself.
func TestAdmitRoutesPolicy(t *testing.T) {
	file := []FileRoute{
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/ws"},
		{Hosts: []string{"*.corp.example.com"}, PathPrefix: "/"},
		{PathPrefix: "/metrics"},
	}
	policy := RoutePolicy{AllowedHosts: []string{"*.example.com", "exact.example.org"}, File: file}
	for _, tt := range []struct {
		name   string
		decl   RouteDecl
		reason string // "" = admitted
	}{
		{"allowed wildcard", RouteDecl{Hosts: []string{"new.example.com"}, PathPrefix: "/"}, ""},
		{"allowed exact", RouteDecl{Hosts: []string{"exact.example.org"}, PathPrefix: "/"}, ""},
		{"allowed declared wildcard below an allowed one", RouteDecl{Hosts: []string{"*.team.example.com"}, PathPrefix: "/"}, ""},
		{"host outside the list", RouteDecl{Hosts: []string{"evil.example.net"}, PathPrefix: "/"}, "not in consul.routes.allowed_hosts"},
		{"one host outside refuses the whole declaration", RouteDecl{Hosts: []string{"evil.example.net", "ok.example.com"}, PathPrefix: "/"}, "not in"},
		{"wildcard wider than allowed", RouteDecl{Hosts: []string{"*.org"}, PathPrefix: "/"}, "not in"},
		{"exact allowed name allows no names below it", RouteDecl{Hosts: []string{"a.exact.example.org"}, PathPrefix: "/"}, "not in"},
		{"sub-path of a file host", RouteDecl{Hosts: []string{"chat.example.com"}, PathPrefix: "/api"}, "routed by the file"},
		{"file host in another spelling", RouteDecl{Hosts: []string{"CHAT.example.com."}, PathPrefix: "/"}, "routed by the file"},
		{"exact host under a file wildcard", RouteDecl{Hosts: []string{"x.corp.example.com"}, PathPrefix: "/"}, "routed by the file"},
		{"wildcard under a file wildcard", RouteDecl{Hosts: []string{"*.a.corp.example.com"}, PathPrefix: "/"}, "routed by the file"},
		{"path the file routes for any host", RouteDecl{Hosts: []string{"new.example.com"}, PathPrefix: "/metrics/x"}, "for any host"},
		{"no host, not allowed", RouteDecl{PathPrefix: "/"}, "allow_any_host is off"},
	} {
		got, refused := AdmitRoutes([]RouteDecl{tt.decl}, policy, nil)
		switch {
		case tt.reason == "" && (len(got) != 1 || len(refused) != 0):
			t.Errorf("%s: admitted %+v, refused %+v; want admitted", tt.name, got, refused)
		case tt.reason != "" && (len(got) != 0 || len(refused) != 1 || !strings.Contains(refused[0].Reason, tt.reason)):
			t.Errorf("%s: admitted %+v, refused %+v; want refused for %q", tt.name, got, refused, tt.reason)
		}
	}
	if got, _ := AdmitRoutes([]RouteDecl{{Hosts: []string{"a.example.com"}, PathPrefix: "/"}}, RoutePolicy{}, nil); len(got) != 0 {
		t.Errorf("zero policy admitted %+v; declared routes must be off by default", got)
	}
	anyHost := RoutePolicy{AllowAnyHost: true, File: file}
	if got, _ := AdmitRoutes([]RouteDecl{{PathPrefix: "/api"}}, anyHost, nil); len(got) != 1 {
		t.Errorf("allow_any_host: a declaration without host was refused")
	}
}

func services(ds []RouteDecl) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Service)
	}
	return out
}
