package consul

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestNewClientToken(t *testing.T) {
	var (
		mu  sync.Mutex
		got string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("X-Consul-Token")
		mu.Unlock()
		_, _ = w.Write([]byte(`"127.0.0.1:8300"`))
	}))
	defer srv.Close()
	file := t.TempDir() + "/token"
	if err := os.WriteFile(file, []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "env-secret")
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")

	tests := []struct {
		name string
		opts ClientOptions
		want string
	}{
		{"environment", ClientOptions{Address: srv.URL}, "env-secret"},
		{"explicit token wins", ClientOptions{Address: srv.URL, Token: "explicit-secret"}, "explicit-secret"},
		{"explicit file wins over environment", ClientOptions{Address: srv.URL, TokenFile: file}, "file-secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClient(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Status().Leader(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if got != tt.want {
				t.Errorf("token sent: got %q, want %q", got, tt.want)
			}
		})
	}
	_, err := NewClient(ClientOptions{Token: "explicit-secret", TokenFile: file})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("token and file: got %v, want an error that does not show the token", err)
	}
	_, err = NewClient(ClientOptions{Address: srv.URL, TokenFile: file + ".missing"})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("missing file: got %v, want an error without the token", err)
	}
}
