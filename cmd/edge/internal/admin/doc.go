// Package admin is edge's admin listener: the probes (/healthz, /readyz),
// /metrics, the /status document and the HTML status page rendered from
// it, the runtime API under /api/v1/ (drain, disable, enable and weight a
// backend; list its connections; endpoints the caller adds, such as the
// process upgrade) and, when asked, pprof; and the metrics-only listener.
// Client is the API's client on this host (edge -upgrade), which sends the
// token to loopback and this host's own addresses only.
//
// It owns the policy of who may do what there. It knows neither the
// proxy nor the metrics library nor the file: the caller passes the pools,
// a small Conns interface over the proxy, a StatusSource from which
// BuildStatus makes the /status document (the pools rendered here, every
// other component's part as that component reports it) and the
// /metrics handler, and maps the file onto Settings.
//
//	server.go      Server: both listeners, probes, /status, pprof, the stop that answers what it accepted
//	api.go         the API's endpoints, Endpoint for more, the write policy
//	statuspage.go  the status page (html/template, no script, a strict CSP)
//	status.go      BuildStatus: the /status document over a StatusSource
//	upgrade.go     UpgradeEndpoints: POST /api/v1/upgrade over an Upgrader
//	proof.go       proving the token without sending it: POST /api/v1/challenge, the Edge-Proof credential
//	client.go      Client: the upgrade request, its fleet waits, the new process; LocalDialer
package admin
