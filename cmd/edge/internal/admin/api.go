package admin

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/balance"
)

// Settings are the admin API's settings from the file; a reload swaps
// them whole.
type Settings struct {
	// Enabled serves /api/ at all; false answers 404 there.
	Enabled bool
	// Write allows the endpoints that change state; false answers 403.
	Write bool
	// Token is the bearer token writes must present; "" for none.
	Token string
	// AllowedHosts are the Host values the listeners answer besides their
	// own address, loopback and localhost (CanonicalHosts' form).
	AllowedHosts []string
	// DrainWindow spreads a drain's close frames unless the request
	// names its own window.
	DrainWindow time.Duration
	// Scope is where drain, disable, enable and weight act when a request
	// does not say (?scope=); "" is ScopeLocal.
	Scope Scope
}

// Conns is what the API needs of the proxy.
type Conns interface {
	// DrainConns sends the live WebSockets on b a close frame 1012
	// spread over window and returns how many it will close.
	DrainConns(b *balance.Backend, window time.Duration) int
	// Connections lists the live WebSockets on b.
	Connections(b *balance.Backend) []Conn
}

// Conn describes one live WebSocket.
type Conn struct {
	Client   string    // the decided client address
	Listener string    // the listener's name
	Host     string    // the request's Host
	Path     string    // the request's path
	Since    time.Time // when the request arrived
	In, Out  int64     // bytes so far, client to backend and back
	Closing  bool      // a close was requested (drain)
}

// Access is what an endpoint does to edge.
type Access int

const (
	// Read endpoints only show state.
	Read Access = iota
	// Write endpoints change it: each request is checked against Settings
	// (write, the token) and against browsers of other sites.
	Write
)

// Endpoint is one route of the API. The built-in endpoints act on this
// process's pools; one of a wider scope (the process, a fleet) is an
// Endpoint of its own, under the same rules for its Access.
type Endpoint struct {
	// Method and Path form the http.ServeMux pattern ("POST", "/api/v1/upgrade").
	Method, Path string
	Access       Access
	Handle       Handler
}

// Handler is one endpoint: it returns the document to send, or an error,
// whose status Errorf sets (500 otherwise).
type Handler func(r *http.Request) (any, error)

// api is the runtime API under /api/v1/: HAProxy's "set server ... state
// drain|maint|ready" and "weight" for edge's pools. What it sets lives in
// the balance.Pool, so it outlives discovery updates and reloads that keep
// the pool, and ends with the process.
type api struct {
	pools    func() []*balance.Pool
	conns    Conns
	fleet    Fleet // nil: no fleet scope
	settings atomic.Pointer[Settings]
	extra    []Endpoint
	proofs   proofs // nonces of the token proofs (proof.go)
}

func newAPI(pools func() []*balance.Pool, conns Conns, fleet Fleet, extra []Endpoint) *api {
	return &api{pools: pools, conns: conns, fleet: fleet, extra: extra}
}

// register adds the API's routes to mux.
func (a *api) register(mux *http.ServeMux) {
	const b = "/api/v1/pools/{pool}/backends/{id}"
	eps := []Endpoint{
		{"GET", "/api/v1/pools", Read, a.listPools},
		{"GET", "/api/v1/pools/{pool}", Read, a.getPool},
		{"GET", b, Read, a.getBackend},
		{"GET", b + "/connections", Read, a.listConns},
		{"POST", b + "/drain", Write, a.drain},
		{"POST", b + "/disable", Write, a.setState(balance.AdminDisabled)},
		{"POST", b + "/enable", Write, a.setState(balance.AdminReady)},
		{"POST", b + "/weight", Write, a.weight},
		// Open to all who reach the listener, as reads are: it proves
		// edge knows the token, and tells nothing of it (proof.go).
		{"POST", "/api/v1/challenge", Read, a.challenge},
	}
	for _, ep := range append(eps, a.extra...) {
		h := a.read(ep.Handle)
		if ep.Access == Write {
			h = a.write(ep.Handle)
		}
		mux.HandleFunc(ep.Method+" "+ep.Path, h)
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if !a.settings.Load().Enabled {
			http.NotFound(w, r)
			return
		}
		apiError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
}

// statusError carries an HTTP status with a message for the client.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// Errorf is an error a Handler returns to answer with status and the
// message.
func Errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

// StatusOf is the HTTP status an error of a Handler is answered with.
func StatusOf(err error) int {
	var ae *statusError
	if errors.As(err, &ae) {
		return ae.status
	}
	return http.StatusInternalServerError
}

func (a *api) read(h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.settings.Load().Enabled {
			http.NotFound(w, r)
			return
		}
		serveAPI(w, r, h)
	}
}

// write guards an operation that changes state: it needs the token, and
// browsers must not be able to trigger it from another site, also against
// a loopback listener (a page the operator has open can reach 127.0.0.1):
// cross-origin requests are refused (Sec-Fetch-Site / Origin), and the
// body must be JSON, which a form cannot send without a CORS preflight
// that edge never grants.
func (a *api) write(h Handler) http.HandlerFunc {
	cop := http.NewCrossOriginProtection()
	return func(w http.ResponseWriter, r *http.Request) {
		s := a.settings.Load()
		if !s.Enabled {
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

// authorize applies write: false and the bearer token. Every write needs
// the token: without one, any local user, any container sharing the
// network namespace and any request forgery that can POST JSON could drain
// and upgrade edge through a loopback listener (HAProxy's runtime API is a
// socket with a file mode for the same reason).
func (a *api) authorize(s *Settings, r *http.Request) error {
	if !s.Write {
		return Errorf(http.StatusForbidden, "write operations are switched off (admin.api.write: false)")
	}
	if s.Token == "" {
		return Errorf(http.StatusForbidden, "write operations need a token: set state_dir (edge generates %s there) or admin.api.token_file or token_env", TokenFile)
	}
	if !HasToken(r, s.Token) && !a.proofs.proven(r, s.Token, time.Now()) {
		return Errorf(http.StatusUnauthorized, "a valid bearer token (or proof of it) is required")
	}
	return nil
}

// HasToken reports whether r carries token as its bearer token; an empty
// token matches nothing.
func HasToken(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

func serveAPI(w http.ResponseWriter, r *http.Request, h Handler) {
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
	var ae *statusError
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

func (a *api) pool(name string) (*balance.Pool, error) {
	for _, p := range a.pools() {
		if p.Name() == name {
			return p, nil
		}
	}
	return nil, Errorf(http.StatusNotFound, "no pool %q", name)
}

func (a *api) backend(r *http.Request) (*balance.Pool, *balance.Backend, error) {
	p, err := a.pool(r.PathValue("pool"))
	if err != nil {
		return nil, nil, err
	}
	id := r.PathValue("id")
	b := p.Snapshot().ByID(id)
	if b == nil {
		return nil, nil, Errorf(http.StatusNotFound, "pool %q has no backend %q", p.Name(), id)
	}
	return p, b, nil
}

func (a *api) listPools(*http.Request) (any, error) {
	out := struct {
		Pools []poolDoc `json:"pools"`
	}{Pools: []poolDoc{}}
	for _, p := range a.pools() {
		out.Pools = append(out.Pools, poolDocOf(p))
	}
	return out, nil
}

func (a *api) getPool(r *http.Request) (any, error) {
	p, err := a.pool(r.PathValue("pool"))
	if err != nil {
		return nil, err
	}
	return poolDocOf(p), nil
}

func (a *api) getBackend(r *http.Request) (any, error) {
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

func (a *api) listConns(r *http.Request) (any, error) {
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

// DecodeBody reads a small JSON object into v; an empty body leaves v as is.
func DecodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<10+1))
	if err != nil {
		return Errorf(http.StatusBadRequest, "read body: %v", err)
	}
	if len(body) > 4<<10 {
		return Errorf(http.StatusRequestEntityTooLarge, "body larger than 4 KiB")
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(http.StatusBadRequest, "body: %v", err)
	}
	if dec.More() {
		return Errorf(http.StatusBadRequest, "body: more than one JSON value")
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
		return 0, Errorf(http.StatusBadRequest, "window %q: want a duration from 0s to 24h", body.Window)
	}
	return d, nil
}

func (a *api) drain(r *http.Request) (any, error) {
	var body drainRequest
	if err := DecodeBody(r, &body); err != nil {
		return nil, err
	}
	window, err := parseDrain(body, a.settings.Load().DrainWindow)
	if err != nil {
		return nil, err
	}
	scope, err := a.scopeOf(r)
	if err != nil {
		return nil, err
	}
	p, b, err := a.backend(r)
	if err != nil {
		return nil, err
	}
	var n int
	if scope == ScopeFleet {
		st := balance.AdminDrain
		if n, err = a.actFleet(r, p, b, Change{State: &st, Window: window}); err != nil {
			return nil, err
		}
	} else {
		if _, err := p.SetAdminState(b.ID(), balance.AdminDrain); err != nil {
			return nil, Errorf(http.StatusConflict, "%v", err)
		}
		// RFC 6455 §7.4.1 / IANA: 1012 "service restart" tells clients to
		// reconnect, which lands them on another backend.
		n = a.conns.DrainConns(b, window)
	}
	return struct {
		scoped
		Closing int     `json:"closing"`
		Window  float64 `json:"window_seconds"`
	}{scoped{docOf(b), scope}, n, window.Seconds()}, nil
}

func (a *api) setState(s balance.AdminState) Handler {
	return func(r *http.Request) (any, error) {
		if err := DecodeBody(r, &struct{}{}); err != nil {
			return nil, err
		}
		scope, err := a.scopeOf(r)
		if err != nil {
			return nil, err
		}
		p, b, err := a.backend(r)
		if err != nil {
			return nil, err
		}
		if scope == ScopeFleet {
			if _, err := a.actFleet(r, p, b, Change{State: &s}); err != nil {
				return nil, err
			}
		} else if _, err := p.SetAdminState(b.ID(), s); err != nil {
			return nil, Errorf(http.StatusConflict, "%v", err)
		}
		return scoped{docOf(b), scope}, nil
	}
}

// weightRequest is the body of weight; 0 returns to the declared weight.
type weightRequest struct {
	Weight *int `json:"weight"`
}

func (a *api) weight(r *http.Request) (any, error) {
	var body weightRequest
	if err := DecodeBody(r, &body); err != nil {
		return nil, err
	}
	if body.Weight == nil || *body.Weight < 0 || *body.Weight > balance.MaxWeight {
		return nil, Errorf(http.StatusBadRequest, `body: want {"weight": N}, N from 1 to %d, or 0 for the declared weight`, balance.MaxWeight)
	}
	scope, err := a.scopeOf(r)
	if err != nil {
		return nil, err
	}
	p, b, err := a.backend(r)
	if err != nil {
		return nil, err
	}
	if scope == ScopeFleet {
		if _, err := a.actFleet(r, p, b, Change{Weight: body.Weight}); err != nil {
			return nil, err
		}
	} else if _, err := p.SetAdminWeight(b.ID(), *body.Weight); err != nil {
		if errors.Is(err, balance.ErrUnknownBackend) {
			return nil, Errorf(http.StatusConflict, "%v", err)
		}
		return nil, Errorf(http.StatusBadRequest, "%v", err)
	}
	return scoped{docOf(b), scope}, nil
}
