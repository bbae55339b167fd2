package proxy

import (
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// identity is what this file decides about one request: who sent it.
type identity struct {
	peer    netip.Addr // the TCP peer, or the PROXY-protocol source
	client  netip.Addr // the decided client; used for stickiness, limits, X-Real-IP
	trusted bool       // the peer is a trusted proxy
}

// peerAddr parses http.Request.RemoteAddr. With the PROXY-protocol listener
// wrapper RemoteAddr is already the source address from the header.
func peerAddr(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

// isTrusted reports whether a is in one of the trusted prefixes. Both
// sides are compared unmapped: peers are unmapped when parsed, so an entry
// written as an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) must be
// unmapped too, or it could never match.
func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap()
	for _, p := range trusted {
		if unmapPrefix(p).Contains(a) {
			return true
		}
	}
	return false
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96); any
// other prefix is returned as it is.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

// decideClient is the one function that decides the client address. The peer
// is the client unless it is a trusted proxy; then the right-most
// X-Forwarded-For hop that is not itself trusted is the client, because
// everything to its left was written by parties we cannot vouch for
// (gorouter#179). If every hop is trusted, the left-most one is the client.
// A hop that does not parse stops the walk at the last trusted address seen.
func decideClient(remote string, xff []string, trusted []netip.Prefix) identity {
	id := identity{peer: peerAddr(remote)}
	id.client = id.peer
	id.trusted = isTrusted(id.peer, trusted)
	if !id.trusted {
		return id
	}
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				hop, v = v, ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			a := parseHop(hop)
			if !a.IsValid() {
				return id
			}
			id.client = a
			if !isTrusted(a, trusted) {
				return id
			}
		}
	}
	return id
}

// parseHop accepts "1.2.3.4", "1.2.3.4:80", "::1", "[::1]" and "[::1]:80".
func parseHop(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// hopByHop are the RFC 7230 §6.1 connection-specific headers, plus the
// Proxy-Connection and Keep-Alive headers legacy clients send.
var hopByHop = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes hop-by-hop headers, including every header named
// in Connection (RFC 7230 §6.1).
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// managedHeaders are the request headers edge writes itself, besides the
// listener's client-certificate header.
var managedHeaders = [...]string{
	"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port",
	"X-Real-Ip", "Forwarded", "X-Request-Id",
}

// dropLookalikes deletes every header whose name folds (ASCII case, '_'
// for '-') to a header edge manages or removes, other than that header's
// own canonical spelling, which backendHeader handles. CGI, WSGI and Rack
// (RFC 3875 §4.1.18) map both X-Real-IP and X_Real_IP to HTTP_X_REAL_IP,
// so a lookalike would let a client speak through a header edge writes;
// nginx drops names with underscores for the same reason
// (underscores_in_headers off). The client-certificate header is dropped
// in every spelling.
func dropLookalikes(h http.Header, certHeader string) {
	for k := range h {
		if certHeader != "" && foldsTo(k, certHeader) {
			delete(h, k)
			continue
		}
		for _, m := range managedHeaders {
			if k != m && foldsTo(k, m) {
				delete(h, k)
				break
			}
		}
		for _, m := range hopByHop {
			if k != m && foldsTo(k, m) {
				delete(h, k)
				break
			}
		}
	}
}

// foldsTo reports whether header name k equals m ignoring ASCII case and
// taking '_' for '-'.
func foldsTo(k, m string) bool {
	if len(k) != len(m) {
		return false
	}
	for i := 0; i < len(k); i++ {
		a, b := foldByte(k[i]), foldByte(m[i])
		if a != b {
			return false
		}
	}
	return true
}

func foldByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case c >= 'A' && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// backendHeader builds the header sent to the backend: the client's header
// without hop-by-hop fields, with the forwarded headers set as ListenerOptions
// says. The client's header is not modified.
func backendHeader(r *http.Request, lo *ListenerOptions, id identity) http.Header {
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	removeHopByHop(h)
	dropLookalikes(h, lo.ClientCertHeader)

	proto := "http"
	if r.TLS != nil || lo.TLS {
		proto = "https"
	}
	setXForwarded(h, r, id, proto)
	if id.client.IsValid() {
		h.Set("X-Real-Ip", id.client.String())
	} else {
		delete(h, "X-Real-Ip")
	}
	if lo.Forwarded {
		setForwarded(h, r, id, proto)
	} else if !id.trusted {
		delete(h, "Forwarded")
	}
	if lo.ClientCertHeader != "" {
		// Always drop a client-sent copy: only a verified certificate may
		// speak through this header.
		// (dropLookalikes removed it in every spelling.)
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
			if name := clientIdentity(r.TLS.PeerCertificates[0]); name != "" {
				h.Set(lo.ClientCertHeader, name)
			}
		}
	}
	return h
}

// setXForwarded sets the X-Forwarded-* fields of h: a trusted hop's are
// extended (For) or kept (Proto, Host, Port), an untrusted client's
// replaced.
func setXForwarded(h http.Header, r *http.Request, id identity, proto string) {
	host := r.Host
	port := localPort(r, proto)
	peer := ""
	if id.peer.IsValid() {
		peer = id.peer.String()
	}
	if !id.trusted {
		// An untrusted client's own forwarding claims are discarded, never
		// extended (gorouter#179).
		h.Set("X-Forwarded-For", peer)
		h.Set("X-Forwarded-Proto", proto)
		h.Set("X-Forwarded-Host", host)
		h.Set("X-Forwarded-Port", port)
		return
	}
	if v := r.Header["X-Forwarded-For"]; len(v) > 0 {
		h.Set("X-Forwarded-For", strings.Join(v, ", ")+", "+peer)
	} else {
		h.Set("X-Forwarded-For", peer)
	}
	setIfEmpty(h, "X-Forwarded-Proto", proto)
	setIfEmpty(h, "X-Forwarded-Host", host)
	setIfEmpty(h, "X-Forwarded-Port", port)
}

// setForwarded sets RFC 7239's Forwarded field of h: a trusted hop's list
// extended by this hop's element, anyone else's replaced by it.
func setForwarded(h http.Header, r *http.Request, id identity, proto string) {
	elem := "for=" + forwardedNode(id.peer) + ";proto=" + proto
	if r.Host != "" {
		elem += ";host=" + forwardedValue(r.Host)
	}
	if v := r.Header["Forwarded"]; id.trusted && len(v) > 0 {
		h.Set("Forwarded", strings.Join(v, ", ")+", "+elem)
	} else {
		h.Set("Forwarded", elem)
	}
}

func setIfEmpty(h http.Header, k, v string) {
	if h.Get(k) == "" {
		h.Set(k, v)
	}
}

// localPort is the port the client connected to.
func localPort(r *http.Request, proto string) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return strconv.Itoa(int(ap.Port()))
		}
	}
	if _, p, err := net.SplitHostPort(r.Host); err == nil && p != "" {
		return p
	}
	if proto == "https" {
		return "443"
	}
	return "80"
}

// forwardedNode renders a node for RFC 7239 "for=": IPv6 addresses are
// bracketed and quoted (§6), unknown peers are "unknown" (§6.2).
func forwardedNode(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is6():
		return `"[` + a.String() + `]"`
	default:
		return a.String()
	}
}

// forwardedValue quotes v unless it is an RFC 7230 token (RFC 7239 §4).
func forwardedValue(v string) string {
	for i := 0; i < len(v); i++ {
		if !isTokenChar(v[i]) {
			return strconv.Quote(v)
		}
	}
	return v
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// clientIdentity is the identity of a verified client certificate, the
// value of the client-certificate header: the subject common name, else
// the first DNS, e-mail, URI or IP subject alternative name, escaped as an
// RFC 4514 §2.4 attribute value. The characters RFC 4514 gives a meaning
// (`"+,;<>\=`), a leading '#' or space and a trailing space get a
// backslash; control characters, DEL and every byte outside ASCII become
// \XX hex pairs. So the value is always one legal header line (no CR/LF
// injection) and a backend that splits it on commas or reads it as a DN
// cannot be misled by a name the certificate's owner chose.
func clientIdentity(c *x509.Certificate) string {
	var v string
	switch {
	case c.Subject.CommonName != "":
		v = c.Subject.CommonName
	case len(c.DNSNames) > 0:
		v = c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		v = c.EmailAddresses[0]
	case len(c.URIs) > 0:
		v = c.URIs[0].String()
	case len(c.IPAddresses) > 0:
		v = c.IPAddresses[0].String()
	}
	return escapeRFC4514(v)
}

// escapeRFC4514 escapes v as an RFC 4514 §2.4 attribute value, with every
// byte that is not printable ASCII as a hex pair.
func escapeRFC4514(v string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c < 0x20 || c >= 0x7f:
			b.WriteByte('\\')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		case strings.IndexByte(`"+,;<>\\=`, c) >= 0,
			(c == '#' || c == ' ') && i == 0,
			c == ' ' && i == len(v)-1:
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
