package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/edgelb/edge/internal/hostname"
	"go.yaml.in/yaml/v3"
)

// maxFileSize bounds what Load reads; a configuration is a few kilobytes.
const maxFileSize = 16 << 20

// Load reads the file at path and returns it parsed, with defaults applied
// and validated, or an *Errors listing every problem with file and line.
// Relative paths in the file are resolved against the file's directory.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxFileSize)
	}
	return Parse(path, data)
}

// Parse parses data as the configuration file called name, applies
// defaults and validates it. name appears in every error and its directory
// is the base for relative paths in the file ("edge.yaml" resolves against
// the working directory). The returned error, if any, is an *Errors.
func Parse(name string, data []byte) (*Config, error) {
	d := newDecoder(name)
	c := &Config{src: d.src}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		// An empty file: decoding leaves everything unset and Validate
		// reports what is required.
	case err != nil:
		return nil, asError([]*Error{syntaxError(name, err)})
	default:
		d.document(&doc, c)
		var next yaml.Node
		if err := dec.Decode(&next); err == nil {
			d.errorf(next.Line, "", "more than one YAML document; edge reads one")
		} else if !errors.Is(err, io.EOF) {
			d.errs = append(d.errs, syntaxError(name, err))
		}
	}

	applyDefaults(reflect.ValueOf(c).Elem(), "", d.src)
	c.fill()
	c.resolvePaths(filepath.Dir(name))

	verrs, warns := c.validate()
	c.warnings = warns
	errs := d.errs
	for _, e := range verrs {
		if !d.src.isBad(e.Path) {
			errs = append(errs, e)
		}
	}
	if err := asError(errs); err != nil {
		return nil, err
	}
	return c, nil
}

// isBad reports whether path, or a value containing it or contained in it,
// failed to decode; checks on it would only repeat the problem. A document
// that is not a mapping at all makes every check moot.
func (s *source) isBad(path string) bool {
	for _, b := range s.bad {
		if b == "" || path == b || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") ||
			strings.HasPrefix(b, path+".") || strings.HasPrefix(b, path+"[") {
			return true
		}
	}
	return false
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a yaml parse error into an Error with the line split
// out. yaml's messages name the problem, never the content.
func syntaxError(name string, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: name, Line: line, Msg: "YAML syntax: " + m[2]}
	}
	return &Error{File: name, Msg: "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")}
}

// applyDefaults sets every field carrying a default tag whose key was not
// in the file (or was null), walking into nested structs, lists and set
// pointers. A Config built in code has no source and gets every default
// its zero fields allow.
func applyDefaults(v reflect.Value, path string, src *source) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			applyDefaults(v.Elem(), path, src)
		}
	case reflect.Slice:
		for i := range v.Len() {
			applyDefaults(v.Index(i), index(path, i), src)
		}
	case reflect.Struct:
		if v.Type() == prefixType {
			return
		}
		for _, f := range fieldsOf(v.Type()) {
			fpath := join(path, f.key)
			fv := v.Field(f.index)
			if f.hasDf && !src.has(fpath) && (src != nil || fv.IsZero()) {
				setDefault(fv, f.def)
			}
			applyDefaults(fv, fpath, src)
		}
	}
}

// setDefault parses a default tag. A bad tag is a bug in this package,
// caught by any test that parses a file.
func setDefault(v reflect.Value, s string) {
	if v.Type() == durationType {
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			panic("conf: bad default " + s)
		}
		v.SetInt(int64(d))
		return
	}
	var err error
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		var b bool
		b, err = strconv.ParseBool(s)
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		var i int64
		i, err = strconv.ParseInt(s, 10, 64)
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		f, err = strconv.ParseFloat(s, 64)
		v.SetFloat(f)
	default:
		err = errors.New("unsupported kind")
	}
	if err != nil {
		panic("conf: bad default " + s + " for " + v.Type().String())
	}
}

// fill sets the defaults that depend on other values, and puts host names
// in the canonical form every part of edge compares (hostname.Canonical).
func (c *Config) fill() {
	for i := range c.Listeners {
		if c.Listeners[i].Name == "" && !c.src.has(index("listeners", i)+".name") {
			c.Listeners[i].Name = "listener-" + strconv.Itoa(i)
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if !r.Default && !c.src.has(index("routes", i)+".path_prefix") {
			r.PathPrefix = "/"
		}
		for j, h := range r.Hosts {
			r.Hosts[j] = hostname.Canonical(h)
		}
	}
	for j, h := range c.Consul.Routes.AllowedHosts {
		c.Consul.Routes.AllowedHosts[j] = hostname.Canonical(h)
	}
	for i := range c.Pools {
		c.Pools[i].fill(c.src, index("pools", i))
	}
}

// fill sets the pool's defaults that depend on its other values; path is
// where the pool is in src.
func (p *Pool) fill(src *source, path string) {
	for j := range p.Backends {
		b := &p.Backends[j]
		if b.ID == "" && !src.has(index(path+".backends", j)+".id") {
			b.ID = b.Address
		}
		if b.Weight == 0 {
			b.Weight = 1
		}
	}
	// A frame-aware pool bounds messages too unless told otherwise:
	// 4 MiB, the usual cap of WebSocket servers, never below the
	// frame limit.
	ws := &p.WebSocket
	if !src.has(path+".websocket.max_message_bytes") && (ws.MaxFrameBytes > 0 || ws.PingInterval > 0 ||
		ws.Rate.MessagesPerSecond > 0 || ws.Rate.BytesPerSecond > 0) {
		ws.MaxMessageBytes = max(4<<20, ws.MaxFrameBytes)
	}
	l := &p.Limits
	if l.ConnectionBurstPerClientIP == 0 && l.ConnectionRatePerClientIP > 0 && l.ConnectionRatePerClientIP < math.MaxInt32 {
		l.ConnectionBurstPerClientIP = int(math.Ceil(l.ConnectionRatePerClientIP))
	}
	if l.ConnectionBurst == 0 && l.ConnectionRate > 0 && l.ConnectionRate < math.MaxInt32 {
		l.ConnectionBurst = int(math.Ceil(l.ConnectionRate))
	}
}

// DefaultPool returns a pool with every setting at its default, filled as
// Load fills a pool of the file that names nothing but itself: what a pool
// declared elsewhere (a Consul service's route) starts from before its own
// overrides. It has no name and no members.
func DefaultPool() Pool {
	var p Pool
	applyDefaults(reflect.ValueOf(&p).Elem(), "", nil)
	p.fill(nil, "")
	return p
}

// resolvePaths makes relative file paths relative to base, the directory
// of the configuration file, so that edge finds the same files whatever
// its working directory.
func (c *Config) resolvePaths(base string) {
	rel := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	rel(&c.StateDir)
	for i := range c.Listeners {
		if t := c.Listeners[i].TLS; t != nil {
			for j := range t.Certificates {
				rel(&t.Certificates[j].CertFile)
				rel(&t.Certificates[j].KeyFile)
				rel(&t.Certificates[j].IssuerFile)
			}
			rel(&t.ClientCAFile)
			rel(&t.SessionTickets.KeyFile)
			rel(&t.SessionTickets.ConsulSealKeyFile)
		}
	}
	for i := range c.Pools {
		k := &c.Pools[i].Cookie
		rel(&k.SecretFile)
		rel(&k.PreviousSecretFile)
	}
	rel(&c.Consul.TokenFile)
	rel(&c.Admin.API.TokenFile)
	rel(&c.Consul.CAFile)
}

// ErrorAt returns a problem found outside Validate (by a check that needs
// the system, such as resolving addresses or reading certificates) at the
// line of the setting path (dotted, as in Error.Path).
func (c *Config) ErrorAt(path, format string, args ...any) *Error {
	e := &Error{Line: c.src.line(path), Path: path, Msg: fmt.Sprintf(format, args...)}
	if c.src != nil {
		e.File = c.src.file
	}
	return e
}

// Warnings returns what the last validation found legal but probably
// unintended, such as a cookie pool without a shared secret. cmd/edge logs
// them at Warn.
func (c *Config) Warnings() []*Error { return c.warnings }

// String renders the effective configuration, defaults included, as YAML.
// Secrets are redacted.
func (c *Config) String() string {
	b, err := yaml.Marshal(c)
	if err != nil {
		return "<config: " + err.Error() + ">"
	}
	return string(b)
}
