package discovery

import (
	"reflect"
	"testing"

	"github.com/edgelb/edge/balance"
	"github.com/hashicorp/consul/api"
)

func entry(node, nodeAddr, id, addr string, port int, status string, mut ...func(*api.ServiceEntry)) *api.ServiceEntry {
	e := &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: nodeAddr},
		Service: &api.AgentService{ID: id, Service: "chat", Address: addr, Port: port, Weights: api.AgentWeights{Passing: 1, Warning: 1}},
		Checks:  api.HealthChecks{{CheckID: "serfHealth", Status: api.HealthPassing}, {CheckID: "service:" + id, Status: status}},
	}
	for _, m := range mut {
		m(e)
	}
	return e
}

func TestMembers(t *testing.T) {
	tests := []struct {
		name      string
		entries   []*api.ServiceEntry
		opts      MemberOptions
		want      []balance.Member
		wantWarns int
	}{
		{
			name: "passing only, sorted by node/id",
			entries: []*api.ServiceEntry{
				entry("n2", "10.0.0.2", "chat-1", "", 9001, api.HealthPassing),
				entry("n1", "10.0.0.1", "chat-1", "10.1.0.1", 9001, api.HealthPassing),
				entry("n1", "10.0.0.1", "chat-2", "", 9002, api.HealthCritical),
				entry("n3", "10.0.0.3", "chat-1", "", 9001, api.HealthWarning),
			},
			want: []balance.Member{
				{ID: "n1/chat-1", Addr: "10.1.0.1:9001", Weight: 1},
				{ID: "n2/chat-1", Addr: "10.0.0.2:9001", Weight: 1},
			},
		},
		{
			name: "warning admitted with warning weight",
			entries: []*api.ServiceEntry{
				entry("n3", "10.0.0.3", "chat-1", "", 9001, api.HealthWarning, func(e *api.ServiceEntry) {
					e.Service.Weights = api.AgentWeights{Passing: 10, Warning: 2}
				}),
			},
			opts: MemberOptions{IncludeWarning: true},
			want: []balance.Member{{ID: "n3/chat-1", Addr: "10.0.0.3:9001", Weight: 2}},
		},
		{
			name: "version from meta, a bad one dropped with a warning",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", "", 1, api.HealthPassing, func(e *api.ServiceEntry) { e.Service.Meta = map[string]string{"edge-version": "2.1"} }),
				entry("n1", "10.0.0.1", "b", "", 2, api.HealthPassing, func(e *api.ServiceEntry) { e.Service.Meta = map[string]string{"edge-version": "2 1\n"} }),
			},
			want: []balance.Member{
				{ID: "n1/a", Addr: "10.0.0.1:1", Weight: 1, Version: "2.1"},
				{ID: "n1/b", Addr: "10.0.0.1:2", Weight: 1},
			},
			wantWarns: 1,
		},
		{
			name: "maintenance is critical",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "chat-1", "", 9001, api.HealthPassing, func(e *api.ServiceEntry) {
					e.Checks = append(e.Checks, &api.HealthCheck{CheckID: "_service_maintenance:chat-1", Status: api.HealthCritical})
				}),
			},
			opts: MemberOptions{IncludeWarning: true},
		},
		{
			name: "weight from meta overrides, bad meta ignored, cap",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", "", 1, api.HealthPassing, func(e *api.ServiceEntry) { e.Service.Meta = map[string]string{"edge-weight": " 7 "} }),
				entry("n1", "10.0.0.1", "b", "", 2, api.HealthPassing, func(e *api.ServiceEntry) {
					e.Service.Weights.Passing = 3
					e.Service.Meta = map[string]string{"edge-weight": "x"}
				}),
				entry("n1", "10.0.0.1", "c", "", 3, api.HealthPassing, func(e *api.ServiceEntry) { e.Service.Weights.Passing = 5000 }),
				entry("n1", "10.0.0.1", "d", "", 4, api.HealthPassing, func(e *api.ServiceEntry) { e.Service.Weights = api.AgentWeights{} }),
			},
			want: []balance.Member{
				{ID: "n1/a", Addr: "10.0.0.1:1", Weight: 7},
				{ID: "n1/b", Addr: "10.0.0.1:2", Weight: 3},
				{ID: "n1/c", Addr: "10.0.0.1:3", Weight: 1000},
				{ID: "n1/d", Addr: "10.0.0.1:4", Weight: 1},
			},
			wantWarns: 2,
		},
		{
			name: "custom meta key and disabled key",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", "", 1, api.HealthPassing, func(e *api.ServiceEntry) { e.Service.Meta = map[string]string{"w": "4", "edge-weight": "9"} }),
			},
			opts: MemberOptions{WeightMetaKey: "w"},
			want: []balance.Member{{ID: "n1/a", Addr: "10.0.0.1:1", Weight: 4}},
		},
		{
			name: "ipv6 address, unusable address and port, duplicate, nil",
			entries: []*api.ServiceEntry{
				entry("n1", "", "v6", "::1", 9000, api.HealthPassing),
				entry("n1", "", "noaddr", "", 9000, api.HealthPassing),
				entry("n1", "10.0.0.1", "noport", "", 0, api.HealthPassing),
				entry("n1", "10.0.0.1", "v6", "", 9001, api.HealthPassing),
				nil,
				{Node: &api.Node{Node: "n9"}},
			},
			want:      []balance.Member{{ID: "n1/v6", Addr: "[::1]:9000", Weight: 1}},
			wantWarns: 3,
		},
		{
			name: "empty answer",
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warns := Members(tt.entries, tt.opts)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("members: got %+v, want %+v", got, tt.want)
			}
			if len(warns) != tt.wantWarns {
				t.Errorf("warnings: got %d (%v), want %d", len(warns), warns, tt.wantWarns)
			}
		})
	}
}

// Listed keeps an instance whose check fails (it may pass again) and drops
// one in maintenance, service or node; goneIDs is what left between two
// answers.
func TestListedAndGone(t *testing.T) {
	maint := func(id string) func(*api.ServiceEntry) {
		return func(e *api.ServiceEntry) {
			e.Checks = append(e.Checks, &api.HealthCheck{CheckID: id, Status: api.HealthCritical})
		}
	}
	before := Listed([]*api.ServiceEntry{
		entry("n1", "10.0.0.1", "chat-1", "", 9001, api.HealthPassing),
		entry("n1", "10.0.0.1", "chat-2", "", 9002, api.HealthPassing),
		entry("n2", "10.0.0.2", "chat-3", "", 9003, api.HealthPassing),
		entry("n2", "10.0.0.2", "chat-4", "", 9004, api.HealthPassing),
		entry("n3", "10.0.0.3", "chat-5", "", 9005, api.HealthPassing),
	})
	now := Listed([]*api.ServiceEntry{
		entry("n1", "10.0.0.1", "chat-1", "", 9001, api.HealthCritical),                                      // failing check: still listed
		entry("n1", "10.0.0.1", "chat-2", "", 9002, api.HealthPassing, maint("_service_maintenance:chat-2")), // service maintenance
		entry("n2", "10.0.0.2", "chat-4", "", 9004, api.HealthPassing),
		entry("n3", "10.0.0.3", "chat-5", "", 9005, api.HealthPassing, maint("_node_maintenance")), // node maintenance
		// chat-3 deregistered
	})
	want := []string{"n1/chat-2", "n2/chat-3", "n3/chat-5"}
	if got := goneIDs(before, now); !reflect.DeepEqual(got, want) {
		t.Errorf("gone: got %v, want %v", got, want)
	}
	if got := goneIDs(nil, now); len(got) != 0 {
		t.Errorf("gone with nothing known before: got %v, want none", got)
	}
}
