package metrics

import (
	"sync/atomic"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// AuthState is the token component's state, read at scrape time.
type AuthState struct {
	// Keys are each provider's key source.
	Keys []auth.SourceStatus
	// Revocations in force, by scope (file, local, fleet).
	Revocations map[string]int
}

var (
	authKeysDesc = prometheus.NewDesc("edge_auth_keys",
		"Verification keys a provider holds (0: none yet, its pools refuse every token).", []string{"provider"}, nil)
	authKeysAgeDesc = prometheus.NewDesc("edge_auth_keys_age_seconds",
		"Seconds since a provider's keys were last fetched successfully (-1: never).", []string{"provider"}, nil)
	authKeysFailingDesc = prometheus.NewDesc("edge_auth_keys_failing",
		"1 while a provider's last key fetch failed (the last good keys keep serving).", []string{"provider"}, nil)
	authKeysFailuresDesc = prometheus.NewDesc("edge_auth_key_fetch_failures_total",
		"Failed fetches of a provider's keys.", []string{"provider"}, nil)
	authRevocationsDesc = prometheus.NewDesc("edge_auth_revocations",
		"Token revocations in force, by scope (file, local, fleet).", []string{"scope"}, nil)
)

// authCollector reports the token component at scrape time; nothing
// until WatchAuth.
type authCollector struct {
	state atomic.Pointer[func() AuthState]
	now   func() float64
}

// WatchAuth makes the token gauges report state, read at scrape time.
func (m *Registry) WatchAuth(state func() AuthState) { m.auth.state.Store(&state) }

// TokenChecked implements proxy.Observer.
func (m *Registry) TokenChecked(pool, outcome string) {
	m.tokens.WithLabelValues(pool, outcome).Inc()
}

// tokenOutcomes lists every outcome of edge_auth_verifications_total.
func tokenOutcomes() []string {
	return append(append([]string{"ok"}, auth.Outcomes()...), proxy.TokenOutcomes()...)
}

// Describe implements prometheus.Collector.
func (c *authCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{authKeysDesc, authKeysAgeDesc, authKeysFailingDesc, authKeysFailuresDesc, authRevocationsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *authCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.state.Load()
	if f == nil {
		return
	}
	st := (*f)()
	now := c.now()
	for _, k := range st.Keys {
		age := -1.0
		if !k.Fetched.IsZero() {
			age = now - float64(k.Fetched.UnixNano())/1e9
		}
		failing := 0.0
		if k.Failing {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(authKeysDesc, prometheus.GaugeValue, float64(k.Keys), k.Name)
		ch <- prometheus.MustNewConstMetric(authKeysAgeDesc, prometheus.GaugeValue, age, k.Name)
		ch <- prometheus.MustNewConstMetric(authKeysFailingDesc, prometheus.GaugeValue, failing, k.Name)
		ch <- prometheus.MustNewConstMetric(authKeysFailuresDesc, prometheus.CounterValue, float64(k.Failures), k.Name)
	}
	for _, scope := range []string{"file", "local", "fleet"} {
		ch <- prometheus.MustNewConstMetric(authRevocationsDesc, prometheus.GaugeValue, float64(st.Revocations[scope]), scope)
	}
}
