package conf

import "testing"

// TestUsesConsul: every part of the file that needs a Consul client asks
// for one, and a file with none of them makes none.
func TestUsesConsul(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want bool
	}{
		{"nothing of consul", Config{Pools: []Pool{{Name: "p"}}, Listeners: []Listener{{TLS: &TLS{}}}}, false},
		{"explicit address", Config{Consul: Consul{Address: "127.0.0.1:8500"}}, true},
		{"self-registration", Config{Consul: Consul{Register: ConsulRegister{Enabled: true}}}, true},
		{"declared routes, by host", Config{Consul: Consul{Routes: ConsulRoutes{AllowedHosts: []string{"a.example"}}}}, true},
		{"declared routes, any host", Config{Consul: Consul{Routes: ConsulRoutes{AllowAnyHost: true}}}, true},
		{"fleet prefix", Config{Consul: Consul{Fleet: ConsulFleet{Prefix: "edge"}}}, true},
		{"ticket keys in kv", Config{Listeners: []Listener{{TLS: &TLS{SessionTickets: SessionTickets{ConsulKey: "k"}}}}}, true},
		{"staples in kv", Config{Listeners: []Listener{{TLS: &TLS{OCSP: OCSP{ConsulPrefix: "o"}}}}}, true},
		{"discovered pool", Config{Pools: []Pool{{Consul: PoolConsul{Service: "chat"}}}}, true},
		{"cookie keys in kv", Config{Pools: []Pool{{Cookie: Cookie{ConsulKey: "c"}}}}, true},
	}
	for _, tt := range tests {
		if got := tt.cfg.UsesConsul(); got != tt.want {
			t.Errorf("%s: UsesConsul() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDeclaredPool: a declaration's settings over a file pool's defaults,
// the rest kept, and a short interval shortening the timeout with it.
func TestDeclaredPool(t *testing.T) {
	def := DefaultPool()
	p := DeclaredPool(PoolDeclaration{Service: "chat"})
	if p.Name != "consul:chat" || p.Consul.Service != "chat" || p.Balance != def.Balance || p.Health != def.Health {
		t.Errorf("nothing declared: %+v, want the defaults for service chat", p)
	}
	short := def.Health.Timeout.Std() / 2
	p = DeclaredPool(PoolDeclaration{Service: "chat", Balance: "cookie", MaxConnections: 7, MaxConnectionsPerClientIP: 3, Health: "websocket", HealthInterval: short})
	if p.Balance != "cookie" || p.Limits.MaxConnections != 7 || p.Limits.MaxConnectionsPerClientIP != 3 || p.Health.Type != "websocket" {
		t.Errorf("declared: %+v", p)
	}
	if p.Health.Interval.Std() != short || p.Health.Timeout.Std() != short {
		t.Errorf("interval %v timeout %v, want both %v", p.Health.Interval, p.Health.Timeout, short)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("a declared pool validates as a file's would: %v", err)
	}
}
