package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	certServedDesc = prometheus.NewDesc("edge_tls_certificate_served",
		"1 when the certificate pair is served in handshakes; 0 when it is left out (expired, not yet valid, or must-staple without a staple): /status says why.",
		[]string{"listener", "cert_file"}, nil)
	certNotAfterDesc = prometheus.NewDesc("edge_tls_certificate_not_after_timestamp_seconds",
		"NotAfter of the certificate pair on disk, as a Unix time.",
		[]string{"listener", "cert_file"}, nil)
)

// certCollector reports each listener's certificate pairs at scrape time
// from the terminators' Status.
type certCollector struct{ e *edge }

// Describe implements prometheus.Collector.
func (c certCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certServedDesc
	ch <- certNotAfterDesc
}

// Collect implements prometheus.Collector.
func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.e.listeners {
		if l.term == nil {
			continue
		}
		for _, cs := range l.term.Status().Certificates {
			served := 0.0
			if cs.Served {
				served = 1
			}
			ch <- prometheus.MustNewConstMetric(certServedDesc, prometheus.GaugeValue, served, l.cfg.Name, cs.CertFile)
			ch <- prometheus.MustNewConstMetric(certNotAfterDesc, prometheus.GaugeValue, float64(cs.NotAfter.Unix()), l.cfg.Name, cs.CertFile)
		}
	}
}
