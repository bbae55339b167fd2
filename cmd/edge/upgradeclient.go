package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/edgelb/edge/conf"
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
	token, err := cfg.Admin.API.Token()
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	// A fresh connection per request: a kept-alive one would reach the
	// old process after it handed over.
	hc := &http.Client{
		Timeout:   cfg.Upgrade.Timeout.Std() + 30*time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/upgrade", strings.NewReader("{}"))
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+string(token))
	}
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "edge -upgrade: %s: %v\n", base, err)
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
	pid, ver := newProcess(hc, base, doc.OldPID)
	fmt.Fprintf(stdout, "edge: upgraded to %s: pid %d now serves (version %s); pid %d drains\n", doc.Binary, pid, ver, doc.OldPID)
	return 0
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
func newProcess(hc *http.Client, base string, old int) (int, string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var st struct {
			PID     int    `json:"pid"`
			Version string `json:"version"`
		}
		resp, err := hc.Get(base + "/status")
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
