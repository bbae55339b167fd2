package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/cmd/edge/internal/sockets"
	"github.com/edgelb/edge/cmd/edge/internal/tokens"
	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/internal/trust"
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
// expired certificate while its listener has another one). With fetch
// (-check), the token providers' key servers are asked too; startup asks
// them once, in the token component.
func preflight(cfg *conf.Config, fetch bool) (warnings []error, err error) {
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
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	authWarn, authErrs := tokens.Check(ctx, &cfg.Auth, fetch)
	for _, f := range authErrs {
		errs = append(errs, cfg.ErrorAt(fmt.Sprintf("auth.providers[%d]", f.Provider), "%v", f.Err))
	}
	for _, f := range authWarn {
		warnings = append(warnings, cfg.ErrorAt(fmt.Sprintf("auth.providers[%d]", f.Provider), "%v; edge starts without these keys and refuses their tokens until the key server answers", f.Err))
	}
	if err := stateDirTrusted(cfg.StateDir); err != nil {
		errs = append(errs, cfg.ErrorAt("state_dir", "%v", err))
	} else {
		for _, err := range stateFilesTrusted(cfg.StateDir) {
			warnings = append(warnings, cfg.ErrorAt("state_dir", "%v; edge does not read it, and starts without what it held", err))
		}
	}
	return warnings, errors.Join(errs...)
}

// stateDirTrusted checks state_dir, when it exists, and the admin token
// in it, when there is one, as startup reads them (internal/trust): a
// state_dir another user made or can write to, or a token they planted,
// is refused here too.
func stateDirTrusted(dir string) error {
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // startup makes it, 0700
	}
	if err := trust.Dir(dir); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(dir, admin.TokenFile)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	_, err := admin.ReadToken(dir)
	return err
}

// stateFilesTrusted judges every other file in state_dir as edge reads
// its state back (internal/trust: the saved sets, the fleet's actions,
// the OCSP staples and issuers): one that is not edge's, a link among
// them, is not read at start, which serves without it; -check says which
// and why, as startup's log does.
func stateFilesTrusted(dir string) []error {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // a missing state_dir is made at start; stateDirTrusted judged the rest
	}
	var errs []error
	for _, ent := range entries {
		if ent.IsDir() || ent.Name() == admin.TokenFile {
			continue
		}
		f, err := trust.Open(filepath.Join(dir, ent.Name()), trust.State)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.Close()
	}
	return errs
}

// sameSockets resolves the admin and listener addresses and reports any two
// that would bind the same socket (sockets.Clashes), and any that does not
// resolve, at its place in the file.
func sameSockets(cfg *conf.Config) []error {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	var binds []sockets.Bind
	for i, l := range cfg.Listeners {
		binds = append(binds, sockets.Bind{Where: fmt.Sprintf("listeners[%d].address", i), Addr: l.Address})
	}
	// Last, so that a clash with a listener is reported at admin.address.
	binds = append(binds, sockets.Bind{Where: "admin.address", Addr: cfg.Admin.Address})
	var errs []error
	for _, p := range sockets.Clashes(ctx, binds) {
		errs = append(errs, cfg.ErrorAt(p.Where, "%v", p.Err))
	}
	return errs
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
		Curves:       lc.TLS.CurveIDs(),
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
