package main

import (
	"bytes"
	"embed"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"text/template"
	"time"
)

//go:embed templates/edge.yaml.tmpl
var templates embed.FS

// backend is one echo backend of the generated configuration.
type backend struct {
	Addr string
	ID   string
}

// configData feeds templates/edge.yaml.tmpl.
type configData struct {
	Dir            string
	Admin          string
	Plain          string
	TLS            string
	Backends       []backend
	DrainWindow    time.Duration
	DrainTimeout   time.Duration
	UpgradeTimeout time.Duration
	AccessLog      bool
}

// addrs are the benchmark's addresses, all on one loopback IP so that a run
// stays clear of others on the machine.
type addrs struct {
	Admin, Plain, TLS string
	Backends          []backend
}

// addrsOn places every listener on ip: edge's plain, TLS and admin ports,
// and the echo backends on ports of their own.
func addrsOn(ip string, backends int) addrs {
	a := addrs{
		Admin: net.JoinHostPort(ip, "19990"),
		Plain: net.JoinHostPort(ip, "18080"),
		TLS:   net.JoinHostPort(ip, "18443"),
	}
	for i := range backends {
		a.Backends = append(a.Backends, backend{
			Addr: net.JoinHostPort(ip, strconv.Itoa(19101+i)),
			ID:   "b" + strconv.Itoa(i+1),
		})
	}
	return a
}

// all lists every address the run listens on.
func (a addrs) all() []string {
	out := []string{a.Admin, a.Plain, a.TLS}
	for _, b := range a.Backends {
		out = append(out, b.Addr)
	}
	return out
}

// renderConfig writes edge.yaml into d.Dir and returns its path.
func renderConfig(d configData) (string, error) {
	t, err := template.ParseFS(templates, "templates/edge.yaml.tmpl")
	if err != nil {
		return "", fmt.Errorf("parse edge.yaml.tmpl: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render edge.yaml.tmpl: %w", err)
	}
	path := filepath.Join(d.Dir, "edge.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// portsFree fails when something already accepts on one of addrs: it would
// take the load in place of the edge under test.
func portsFree(all []string) error {
	for _, a := range all {
		c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return fmt.Errorf("%s is already in use: stop what listens there or pick another -ip", a)
		}
	}
	return nil
}
