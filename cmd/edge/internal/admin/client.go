package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// UpgradeAnswer is the answer to a successful POST /api/v1/upgrade.
type UpgradeAnswer struct {
	Result string `json:"result"`
	Binary string `json:"binary"`
	// OldPID is the process that answered and now drains.
	OldPID int `json:"old_pid"`
}

// Upgraded is what RequestUpgrade learnt: the old process's answer and
// the process that serves now (PID 0 and Version "unknown" when it did
// not answer /status within a few seconds).
type Upgraded struct {
	UpgradeAnswer
	PID     int
	Version string
}

// ErrNotLocal is a connection refused because the credential would leave
// this host in the clear.
var ErrNotLocal = errors.New("refusing to send the admin token over plain HTTP to an address that is not this host's")

// Client asks the admin API of an edge on this host, with its token: the
// client of edge -upgrade. It connects only to this host (LocalDialer):
// plain HTTP to another would show the token to the network.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client of the admin listener at addr (admin.address;
// loopback when it listens on every address) that sends token and gives
// up on a request after timeout.
func NewClient(addr, token string, timeout time.Duration) (*Client, error) {
	base, err := adminBase(addr)
	if err != nil {
		return nil, err
	}
	// A fresh connection per request: a kept-alive one would reach the
	// old process after it handed over.
	hc := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: LocalDialer().DialContext},
	}
	return &Client{base: base, token: token, hc: hc}, nil
}

// Base is the URL the client asks, for messages.
func (c *Client) Base() string { return c.base }

// RequestUpgrade asks the edge to upgrade and waits for the outcome: nil
// once the new process serves, the API's reason otherwise. Until the
// answer, waiting is called with every new wait for a fleet upgrade slot
// that /status reports. A refused connection wraps ErrNotLocal.
func (c *Client) RequestUpgrade(waiting func(state string)) (Upgraded, error) {
	req, err := http.NewRequest(http.MethodPost, c.base+"/api/v1/upgrade", strings.NewReader("{}"))
	if err != nil {
		return Upgraded{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	// The token itself never leaves: the listener proves it is edge, then
	// this request proves the token under edge's nonce (proof.go).
	proof, err := c.prove(req.Method, req.URL.Path)
	if err != nil {
		return Upgraded{}, fmt.Errorf("%s: %w", c.base, err)
	}
	req.Header.Set("Authorization", proof)
	resp, err := c.doWatching(req, waiting)
	if err != nil {
		return Upgraded{}, fmt.Errorf("%s: %w", c.base, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		return Upgraded{}, fmt.Errorf("%s: %s", resp.Status, e.Error)
	}
	var doc UpgradeAnswer
	if err := json.Unmarshal(body, &doc); err != nil {
		return Upgraded{}, fmt.Errorf("answer %q: %w", body, err)
	}
	pid, ver := c.newProcess(doc.OldPID)
	return Upgraded{UpgradeAnswer: doc, PID: pid, Version: ver}, nil
}

// doWatching sends the upgrade request and, until its answer, calls
// waiting with every new wait for a fleet upgrade slot that /status
// reports (one a round, each saying for how long and who holds the
// slots).
func (c *Client) doWatching(req *http.Request, waiting func(string)) (*http.Response, error) {
	type answer struct {
		resp *http.Response
		err  error
	}
	// The request's goroutine ends with the request, which hc.Timeout
	// bounds; got is buffered so it never waits for this one.
	got := make(chan answer, 1)
	go func() {
		resp, err := c.hc.Do(req)
		got <- answer{resp, err}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		select {
		case a := <-got:
			return a.resp, a.err
		case <-tick.C:
		}
		if st := c.upgradeState(); st != last && strings.HasPrefix(st, "waiting for a fleet upgrade slot") {
			waiting(st)
			last = st
		}
	}
}

// upgradeState is /status's "upgrade", or "" when it cannot be read.
func (c *Client) upgradeState() string {
	var st struct {
		Upgrade string `json:"upgrade"`
	}
	if c.getStatus(&st) != nil {
		return ""
	}
	return st.Upgrade
}

// getStatus decodes /status into v. It carries no credential: the
// client asks the listener's own address, which the Host guard allows.
func (c *Client) getStatus(v any) error {
	req, err := http.NewRequest(http.MethodGet, c.base+"/status", nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// newProcess reads /status until another process than old answers, for
// its pid and version; the old one may answer for a moment after handing
// over. It gives 0 and "unknown" after a few seconds.
func (c *Client) newProcess(old int) (int, string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var st struct {
			PID     int    `json:"pid"`
			Version string `json:"version"`
		}
		if err := c.getStatus(&st); err == nil && st.PID != 0 && st.PID != old {
			return st.PID, st.Version
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, "unknown"
}

// LocalDialer connects only to this host: a loopback address or one of
// its own interfaces' (which the kernel routes through loopback), checked
// on the address actually dialled, after any name resolution. Any other
// is refused before a packet leaves, with ErrNotLocal.
func LocalDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%s: %w", address, ErrNotLocal)
		}
		if ip := ap.Addr().Unmap(); ip.IsLoopback() || ownAddress(ip) {
			return nil
		}
		return fmt.Errorf("%s: %w", address, ErrNotLocal)
	}}
}

// ownAddress reports whether ip is assigned to one of this host's
// interfaces.
func ownAddress(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if own, ok := netip.AddrFromSlice(n.IP); ok && own.Unmap() == ip.WithZone("") {
				return true
			}
		}
	}
	return false
}

// adminBase is the URL of the admin listener at addr, on loopback when it
// listens on every address.
func adminBase(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("admin.address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// ErrNotEdge is a listener at the admin address that could not prove it
// knows the token: not edge (another local user listening there while
// edge is down), or an edge with another token.
var ErrNotEdge = errors.New("did not prove it is edge (it does not know the admin token); nothing secret was sent")

// prove asks the listener to prove it knows the token (POST
// /api/v1/challenge) and returns the Authorization value of a request
// method path proving the client knows it too (proof.go). Nothing sent
// before the listener's proof is checked depends on the token.
func (c *Client) prove(method, path string) (string, error) {
	var nc [32]byte
	if _, err := rand.Read(nc[:]); err != nil {
		return "", err
	}
	ncHex := hex.EncodeToString(nc[:])
	req, err := http.NewRequest(http.MethodPost, c.base+"/api/v1/challenge", strings.NewReader(`{"client_nonce":"`+ncHex+`"}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var ch struct {
		Nonce string `json:"nonce"`
		Proof string `json:"proof"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&ch) != nil ||
		len(ch.Nonce) != 64 || !hmac.Equal([]byte(ch.Proof), []byte(serverProof(c.token, ncHex, ch.Nonce))) {
		return "", fmt.Errorf("the listener %w", ErrNotEdge)
	}
	return proofScheme + ch.Nonce + " " + clientProof(c.token, ch.Nonce, method, path), nil
}
