package wswire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// PerMessageDeflate is the extension token of RFC 7692.
const PerMessageDeflate = "permessage-deflate"

// Parameters of permessage-deflate (RFC 7692 §7.1).
const (
	serverNoContextTakeover = "server_no_context_takeover"
	clientNoContextTakeover = "client_no_context_takeover"
	serverMaxWindowBits     = "server_max_window_bits"
	clientMaxWindowBits     = "client_max_window_bits"
)

// Window sizes a permessage-deflate parameter may name (RFC 7692
// §7.1.2). MinWindowBits is 9, not the RFC's 8: zlib cannot compress with
// an 8-bit window and turns it into 9 (madler/zlib#171), so peers on zlib
// (Node ws, python websockets) refuse 8.
const (
	MinWindowBits = 9
	MaxWindowBits = 15
)

// DeflateMode says what a rewrite does with compression extensions.
type DeflateMode uint8

// Modes of RewriteOffer and RewriteAnswer.
const (
	// DeflatePass forwards the offer as it is (window bits capped when
	// asked).
	DeflatePass DeflateMode = iota
	// DeflateStrip removes every compression extension from the offer, so
	// both sides speak uncompressed frames.
	DeflateStrip
	// DeflateOnly keeps the first well-formed permessage-deflate offer and
	// nothing else: every frame with RSV1 set is then a permessage-deflate
	// message whose inflated size edge can count.
	DeflateOnly
)

// deflateTokens are the compression extensions strip removes: RFC 7692's
// and the per-frame drafts browsers once shipped, which also set RSV1.
var deflateTokens = []string{PerMessageDeflate, "x-webkit-deflate-frame", "deflate-frame", "permessage-deflate-draft"}

// ErrAnswer reports a backend's Sec-WebSocket-Extensions answer that does
// not fit the offer edge sent (RFC 6455 §9.1: a server may only accept
// what was offered; RFC 7692 §7.1.2.1 for the window bits).
var ErrAnswer = errors.New("extension answer does not fit the offer")

// ErrClientWindow reports an answer that fits the offer edge sent but not
// the server_max_window_bits the client itself asked for (RFC 7692
// §7.1.2.1): the client would fail the connection. It wraps ErrAnswer.
// Backends that ignore window parameters (gorilla/websocket accepts every
// offer without them) answer this to any client that asks, so it says
// what that client chose, not that the backend is broken.
var ErrClientWindow = fmt.Errorf("%w: server_max_window_bits over the client's", ErrAnswer)

// Extension is one element of a Sec-WebSocket-Extensions list
// (RFC 6455 §9.1): a token and its parameters, in order.
type Extension struct {
	Name   string
	Params []Param
}

// Param is one extension parameter; Value is "" for a parameter without
// a value, and holds the unquoted value of a quoted-string.
type Param struct {
	Name, Value string
	HasValue    bool
}

// ParseExtensions parses the values of Sec-WebSocket-Extensions fields
// (RFC 6455 §9.1: 1#extension, extension = token *( ";" param ), param =
// token [ "=" ( token | quoted-string ) ]). A malformed element is an
// error: the whole list is then treated as no offer by the callers.
func ParseExtensions(vals []string) ([]Extension, error) {
	var out []Extension
	for _, v := range vals {
		p := parser{s: v}
		for {
			p.space()
			if p.done() {
				break
			}
			if p.peek() == ',' {
				p.i++ // empty list elements are allowed (RFC 9110 §5.6.1)
				continue
			}
			e, err := p.extension()
			if err != nil {
				return nil, fmt.Errorf("Sec-WebSocket-Extensions %q: %w", v, err)
			}
			out = append(out, e)
			p.space()
			if p.done() {
				break
			}
			if p.peek() != ',' {
				return nil, fmt.Errorf("Sec-WebSocket-Extensions %q: %q at %d, want ','", v, p.peek(), p.i)
			}
			p.i++
		}
	}
	return out, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) done() bool { return p.i >= len(p.s) }
func (p *parser) peek() byte { return p.s[p.i] }

func (p *parser) space() {
	for !p.done() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

func (p *parser) token() string {
	j := p.i
	for !p.done() && isTokenChar(p.peek()) {
		p.i++
	}
	return p.s[j:p.i]
}

func (p *parser) extension() (Extension, error) {
	var e Extension
	if e.Name = p.token(); e.Name == "" {
		return e, errors.New("no extension token")
	}
	for {
		p.space()
		if p.done() || p.peek() != ';' {
			return e, nil
		}
		p.i++
		p.space()
		var q Param
		if q.Name = p.token(); q.Name == "" {
			return e, errors.New("no parameter name")
		}
		p.space()
		if !p.done() && p.peek() == '=' {
			p.i++
			p.space()
			v, err := p.value()
			if err != nil {
				return e, err
			}
			q.Value, q.HasValue = v, true
		}
		e.Params = append(e.Params, q)
	}
}

func (p *parser) value() (string, error) {
	if p.done() || p.peek() != '"' {
		if v := p.token(); v != "" {
			return v, nil
		}
		return "", errors.New("no parameter value")
	}
	p.i++
	var b strings.Builder
	for !p.done() {
		c := p.peek()
		p.i++
		switch {
		case c == '"':
			// RFC 6455 §9.1: a quoted value must still be a token.
			if v := b.String(); v != "" && isToken(v) {
				return v, nil
			}
			return "", errors.New("quoted value is no token")
		case c == '\\' && !p.done():
			b.WriteByte(p.peek())
			p.i++
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated quoted value")
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}

// isTokenChar reports a tchar of RFC 9110 §5.6.2.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// FormatExtensions renders a list as one Sec-WebSocket-Extensions value.
func FormatExtensions(es []Extension) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.Name)
		for _, q := range e.Params {
			b.WriteString("; ")
			b.WriteString(q.Name)
			if q.HasValue {
				b.WriteByte('=')
				b.WriteString(q.Value)
			}
		}
	}
	return b.String()
}

// deflateParams is a well-formed permessage-deflate parameter set: each
// parameter at most once, window bits 8..15, no value on the takeover
// flags (RFC 7692 §7.1). Bits are 0 when absent, -1 when present without
// a value.
type deflateParams struct {
	serverNoCtx, clientNoCtx bool
	serverBits, clientBits   int
}

func parseDeflate(e Extension) (deflateParams, bool) {
	var d deflateParams
	seen := map[string]bool{}
	for _, q := range e.Params {
		if seen[q.Name] {
			return d, false // §7: a parameter named twice declines the offer
		}
		seen[q.Name] = true
		switch q.Name {
		case serverNoContextTakeover, clientNoContextTakeover:
			if q.HasValue {
				return d, false
			}
			if q.Name == serverNoContextTakeover {
				d.serverNoCtx = true
			} else {
				d.clientNoCtx = true
			}
		case serverMaxWindowBits, clientMaxWindowBits:
			bits := -1
			if q.HasValue {
				n, err := strconv.Atoi(q.Value)
				if err != nil || n < 8 || n > 15 || q.Value[0] == '0' {
					return d, false
				}
				bits = n
			} else if q.Name == serverMaxWindowBits {
				return d, false // §7.1.2.1: server_max_window_bits has a value
			}
			if q.Name == serverMaxWindowBits {
				d.serverBits = bits
			} else {
				d.clientBits = bits
			}
		default:
			return d, false
		}
	}
	return d, true
}

func (d deflateParams) extension() Extension {
	e := Extension{Name: PerMessageDeflate}
	if d.serverNoCtx {
		e.Params = append(e.Params, Param{Name: serverNoContextTakeover})
	}
	if d.clientNoCtx {
		e.Params = append(e.Params, Param{Name: clientNoContextTakeover})
	}
	if d.serverBits > 0 {
		e.Params = append(e.Params, Param{Name: serverMaxWindowBits, Value: strconv.Itoa(d.serverBits), HasValue: true})
	}
	switch {
	case d.clientBits > 0:
		e.Params = append(e.Params, Param{Name: clientMaxWindowBits, Value: strconv.Itoa(d.clientBits), HasValue: true})
	case d.clientBits < 0:
		e.Params = append(e.Params, Param{Name: clientMaxWindowBits})
	}
	return e
}

// capBits lowers a window-bits parameter to maxBits: absent (0) or
// valueless (-1) count as 15.
func capBits(v, maxBits int) int {
	if v <= 0 || v > maxBits {
		return maxBits
	}
	return v
}

// RewriteOffer returns the extension offer to send to the backend for the
// client's Sec-WebSocket-Extensions values vals, and whether it holds a
// permessage-deflate offer; "" means no header at all.
//
// DeflateStrip drops every compression extension. DeflateOnly keeps only
// the first well-formed permessage-deflate offer: with a single offer the
// backend's answer maps to it without doubt, and no other extension can
// claim RSV1. maxBits (0: none) caps the windows of the deflate offer that
// is kept (then only that one is, under every mode): server_max_window_bits
// is set to at most maxBits, which the backend must honour or decline
// (RFC 7692 §7.1.2.1); a client_max_window_bits the client offered is
// lowered to it as a hint (§7.1.2.2), and RewriteAnswer makes the answer
// bind the client to it. An unparsable list is dropped whole under strip,
// only and maxBits, and passed as it is under plain pass.
func RewriteOffer(vals []string, mode DeflateMode, maxBits int) (string, bool) {
	if len(vals) == 0 {
		return "", false
	}
	if mode == DeflatePass && maxBits == 0 {
		es, _ := ParseExtensions(vals)
		return strings.Join(vals, ", "), hasDeflate(es)
	}
	es, err := ParseExtensions(vals)
	if err != nil {
		return "", false
	}
	var out []Extension
	kept := false
	for _, e := range es {
		switch offerStepOf(e.Name, mode, maxBits, kept) {
		case offerDrop:
			continue
		case offerKeep:
			out = append(out, e)
			continue
		}
		d, ok := parseDeflate(e)
		if !ok {
			continue
		}
		if maxBits > 0 {
			d.serverBits = capBits(d.serverBits, maxBits)
			if d.clientBits != 0 {
				d.clientBits = capBits(d.clientBits, maxBits)
			}
		}
		kept = true
		out = append(out, d.extension())
	}
	return FormatExtensions(out), kept
}

// offerStep is what RewriteOffer does with one offered extension.
type offerStep int

const (
	offerDrop    offerStep = iota // left out
	offerKeep                     // passed as it is
	offerDeflate                  // a permessage-deflate offer: parsed, capped, kept
)

// offerStepOf decides for the extension named name under mode and maxBits;
// kept says a permessage-deflate offer was kept already.
func offerStepOf(name string, mode DeflateMode, maxBits int, kept bool) offerStep {
	compress := isDeflateToken(name)
	switch {
	case mode == DeflateStrip && compress:
		return offerDrop
	case name != PerMessageDeflate && (mode == DeflateOnly || compress && maxBits > 0):
		return offerDrop
	case name != PerMessageDeflate:
		return offerKeep
	case kept && (mode == DeflateOnly || maxBits > 0):
		return offerDrop
	}
	return offerDeflate
}

// Foreign reports whether the extensions answer vals names an extension
// other than permessage-deflate, or cannot be read: its RSV bits mean
// what that extension says (RFC 6455 §5.2, §9), which a proxy cannot
// know.
func Foreign(vals []string) bool {
	es, err := ParseExtensions(vals)
	if err != nil {
		return true
	}
	for _, e := range es {
		if e.Name != PerMessageDeflate {
			return true
		}
	}
	return false
}

func hasDeflate(es []Extension) bool {
	for _, e := range es {
		if e.Name == PerMessageDeflate {
			return true
		}
	}
	return false
}

func isDeflateToken(name string) bool {
	for _, t := range deflateTokens {
		if strings.EqualFold(name, t) {
			return true
		}
	}
	return false
}

// RewriteAnswer checks the backend's Sec-WebSocket-Extensions answer vals
// against the offer edge sent it (RewriteOffer of the client's offer
// clientVals with the same mode and maxBits) and returns the answer to
// give the client and whether permessage-deflate was negotiated.
//
// Under plain pass the answer is the backend's, untouched. Otherwise it
// must name only what the offer held, permessage-deflate at most once,
// with server_max_window_bits at most maxBits: a backend that answers
// anything else is broken (ErrAnswer), and so is a server_max_window_bits
// over the one the client itself asked for (the client would fail the
// connection). A backend that ignores edge's cap on its own window
// (gorilla/websocket accepts every offer without server_max_window_bits)
// is let through: its window is its own memory, and the client accepts
// any window it did not ask to bound. With maxBits, the answer's
// client_max_window_bits is lowered to maxBits (added when the client
// offered the parameter), so the client compresses with at most that
// window, which the backend can always inflate (a smaller window is a
// subset of what it accepted, RFC 7692 §7.1.2.2).
func RewriteAnswer(clientVals, vals []string, mode DeflateMode, maxBits int) (string, bool, error) {
	if mode == DeflatePass && maxBits == 0 {
		es, _ := ParseExtensions(vals)
		return strings.Join(vals, ", "), hasDeflate(es), nil
	}
	if len(vals) == 0 {
		return "", false, nil
	}
	offered, od, err := sentOffer(clientVals, mode, maxBits)
	if err != nil {
		return "", false, err
	}
	es, err := ParseExtensions(vals)
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrAnswer, err)
	}
	cd := clientDeflate(clientVals)
	negotiated := false
	for i, e := range es {
		if !offeredName(offered, e.Name) {
			return "", false, fmt.Errorf("%w: %q was not offered", ErrAnswer, e.Name)
		}
		if e.Name != PerMessageDeflate {
			continue
		}
		if negotiated {
			return "", false, fmt.Errorf("%w: %s twice", ErrAnswer, PerMessageDeflate)
		}
		negotiated = true
		if es[i], err = deflateAnswer(e, od, cd, maxBits); err != nil {
			return "", false, err
		}
	}
	return FormatExtensions(es), negotiated, nil
}

// sentOffer is the offer RewriteOffer made of the client's clientVals:
// its extensions and its permessage-deflate parameters.
func sentOffer(clientVals []string, mode DeflateMode, maxBits int) ([]Extension, deflateParams, error) {
	offer, _ := RewriteOffer(clientVals, mode, maxBits)
	offered, err := ParseExtensions([]string{offer})
	if err != nil {
		return nil, deflateParams{}, fmt.Errorf("%w: %w", ErrAnswer, err)
	}
	var od deflateParams
	for _, e := range offered {
		if e.Name == PerMessageDeflate {
			od, _ = parseDeflate(e)
		}
	}
	return offered, od, nil
}

// clientDeflate is the client's own permessage-deflate offer: the first
// well-formed one, which is the one RewriteOffer kept.
func clientDeflate(clientVals []string) deflateParams {
	ces, err := ParseExtensions(clientVals)
	if err != nil {
		return deflateParams{}
	}
	for _, e := range ces {
		if d, ok := parseDeflate(e); ok && e.Name == PerMessageDeflate {
			return d
		}
	}
	return deflateParams{}
}

// deflateAnswer checks the backend's permessage-deflate answer e against
// edge's offer od and the client's cd, and returns it as the client gets
// it: client_max_window_bits lowered to maxBits.
func deflateAnswer(e Extension, od, cd deflateParams, maxBits int) (Extension, error) {
	d, ok := parseDeflate(e)
	switch {
	case !ok:
		return e, fmt.Errorf("%w: %s parameters %q", ErrAnswer, PerMessageDeflate, FormatExtensions([]Extension{e}))
	case d.clientBits != 0 && od.clientBits == 0:
		// §7.1.2.2: only when the offer had client_max_window_bits.
		return e, fmt.Errorf("%w: client_max_window_bits was not offered", ErrAnswer)
	case d.clientBits < 0:
		return e, fmt.Errorf("%w: client_max_window_bits without a value", ErrAnswer)
	case cd.serverBits > 0 && (d.serverBits <= 0 || d.serverBits > cd.serverBits):
		// §7.1.2.1: the client asked for at most this window; the
		// client would fail the connection on this answer.
		return e, fmt.Errorf("%w: %d, the client's %d", ErrClientWindow, d.serverBits, cd.serverBits)
	}
	if maxBits > 0 && od.clientBits != 0 {
		d.clientBits = capBits(d.clientBits, maxBits)
	}
	return d.extension(), nil
}

func offeredName(offered []Extension, name string) bool {
	for _, e := range offered {
		if e.Name == name {
			return true
		}
	}
	return false
}
