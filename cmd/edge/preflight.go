package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/edgelb/edge/conf"
	edgetls "github.com/edgelb/edge/tls"
)

// resolveTimeout bounds the name lookups of preflight.
const resolveTimeout = 5 * time.Second

// preflight runs every check of startup that conf.Validate cannot make
// alone, binding nothing: the TLS material of every listener is read and
// checked as edgetls.New will (keys matched, certificates parsed and dated,
// issuer, client CA and ticket key files read), and the listener and admin
// addresses are resolved as net.Listen will and compared. `edge -check` and
// startup both call it, so a file -check passes does not fail at start for
// any of these reasons. Warnings are problems startup serves around (an
// expired certificate while its listener has another one).
func preflight(cfg *conf.Config) (warnings []error, err error) {
	var errs []error
	for i := range cfg.Listeners {
		lc := cfg.Listeners[i]
		if lc.TLS == nil {
			continue
		}
		path := fmt.Sprintf("listeners[%d].tls", i)
		res := edgetls.Check(tlsOptions(cfg, lc))
		at := func(f edgetls.Finding) error {
			if f.Cert < 0 {
				return cfg.ErrorAt(path, "%v", f.Err)
			}
			return cfg.ErrorAt(fmt.Sprintf("%s.certificates[%d]", path, f.Cert), "%v", f.Err)
		}
		for _, f := range res.Errors {
			errs = append(errs, at(f))
		}
		for _, f := range res.Warnings {
			warnings = append(warnings, cfg.ErrorAt(fmt.Sprintf("%s.certificates[%d]", path, f.Cert), "%v; not served, the listener serves its other certificates", f.Err))
		}
	}
	errs = append(errs, sameSockets(cfg)...)
	return warnings, errors.Join(errs...)
}

// socket is one address edge binds, resolved.
type socket struct {
	path, addr string
	ap         netip.AddrPort
}

// sameSockets resolves the admin and listener addresses and reports any two
// that would bind the same socket. SO_REUSEPORT (set on listeners so that
// several edge processes can share a port) lets the kernel accept both, and
// then it spreads connections between them: a plain listener on
// localhost:P and a TLS one on 127.0.0.1:P answer each other's clients.
func sameSockets(cfg *conf.Config) []error {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	var errs []error
	var socks []socket
	add := func(path, addr string) {
		ap, err := resolveListen(ctx, addr)
		if err != nil {
			errs = append(errs, cfg.ErrorAt(path, "%v", err))
			return
		}
		if ap.Port() != 0 { // port 0: any free port, never the same
			socks = append(socks, socket{path, addr, ap})
		}
	}
	for i, l := range cfg.Listeners {
		add(fmt.Sprintf("listeners[%d].address", i), l.Address)
	}
	// Last, so that a clash with a listener is reported at admin.address.
	add("admin.address", cfg.Admin.Address)
	for j := range socks {
		for i := range j {
			a, b := socks[i], socks[j]
			if overlap(a.ap, b.ap) {
				errs = append(errs, cfg.ErrorAt(b.path, "%s (%s) is the same socket as %s %s (%s): edge would bind it twice",
					b.addr, b.ap, a.path, a.addr, a.ap))
			}
		}
	}
	return errs
}

// overlap reports whether two bound addresses take the same connections:
// same port, and the same address or a wildcard on either side (Go listens
// on a wildcard in dual stack).
func overlap(a, b netip.AddrPort) bool {
	if a.Port() != b.Port() {
		return false
	}
	x, y := a.Addr().Unmap(), b.Addr().Unmap()
	return x == y || x.IsUnspecified() || y.IsUnspecified()
}

// resolveListen returns the address net.Listen("tcp", addr) binds: an
// empty host is the wildcard, a name is resolved and its first IPv4
// address taken, else its first address (as net.Listen does).
func resolveListen(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s: bad port: %w", addr, err)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(p)), nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%s: cannot resolve %s: %w", addr, host, err)
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("%s: %s has no address", addr, host)
	}
	pick := ips[0]
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			pick = ip
			break
		}
	}
	return netip.AddrPortFrom(pick.Unmap(), uint16(p)), nil
}

// tlsOptions are the terminator options of a TLS listener, without what
// only a running edge has (logger, observer, Consul ticket key source).
func tlsOptions(cfg *conf.Config, lc conf.Listener) edgetls.Options {
	certs := make([]edgetls.CertFiles, 0, len(lc.TLS.Certificates))
	for _, c := range lc.TLS.Certificates {
		certs = append(certs, edgetls.CertFiles{CertFile: c.CertFile, KeyFile: c.KeyFile, IssuerFile: c.IssuerFile})
	}
	return edgetls.Options{
		Certificates: certs,
		MinVersion:   lc.TLS.Version(),
		ClientCAFile: lc.TLS.ClientCAFile,
		Tickets: edgetls.TicketOptions{
			Disabled:    !lc.TLS.SessionTickets.Enabled,
			RotateEvery: lc.TLS.SessionTickets.RotateEvery.Std(),
			Keep:        lc.TLS.SessionTickets.Keep,
			KeyFile:     lc.TLS.SessionTickets.KeyFile,
		},
		OCSP: edgetls.OCSPOptions{
			Disabled:   !lc.TLS.OCSP.Enabled,
			MustStaple: lc.TLS.OCSP.MustStaple,
		},
		StateDir: cfg.StateDir,
	}
}
