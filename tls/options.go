package tls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Default values applied by New when the corresponding Options field is zero.
const (
	DefaultReloadInterval = 2 * time.Second
	DefaultRotateEvery    = time.Hour
	DefaultKeep           = 3
	DefaultOCSPTimeout    = 5 * time.Second
)

// Must-staple policies for OCSPOptions.MustStaple.
const (
	// MustStapleRefuse never serves a must-staple certificate without a valid
	// staple: the handshake falls back to another certificate for the name or
	// fails.
	MustStapleRefuse = "refuse"
	// MustStapleServe serves a must-staple certificate even without a staple
	// and reports it in Status.
	MustStapleServe = "serve"
)

// maxTicketAge is the longest a session ticket may live: RFC 8446 section
// 4.6.1 forbids lifetimes over seven days and crypto/tls enforces the same cap
// on its own (maxSessionTicketLifetime).
const maxTicketAge = 7 * 24 * time.Hour

// Options configures a Terminator. The zero value of every field is a
// documented default; see doc.go for the full list.
type Options struct {
	// Certificates lists the certificate/key pairs to serve, at least one.
	// The first is the default for clients that send no or an unknown SNI.
	Certificates []CertFiles
	// MinVersion is tls.VersionTLS12 (default) or tls.VersionTLS13.
	MinVersion uint16
	// Curves are the key exchanges offered (tls.Config.CurvePreferences,
	// whose order Go ignores); nil is Go's defaults, hybrid X25519MLKEM768
	// first.
	Curves []tls.CurveID
	// ClientCAFile, when set, turns on mutual TLS: clients must present a
	// certificate that chains to one of the PEM certificates in this file.
	ClientCAFile string
	// Tickets configures session resumption.
	Tickets TicketOptions
	// OCSP configures stapling.
	OCSP OCSPOptions
	// StateDir, when set, keeps the last good OCSP staple of every
	// certificate so that a restart staples from the first handshake.
	StateDir string
	// ReloadInterval is how often Run polls the certificate files (and the
	// ticket key source) for changes. Zero means DefaultReloadInterval; a
	// negative value turns polling off (Reload still works).
	ReloadInterval time.Duration
	// Logger receives the package's logs; nil means slog.Default().
	Logger *slog.Logger
	// Observer receives events; nil means none.
	Observer Observer
	// Now is the clock, for tests; nil means time.Now. It also becomes the
	// tls.Config's Time.
	Now func() time.Time
}

// CertFiles names one certificate chain and its private key, both PEM. The
// certificate file holds the leaf first, then its intermediates in order; the
// certificate right after the leaf, when it signed the leaf, is the issuer
// used to check OCSP responses.
type CertFiles struct {
	// CertFile is the PEM chain, leaf first.
	CertFile string
	// KeyFile is the leaf's PEM private key.
	KeyFile string
	// IssuerFile, when set, holds PEM certificates among which is the one
	// that signed the leaf (HAProxy's ".issuer" file, nginx's
	// ssl_trusted_certificate): it lets OCSP responses be requested and
	// verified when CertFile holds the leaf alone.
	IssuerFile string
}

// TicketOptions configures session tickets (TLS 1.2, RFC 5077) and PSK
// resumption (TLS 1.3, RFC 8446 section 4.6.1).
type TicketOptions struct {
	// Disabled turns resumption off: every handshake is a full one.
	Disabled bool
	// RotateEvery is how often a fresh key starts encrypting tickets
	// (default 1h). With a KeyFile or Source the operator rotates; the value
	// then only bounds ticket age.
	RotateEvery time.Duration
	// Keep is how many keys are accepted, the newest included (default 3).
	Keep int
	// KeyFile, when set, reads the keys from a file the operator
	// distributes to every node of a fleet (format in doc.go), re-read when
	// it changes.
	KeyFile string
	// Source, when set, supplies the keys (for example from Consul KV). It
	// cannot be combined with KeyFile. Unlike a KeyFile, a Source that fails
	// at New is not an error: the Terminator starts with a key of its own,
	// reports the failure in Status, and takes the source's keys at the
	// first poll that succeeds.
	Source TicketKeySource
	// Carried is the state of the keys the process this one took over
	// from generated (Terminator.TicketState, passed on by an upgrade):
	// with neither KeyFile nor Source, the Terminator starts from those
	// keys and their rotation schedule, so the sessions of the previous
	// process resume here. Anything else is ignored; a state that cannot
	// be read is logged and fresh keys start.
	Carried []byte
}

// OCSPOptions configures OCSP stapling (RFC 6066 section 8, RFC 6960).
type OCSPOptions struct {
	// Disabled turns stapling off.
	Disabled bool
	// MustStaple is MustStapleRefuse (default) or MustStapleServe.
	MustStaple string
	// Timeout bounds one request to a responder (default 5s).
	Timeout time.Duration
	// HTTPClient sends the requests; nil means a client without keep-alive
	// (responders are contacted rarely, and some, like `openssl ocsp`,
	// serve one connection at a time).
	HTTPClient *http.Client
	// Share, when set, shares responses with the other edges of a fleet
	// (see StapleShare): a response another edge stored is stapled
	// without asking the responder, and one edge at a time asks it.
	Share StapleShare
}

// Observer receives the Terminator's events; implementations must be safe
// for concurrent use and return quickly. Handshake counts are not reported
// here: the caller sees tls.ConnectionState.DidResume on every connection.
type Observer interface {
	// CertReloaded reports a changed certificate pair, named by its
	// certificate file: err is nil when the new pair is now served, else why
	// it was refused (the previous pair keeps serving).
	CertReloaded(name string, err error)
	// OCSPRefreshed reports an OCSP attempt for the certificate file name:
	// status is "good", "revoked", "unknown", "expired" or "error".
	OCSPRefreshed(name, status string, err error)
	// TicketKeysRotated reports a new set of session-ticket keys.
	TicketKeysRotated()
}

// NopObserver ignores every event; embed it to implement only some methods.
type NopObserver struct{}

var _ Observer = NopObserver{}

// CertReloaded implements Observer.
func (NopObserver) CertReloaded(string, error) {}

// OCSPRefreshed implements Observer.
func (NopObserver) OCSPRefreshed(string, string, error) {}

// TicketKeysRotated implements Observer.
func (NopObserver) TicketKeysRotated() {}

// withDefaults returns a copy of o with defaults filled in, or an error
// listing every invalid setting.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	if len(o.Certificates) == 0 {
		errs = append(errs, errors.New("no certificates configured"))
	}
	for i, c := range o.Certificates {
		if c.CertFile == "" || c.KeyFile == "" {
			errs = append(errs, fmt.Errorf("certificate %d: both CertFile and KeyFile are required", i))
		}
	}
	switch o.MinVersion {
	case 0:
		o.MinVersion = tls.VersionTLS12
	case tls.VersionTLS12, tls.VersionTLS13:
	default:
		errs = append(errs, fmt.Errorf("MinVersion %#04x: want TLS 1.2 (%#04x) or TLS 1.3 (%#04x)",
			o.MinVersion, tls.VersionTLS12, tls.VersionTLS13))
	}
	if o.ReloadInterval == 0 {
		o.ReloadInterval = DefaultReloadInterval
	}
	errs = append(errs, o.Tickets.fillDefaults()...)
	errs = append(errs, o.OCSP.fillDefaults()...)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, errors.Join(errs...)
}

// fillDefaults fills the zero fields of o and returns the invalid ones.
func (o *TicketOptions) fillDefaults() []error {
	var errs []error
	if o.RotateEvery == 0 {
		o.RotateEvery = DefaultRotateEvery
	}
	if o.RotateEvery < 0 {
		errs = append(errs, fmt.Errorf("Tickets.RotateEvery %v: must be positive", o.RotateEvery))
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.Keep < 0 {
		errs = append(errs, fmt.Errorf("Tickets.Keep %d: must be positive", o.Keep))
	}
	if o.KeyFile != "" && o.Source != nil {
		errs = append(errs, errors.New("Tickets.KeyFile and Tickets.Source are exclusive"))
	}
	return errs
}

// fillDefaults fills the zero fields of o and returns the invalid ones.
func (o *OCSPOptions) fillDefaults() []error {
	var errs []error
	switch o.MustStaple {
	case "":
		o.MustStaple = MustStapleRefuse
	case MustStapleRefuse, MustStapleServe:
	default:
		errs = append(errs, fmt.Errorf("OCSP.MustStaple %q: want %q or %q", o.MustStaple, MustStapleRefuse, MustStapleServe))
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultOCSPTimeout
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("OCSP.Timeout %v: must be positive", o.Timeout))
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:             http.ProxyFromEnvironment,
			DisableKeepAlives: true,
		}}
	}
	return errs
}

// ticketMaxAge is the exact bound on a ticket's age: RotateEvery*Keep, and
// never more than seven days.
func (o TicketOptions) ticketMaxAge() time.Duration {
	d := o.RotateEvery * time.Duration(o.Keep)
	if d <= 0 || d > maxTicketAge {
		return maxTicketAge
	}
	return d
}
