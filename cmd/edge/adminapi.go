package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/proxy"
)

// apiSettings are the admin API's settings from the file; a reload swaps
// them whole.
type apiSettings struct {
	enabled, write bool
	token          conf.Secret // "" when none is configured
	drainWindow    time.Duration
}

// adminAPI is the runtime API under /api/v1/: HAProxy's "set server ...
// state drain|maint|ready" and "weight" for edge's pools. What it sets
// lives in the balance.Pool, so it outlives discovery updates and reloads
// that keep the pool, and ends with the process.
type adminAPI struct {
	pools    func() []*balance.Pool
	conns    connLister
	settings atomic.Pointer[apiSettings]
	// loopback: the admin listener is bound to a loopback address, so
	// writes without a configured token are allowed from this host only.
	loopback bool
	// upgrade hands the listeners to a new binary (upgrade.go); nil: the
	// endpoint does not exist.
	upgrade apiHandler
}

// connLister is what the API needs of the proxy.
type connLister interface {
	CloseConnsOn(b *balance.Backend, code int, window time.Duration, reason proxy.CloseReason) int
	Connections(b *balance.Backend) []proxy.ConnInfo
}

// newAPISettings reads the token; a token that cannot be read refuses the
// file (at start) or the reload.
func newAPISettings(cfg *conf.Config) (*apiSettings, error) {
	tok, err := cfg.Admin.API.Token()
	if err != nil {
		return nil, err
	}
	return &apiSettings{enabled: cfg.Admin.API.Enabled, write: cfg.Admin.API.Write, token: tok, drainWindow: cfg.Drain.Window.Std()}, nil
}

// isLoopbackListener reports whether l accepts only from this host.
func isLoopbackListener(l net.Listener) bool {
	a, ok := l.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// register adds the API's routes to mux.
func (a *adminAPI) register(mux *http.ServeMux) {
	const b = "/api/v1/pools/{pool}/backends/{id}"
	mux.HandleFunc("GET /api/v1/pools", a.read(a.listPools))
	mux.HandleFunc("GET /api/v1/pools/{pool}", a.read(a.getPool))
	mux.HandleFunc("GET "+b, a.read(a.getBackend))
	mux.HandleFunc("GET "+b+"/connections", a.read(a.listConns))
	mux.HandleFunc("POST "+b+"/drain", a.write(a.drain))
	mux.HandleFunc("POST "+b+"/disable", a.write(a.setState(balance.AdminDisabled)))
	mux.HandleFunc("POST "+b+"/enable", a.write(a.setState(balance.AdminReady)))
	mux.HandleFunc("POST "+b+"/weight", a.write(a.weight))
	if a.upgrade != nil {
		mux.HandleFunc("POST /api/v1/upgrade", a.write(a.upgrade))
		// The short name, for hands at a terminal.
		mux.HandleFunc("POST /api/upgrade", a.write(a.upgrade))
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if !a.settings.Load().enabled {
			http.NotFound(w, r)
			return
		}
		apiError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
}

// apiHandler is one endpoint: it returns the document to send, or an
// error with its status.
type apiHandler func(r *http.Request) (any, error)

// apiErr carries an HTTP status with a message for the client.
type apiErr struct {
	status int
	msg    string
}

func (e *apiErr) Error() string { return e.msg }

func errStatus(status int, format string, args ...any) error {
	return &apiErr{status: status, msg: fmt.Sprintf(format, args...)}
}

func (a *adminAPI) read(h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.settings.Load().enabled {
			http.NotFound(w, r)
			return
		}
		serveAPI(w, r, h)
	}
}

// write guards an operation that changes state. Browsers must not be able
// to trigger it from another site, also against a loopback listener (a
// page the operator has open can reach 127.0.0.1): cross-origin requests
// are refused (Sec-Fetch-Site / Origin), the body must be JSON, which a
// form cannot send without a CORS preflight that edge never grants, and
// without a token the Host must name this host, which defeats DNS
// rebinding of an attacker's name onto 127.0.0.1.
func (a *adminAPI) write(h apiHandler) http.HandlerFunc {
	cop := http.NewCrossOriginProtection()
	return func(w http.ResponseWriter, r *http.Request) {
		s := a.settings.Load()
		if !s.enabled {
			http.NotFound(w, r)
			return
		}
		if err := a.authorize(s, r); err != nil {
			writeAPIError(w, err)
			return
		}
		if err := cop.Check(r); err != nil {
			apiError(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
			apiError(w, http.StatusUnsupportedMediaType, "write operations take Content-Type: application/json")
			return
		}
		serveAPI(w, r, h)
	}
}

// authorize applies write: false and the bearer token.
func (a *adminAPI) authorize(s *apiSettings, r *http.Request) error {
	if !s.write {
		return errStatus(http.StatusForbidden, "write operations are switched off (admin.api.write: false)")
	}
	if s.token == "" {
		if !a.loopback {
			return errStatus(http.StatusForbidden, "the admin listener is not loopback: write operations need admin.api.token_file or token_env")
		}
		if !localHost(r.Host) {
			return errStatus(http.StatusForbidden, "Host %q is not this host; without a token, writes must name 127.0.0.1, [::1] or localhost", r.Host)
		}
		return nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.token)) != 1 {
		return errStatus(http.StatusUnauthorized, "a valid bearer token is required")
	}
	return nil
}

// localHost reports whether a Host header names the loopback interface.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serveAPI(w http.ResponseWriter, r *http.Request, h apiHandler) {
	v, err := h(r)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeAPIError(w http.ResponseWriter, err error) {
	var ae *apiErr
	if errors.As(err, &ae) {
		if ae.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edge admin"`)
		}
		apiError(w, ae.status, ae.msg)
		return
	}
	apiError(w, http.StatusInternalServerError, err.Error())
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// backendDoc is one backend as the API, /status and the status page show it.
type backendDoc struct {
	ID               string `json:"id"`
	Address          string `json:"address"`
	AdminState       string `json:"admin_state"`
	Available        bool   `json:"available"`
	Healthy          bool   `json:"healthy"`
	Ejected          bool   `json:"ejected"`
	Ejections        int64  `json:"ejections"`
	Active           int64  `json:"active"`
	Weight           int    `json:"weight"`
	DeclaredWeight   int    `json:"declared_weight"`
	WeightOverridden bool   `json:"weight_overridden"`
}

func docOf(b *balance.Backend) backendDoc {
	return backendDoc{
		ID: b.ID(), Address: b.Addr(), AdminState: b.AdminState().String(),
		Available: b.Available(), Healthy: b.Healthy(), Ejected: b.Ejected(), Ejections: b.Ejections(),
		Active: b.Active(), Weight: b.Weight(), DeclaredWeight: b.DeclaredWeight(), WeightOverridden: b.WeightOverridden(),
	}
}

type poolDoc struct {
	Name     string       `json:"name"`
	Mode     string       `json:"mode"`
	Backends []backendDoc `json:"backends"`
}

func poolDocOf(p *balance.Pool) poolDoc {
	d := poolDoc{Name: p.Name(), Mode: p.Mode().String(), Backends: []backendDoc{}}
	for _, b := range p.Snapshot().Backends {
		d.Backends = append(d.Backends, docOf(b))
	}
	return d
}

func (a *adminAPI) pool(name string) (*balance.Pool, error) {
	for _, p := range a.pools() {
		if p.Name() == name {
			return p, nil
		}
	}
	return nil, errStatus(http.StatusNotFound, "no pool %q", name)
}

func (a *adminAPI) backend(r *http.Request) (*balance.Pool, *balance.Backend, error) {
	p, err := a.pool(r.PathValue("pool"))
	if err != nil {
		return nil, nil, err
	}
	id := r.PathValue("id")
	b := p.Snapshot().ByID(id)
	if b == nil {
		return nil, nil, errStatus(http.StatusNotFound, "pool %q has no backend %q", p.Name(), id)
	}
	return p, b, nil
}

func (a *adminAPI) listPools(*http.Request) (any, error) {
	out := struct {
		Pools []poolDoc `json:"pools"`
	}{Pools: []poolDoc{}}
	for _, p := range a.pools() {
		out.Pools = append(out.Pools, poolDocOf(p))
	}
	return out, nil
}

func (a *adminAPI) getPool(r *http.Request) (any, error) {
	p, err := a.pool(r.PathValue("pool"))
	if err != nil {
		return nil, err
	}
	return poolDocOf(p), nil
}

func (a *adminAPI) getBackend(r *http.Request) (any, error) {
	_, b, err := a.backend(r)
	if err != nil {
		return nil, err
	}
	return docOf(b), nil
}

// connDoc is one live WebSocket in the connections listing.
type connDoc struct {
	Client   string    `json:"client"`
	Listener string    `json:"listener"`
	Host     string    `json:"host"`
	Path     string    `json:"path"`
	Since    time.Time `json:"since"`
	Seconds  float64   `json:"age_seconds"`
	BytesIn  int64     `json:"bytes_in"`
	BytesOut int64     `json:"bytes_out"`
	Closing  bool      `json:"closing"`
}

func (a *adminAPI) listConns(r *http.Request) (any, error) {
	p, b, err := a.backend(r)
	if err != nil {
		return nil, err
	}
	out := struct {
		Pool        string    `json:"pool"`
		Backend     string    `json:"backend"`
		Connections []connDoc `json:"connections"`
	}{Pool: p.Name(), Backend: b.ID(), Connections: []connDoc{}}
	now := time.Now()
	for _, c := range a.conns.Connections(b) {
		out.Connections = append(out.Connections, connDoc{Client: c.Client, Listener: c.Listener, Host: c.Host, Path: c.Path,
			Since: c.Since.UTC(), Seconds: now.Sub(c.Since).Seconds(), BytesIn: c.In, BytesOut: c.Out, Closing: c.Closing})
	}
	return out, nil
}

// decodeBody reads a small JSON object into v; an empty body leaves v as is.
func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<10+1))
	if err != nil {
		return errStatus(http.StatusBadRequest, "read body: %v", err)
	}
	if len(body) > 4<<10 {
		return errStatus(http.StatusRequestEntityTooLarge, "body larger than 4 KiB")
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errStatus(http.StatusBadRequest, "body: %v", err)
	}
	if dec.More() {
		return errStatus(http.StatusBadRequest, "body: more than one JSON value")
	}
	return nil
}

// drainRequest is the optional body of drain.
type drainRequest struct {
	// Window spreads the close frames; default drain.window.
	Window string `json:"window"`
}

// parseDrain returns the window of a drain request body.
func parseDrain(body drainRequest, def time.Duration) (time.Duration, error) {
	if body.Window == "" {
		return def, nil
	}
	d, err := time.ParseDuration(body.Window)
	if err != nil || d < 0 || d > 24*time.Hour {
		return 0, errStatus(http.StatusBadRequest, "window %q: want a duration from 0s to 24h", body.Window)
	}
	return d, nil
}

func (a *adminAPI) drain(r *http.Request) (any, error) {
	var body drainRequest
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	window, err := parseDrain(body, a.settings.Load().drainWindow)
	if err != nil {
		return nil, err
	}
	p, b, err := a.backend(r)
	if err != nil {
		return nil, err
	}
	if _, err := p.SetAdminState(b.ID(), balance.AdminDrain); err != nil {
		return nil, errStatus(http.StatusConflict, "%v", err)
	}
	// RFC 6455 §7.4.1 / IANA: 1012 "service restart" tells clients to
	// reconnect, which lands them on another backend.
	n := a.conns.CloseConnsOn(b, proxy.CloseServiceRestart, window, proxy.ReasonAdminDrain)
	return struct {
		backendDoc
		Closing int     `json:"closing"`
		Window  float64 `json:"window_seconds"`
	}{docOf(b), n, window.Seconds()}, nil
}

func (a *adminAPI) setState(s balance.AdminState) apiHandler {
	return func(r *http.Request) (any, error) {
		if err := decodeBody(r, &struct{}{}); err != nil {
			return nil, err
		}
		p, b, err := a.backend(r)
		if err != nil {
			return nil, err
		}
		if _, err := p.SetAdminState(b.ID(), s); err != nil {
			return nil, errStatus(http.StatusConflict, "%v", err)
		}
		return docOf(b), nil
	}
}

// weightRequest is the body of weight; 0 returns to the declared weight.
type weightRequest struct {
	Weight *int `json:"weight"`
}

func (a *adminAPI) weight(r *http.Request) (any, error) {
	var body weightRequest
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	if body.Weight == nil {
		return nil, errStatus(http.StatusBadRequest, `body: want {"weight": N}, N from 1 to %d, or 0 for the declared weight`, balance.MaxWeight)
	}
	p, b, err := a.backend(r)
	if err != nil {
		return nil, err
	}
	if _, err := p.SetAdminWeight(b.ID(), *body.Weight); err != nil {
		if errors.Is(err, balance.ErrUnknownBackend) {
			return nil, errStatus(http.StatusConflict, "%v", err)
		}
		return nil, errStatus(http.StatusBadRequest, "%v", err)
	}
	return docOf(b), nil
}
