package main

import (
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

	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/internal/admin"
)

// upgradeClient is edge -upgrade: it asks the edge serving cfg's admin
// address to upgrade, waits for the outcome and prints it. It exits 0 once
// the new process serves, 1 with the reason otherwise.
func upgradeClient(cfg *conf.Config, stdout, stderr io.Writer) int {
	base, err := adminBase(cfg.Admin.Address)
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	token, err := clientToken(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	// A fresh connection per request: a kept-alive one would reach the
	// old process after it handed over. The token goes to this host only
	// (localDialer): plain HTTP to another host would show it to the
	// network.
	hc := &http.Client{
		Timeout:   upgradeClientTimeout(cfg),
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: localDialer().DialContext},
	}
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/upgrade", strings.NewReader("{}"))
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := doWatching(hc, req, base, token, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "edge -upgrade: %s: %v\n", base, err)
		if errors.Is(err, errNotLocal) {
			fmt.Fprintln(stderr, "edge -upgrade: run it on the edge host (ssh HOST edge -upgrade -config FILE), or through a tunnel to its loopback (ssh -L 9901:127.0.0.1:9901 HOST)")
		}
		return 1
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
		fmt.Fprintf(stderr, "edge -upgrade: %s: %s\n", resp.Status, e.Error)
		return 1
	}
	var doc upgradeDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		fmt.Fprintf(stderr, "edge -upgrade: answer %q: %v\n", body, err)
		return 1
	}
	pid, ver := newProcess(hc, base, token, doc.OldPID)
	fmt.Fprintf(stdout, "edge: upgraded to %s: pid %d now serves (version %s); pid %d drains\n", doc.Binary, pid, ver, doc.OldPID)
	return 0
}

// upgradeClientTimeout bounds edge -upgrade's request: the wait for a
// fleet slot, then the new process's start, and a margin.
func upgradeClientTimeout(cfg *conf.Config) time.Duration {
	d := cfg.Upgrade.Timeout.Std() + 30*time.Second
	if cfg.Upgrade.FleetConcurrency > 0 {
		d += cfg.Upgrade.FleetWait.Std()
	}
	return d
}

// doWatching sends the upgrade request and, until its answer, prints
// every new wait for a fleet upgrade slot that /status reports (one a
// round, each saying for how long and who holds the slots).
func doWatching(hc *http.Client, req *http.Request, base, token string, out io.Writer) (*http.Response, error) {
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := hc.Do(req)
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
		if st := upgradeState(hc, base, token); st != last && strings.HasPrefix(st, "waiting for a fleet upgrade slot") {
			fmt.Fprintln(out, "edge -upgrade:", st)
			last = st
		}
	}
}

// upgradeState is /status's "upgrade", or "" when it cannot be read.
func upgradeState(hc *http.Client, base, token string) string {
	req, err := http.NewRequest(http.MethodGet, base+"/status", nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		Upgrade string `json:"upgrade"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st) != nil {
		return ""
	}
	return st.Upgrade
}

// clientToken is the credential edge's clients send: the file's token,
// else the one edge generated in state_dir. Reading that file is what
// makes the caller edge's own user; nobody else may upgrade.
func clientToken(cfg *conf.Config) (string, error) {
	tok, err := cfg.Admin.API.Token()
	if err != nil || tok != "" {
		return string(tok), err
	}
	if cfg.StateDir == "" {
		return "", errors.New("no admin token: the file sets no admin.api.token_file or token_env, and no state_dir where edge keeps a generated one (or send SIGUSR2 to edge's process)")
	}
	t, err := admin.ReadToken(cfg.StateDir)
	if err != nil {
		return "", fmt.Errorf("%w (edge generates it at its first start; only edge's own user may read it)", err)
	}
	return t, nil
}

// errNotLocal is a connection refused because the credential would leave
// this host in the clear.
var errNotLocal = errors.New("refusing to send the admin token over plain HTTP to an address that is not this host's")

// localDialer connects only to this host: a loopback address or one of
// its own interfaces' (which the kernel routes through loopback), checked
// on the address actually dialled, after any name resolution.
func localDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%s: %w", address, errNotLocal)
		}
		if ip := ap.Addr().Unmap(); ip.IsLoopback() || ownAddress(ip) {
			return nil
		}
		return fmt.Errorf("%s: %w", address, errNotLocal)
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

// newProcess reads /status until another process than old answers, for
// its pid and version; the old one may answer for a moment after handing
// over. It gives 0 and "unknown" after a few seconds.
func newProcess(hc *http.Client, base, token string, old int) (int, string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var st struct {
			PID     int    `json:"pid"`
			Version string `json:"version"`
		}
		req, err := http.NewRequest(http.MethodGet, base+"/status", nil)
		if err != nil {
			return 0, "unknown"
		}
		// The token also answers for a Host the listener does not list.
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && st.PID != 0 && st.PID != old {
			return st.PID, st.Version
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, "unknown"
}
