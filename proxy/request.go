package proxy

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// invalidRequest reports why r cannot be routed and forwarded as it is, or
// "" when it can. Everything refused here is answered 400 before routing:
// a request edge would have to rewrite to forward (a fragment dropped, a
// Host mangled, dot segments resolved) would reach a backend other than
// the one its route names, or a different resource than the one routed.
// net/http has already refused what does not parse as HTTP/1.x (bad
// request line, header syntax, several Host fields, bad framing).
func invalidRequest(r *http.Request) string {
	switch {
	case r.Method == http.MethodConnect:
		// RFC 9110 §9.3.6: CONNECT asks for a tunnel; edge is no forward
		// proxy, and the authority-form target has no path to route.
		return "bad_method"
	case strings.IndexByte(r.RequestURI, '#') >= 0:
		// RFC 9112 §3.2: a request-target has no fragment (HAProxy refuses
		// it too); stripping it after routing changes the path routed.
		return "bad_target"
	case !validTarget(r):
		return "bad_target"
	case !validHost(r.Host):
		// RFC 9112 §3.2: a Host with no value, or one that is no RFC 3986
		// authority host (nginx answers an empty Host with 400).
		return "bad_host"
	case hasDotSegment(r.URL.Path):
		return "bad_path"
	}
	return ""
}

// validTarget accepts origin-form (RFC 9112 §3.2.1) and absolute-form
// (§3.2.2) with an http or https scheme and no userinfo. For absolute
// form net/http has set r.Host to the target's authority, which RFC 9112
// §3.2.2 says replaces the Host field: edge routes on it and sends it as
// Host with an origin-form target, so route and backend agree.
// Asterisk-form (OPTIONS *) has no path to route.
func validTarget(r *http.Request) bool {
	u := r.URL
	if u == nil || r.RequestURI == "" {
		return false
	}
	if r.RequestURI[0] == '/' {
		return u.Scheme == "" && u.Host == ""
	}
	scheme := strings.ToLower(u.Scheme)
	return (scheme == "http" || scheme == "https") && u.User == nil && u.Host != "" && u.Opaque == ""
}

// validHost accepts uri-host [ ":" port ] (RFC 9110 §7.2, RFC 3986 §3.2.2):
// a reg-name of unreserved characters and sub-delims (percent-encoding
// refused: nothing routes on its decoded form), an IPv4 address, or an
// IPv6 literal in brackets; a port is 1 to 5 digits up to 65535.
func validHost(h string) bool {
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		ip, err := netip.ParseAddr(h[1:end])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return false
		}
		host, port = "", h[end+1:]
		if port != "" && port[0] != ':' {
			return false
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i:]
	}
	if port != "" && !validPort(port[1:]) {
		return false
	}
	if strings.HasPrefix(h, "[") {
		return true
	}
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		if !regNameByte(host[i]) {
			return false
		}
	}
	return true
}

// validPort accepts 1 to 5 digits up to 65535.
func validPort(p string) bool {
	if len(p) < 1 || len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(p)
	return err == nil && n <= 65535
}

// regNameByte: unreserved / sub-delims of RFC 3986 §2.2–2.3.
func regNameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=", c) >= 0
}

// hasDotSegment reports a "." or ".." segment in the decoded path. RFC
// 3986 §5.2.4 resolves them only in references; browsers remove them
// before sending, and a backend that resolves "/chat/../admin" would
// serve a resource outside the prefix that routed it. Checking the
// decoded path catches "%2e%2e" and "%2F..%2F" as well.
func hasDotSegment(p string) bool {
	for p != "" {
		i := strings.IndexByte(p, '/')
		seg := p
		if i >= 0 {
			seg, p = p[:i], p[i+1:]
		} else {
			p = ""
		}
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
