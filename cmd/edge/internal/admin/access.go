package admin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgelb/edge/internal/hostname"
	"github.com/edgelb/edge/internal/trust"
)

// TokenFile is the name, in the state directory, of the token edge
// generates when the file configures none.
const TokenFile = "admin.token"

// hostGuard answers 421 to a request whose Host is not one this listener
// answers to, unless it carries the API token. A web page on the edge host
// can rebind its own name to 127.0.0.1 and so reach the admin listener
// from the browser: its requests then carry the page's name as Host, which
// is how they are told apart (RFC 9110 §15.5.20: 421 is the status for a
// request this server is not configured to answer for that authority).
// Reads are guarded as writes are: /status and the connection list show
// client addresses and paths. An IP literal cannot be rebound, so the
// address the connection reached and any loopback address pass, and so
// does localhost, which resolves to loopback.
func (s *Server) hostGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.api.settings.Load()
		if !hostAllowed(r, st.AllowedHosts) && !HasToken(r, st.Token) {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, fmt.Sprintf("Host %q is not this listener's: use its address, localhost, or a name in admin.allowed_hosts", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether r's Host names the address r reached, a
// loopback address, localhost, or one of allowed (canonical names or IP
// literals). An empty Host (HTTP/1.0) names nothing and is refused.
func hostAllowed(r *http.Request, allowed []string) bool {
	host := hostname.Request(r.Host)
	if host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	for _, a := range allowed {
		if host == a {
			return true
		}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	if ip.IsLoopback() {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	la, err := netip.ParseAddrPort(local.String())
	return err == nil && la.Addr().Unmap().WithZone("") == ip.WithZone("")
}

// CanonicalHosts returns the file's admin.allowed_hosts in the form
// hostAllowed compares: names canonical, IP literals in their standard
// form.
func CanonicalHosts(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
			out = append(out, ip.Unmap().String())
			continue
		}
		out = append(out, hostname.Canonical(h))
	}
	return out
}

// LoadOrCreateToken returns the token in dir/admin.token, generating it
// first when the file does not exist: 32 random bytes, hex, in a file of
// mode 0600 that only the user edge runs as (and root) can read. That user
// is who may change edge through the API; anyone else on the host reads
// at most. The file is written aside and linked into place, so a reader
// never sees it half-written and two starts never overwrite each other.
func LoadOrCreateToken(dir string) (string, error) {
	if err := trust.Dir(dir); err != nil {
		return "", fmt.Errorf("admin token: state_dir: %w", err)
	}
	tok, err := ReadToken(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".admin.token-*")
	if err != nil {
		return "", fmt.Errorf("admin token in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 already; say so against a change.
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.WriteString(hex.EncodeToString(raw[:]) + "\n")
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), filepath.Join(dir, TokenFile))
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("admin token in %s: %w", dir, err)
	}
	// Ours, or one another start linked first: either way the file's.
	return ReadToken(dir)
}

// ReadToken reads dir/admin.token if it is edge's (internal/trust): a
// file that group or others may read or write is refused, as ssh refuses
// such a key, and so is one owned by another user, a symbolic link, or
// one in a directory another user could write to or made: its token no
// longer tells edge's user apart from the others (another user who
// planted it would drive the upgrade endpoint, which runs a binary).
func ReadToken(dir string) (string, error) {
	path := filepath.Join(dir, TokenFile)
	f, err := trust.Open(path, trust.Secret)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	defer f.Close()
	b := make([]byte, 256)
	n, err := f.Read(b)
	if err != nil {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) < 16 {
		return "", fmt.Errorf("admin token %s: %d bytes, need at least 16", path, len(tok))
	}
	return tok, nil
}
