package discovery

import (
	"reflect"
	"strings"
	"testing"

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
			want: RouteDecl{Hosts: []string{"chat.example.com"}, PathPrefix: "/ws", Sticky: StickyCookie, MaxConns: 100},
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
			want: RouteDecl{Hosts: []string{"chat.example.com"}, PathPrefix: "/socket", Sticky: StickyClientIP},
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
			want: RouteDecl{PathPrefix: "/ws", Sticky: StickyNone},
		},
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
		{name: "host with port", tags: []string{"edge.host=chat.example.com:443"}, wantErr: "not allowed"},
		{name: "empty host", tags: []string{"edge.host="}, wantErr: "empty"},
		{name: "host with empty label", tags: []string{"edge.host=a..b"}, wantErr: "bad label"},
		{name: "inner wildcard", tags: []string{"edge.host=a.*.com"}, wantErr: "not allowed"},
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
	// Conflict between tag and meta.
	f.Add("edge.path=/a", "edge.max-conns=10", "edge-route-path", "/b")
	// Typo, missing '=', odd bytes.
	f.Add("edge.hots=x", "edge.host", "edge-route-host", "a..b\x00")
	// Unrelated tags and meta.
	f.Add("v1", "primary", "version", "3")
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
		}
		switch d.Sticky {
		case "", StickyNone, StickyCookie, StickyClientIP:
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

func TestMergeRoutes(t *testing.T) {
	decls := map[string]RouteDecl{
		"beta":  {Service: "beta", Hosts: []string{"a.example.com", "b.example.com"}, PathPrefix: "/"},
		"alpha": {Service: "alpha", Hosts: []string{"b.example.com"}, PathPrefix: "/"},
		"gamma": {Service: "gamma", Hosts: []string{"b.example.com"}, PathPrefix: "/ws"},
		"delta": {Service: "delta", PathPrefix: "/api"},
	}
	got, warns := mergeRoutes(decls)
	var names []string
	for _, d := range got {
		names = append(names, d.Service)
	}
	if want := []string{"delta", "alpha", "gamma"}; !reflect.DeepEqual(names, want) {
		t.Errorf("routes: got %v, want %v", names, want)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], `"beta"`) {
		t.Errorf("warnings: got %v, want one about beta", warns)
	}
}
