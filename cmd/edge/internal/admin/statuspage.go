package admin

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

//go:embed templates/status.html
var statusHTML string

// statusPage renders /status as one self-contained HTML page on the admin
// listener: no script, no external asset, a meta refresh. It is rendered
// from the JSON document, so a field /status gains shows up in the page's
// "everything" section without touching the template. Backend IDs, hosts
// and service names come from Consul, where anyone who may register a
// service chooses them: html/template escapes every value for its context.
type statusPage struct {
	status  func() any
	tmpl    *template.Template
	refresh int // seconds
	now     func() time.Time
}

func newStatusPage(status func() any) *statusPage {
	p := &statusPage{status: status, refresh: 5, now: time.Now}
	p.tmpl = template.Must(template.New("status").Funcs(template.FuncMap{
		"ago":        p.ago,
		"until":      p.until,
		"nanos":      nanos,
		"stateClass": stateClass,
		"num":        num,
		"pct":        pct,
	}).Parse(statusHTML))
	return p
}

// ServeHTTP implements http.Handler.
func (p *statusPage) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	raw, err := json.Marshal(p.status())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, raw, "", "  ")
	var out bytes.Buffer
	err = p.tmpl.Execute(&out, map[string]any{
		"S": doc, "Refresh": p.refresh, "Now": p.now().UTC().Format(time.RFC3339), "JSON": pretty.String(),
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Nothing on the page loads or runs anything; say so to the browser.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(out.Bytes())
}

// parseTime reads an RFC 3339 time from the JSON document.
func parseTime(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok || s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil && !t.IsZero() && t.Year() > 1
}

// ago renders a past time as "3m20s ago".
func (p *statusPage) ago(v any) string {
	t, ok := parseTime(v)
	if !ok {
		return "never"
	}
	return roundDur(p.now().Sub(t)).String() + " ago"
}

// until renders a future time as "in 29d 3h", or "EXPIRED 2h ago".
func (p *statusPage) until(v any) string {
	t, ok := parseTime(v)
	if !ok {
		return "-"
	}
	d := t.Sub(p.now())
	if d < 0 {
		return "passed " + roundDur(-d).String() + " ago"
	}
	if d >= 48*time.Hour {
		return fmt.Sprintf("in %dd", int(d/(24*time.Hour)))
	}
	return "in " + roundDur(d).String()
}

// nanos renders a JSON number of nanoseconds as a duration.
func nanos(v any) string {
	f, ok := v.(float64)
	if !ok {
		return "-"
	}
	return roundDur(time.Duration(f)).String()
}

// num renders a JSON number without exponent.
// pct is a fraction of the JSON document as a percentage.
func pct(v any) float64 {
	f, _ := v.(float64)
	return 100 * f
}

func num(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprint(v)
}

func roundDur(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

// stateClass maps a backend to a fixed CSS class; never echoes input.
func stateClass(b map[string]any) string {
	switch {
	case b["admin_state"] == "drain":
		return "drain"
	case b["admin_state"] == "disabled":
		return "off"
	case b["available"] == true:
		return "up"
	}
	return "down"
}
