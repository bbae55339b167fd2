package conf

import "slices"

// Equal reports whether l and o are the same listener: every setting
// equal, lists element by element (an empty list and an absent one are
// the same). A listener's settings take effect on restart, not on reload,
// so a reload compares the old listeners with the new ones to say when
// that matters; TestListenerEqualSeesEveryField fails when a field is
// added to Listener or its parts and Equal does not compare it.
func (l Listener) Equal(o Listener) bool {
	return l.Name == o.Name && l.Address == o.Address &&
		l.TLS.equal(o.TLS) && l.ProxyProtocol.equal(o.ProxyProtocol) &&
		slices.Equal(l.TrustedProxies, o.TrustedProxies) &&
		l.ForwardedHeader == o.ForwardedHeader && l.StrictSNIHost == o.StrictSNIHost &&
		l.ReadHeaderTimeout == o.ReadHeaderTimeout && l.TLSHandshakeTimeout == o.TLSHandshakeTimeout &&
		l.ReadBodyTimeout == o.ReadBodyTimeout && l.MaxHeaderBytes == o.MaxHeaderBytes
}

// equal compares two listeners' TLS settings; nil is plain ws://.
func (t *TLS) equal(o *TLS) bool {
	if t == nil || o == nil {
		return t == o
	}
	// Certificate, SessionTickets and OCSP hold only comparable values.
	return slices.Equal(t.Certificates, o.Certificates) && t.MinVersion == o.MinVersion && sameSet(t.Curves, o.Curves) &&
		t.ClientCAFile == o.ClientCAFile && t.ClientCertHeader == o.ClientCertHeader &&
		t.SessionTickets == o.SessionTickets && t.OCSP == o.OCSP
}

func (p ProxyProtocol) equal(o ProxyProtocol) bool {
	return p.Enabled == o.Enabled && slices.Equal(p.Trusted, o.Trusted) && p.Timeout == o.Timeout
}

// ListenersEqual reports whether a and b list the same listeners in the
// same order (Listener.Equal).
func ListenersEqual(a, b []Listener) bool { return slices.EqualFunc(a, b, Listener.Equal) }

// sameSet reports whether a and b hold the same strings in any order:
// Go chooses among a listener's curves in its own order, so a reordered
// list changes nothing.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
