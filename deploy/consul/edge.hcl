# Consul service definitions for one edge, for agents configured from files
# rather than edge's own registration (consul.register in edge.yaml; use one
# or the other, not both). Copy into the agent's config directory
# (e.g. /etc/consul.d/edge.hcl), adjust the ports to edge.yaml, and run
# `consul validate /etc/consul.d` then `consul reload`.
#
# Two services, as edge registers itself:
# - "edge": the public listener, for whatever sends clients to edge (an L4
#   balancer, DNS). Its check is /readyz on the admin listener, which turns
#   503 as soon as a drain starts, so clients stop arriving before the
#   listeners close.
# - "edge-metrics": the metrics endpoint, which deploy/prometheus/scrape.yml
#   asks Consul for. Its check is /healthz, which stays passing during a
#   drain, so a draining edge is still scraped.
#
# IDs must be unique per edge process on this agent: with several edges on
# one host (SO_REUSEPORT), give each its own suffix and its own admin and
# metrics ports.
services = [
  {
    id   = "edge-1"
    name = "edge"
    port = 443
    tags = ["wss"]
    checks = [
      {
        id       = "edge-1-readyz"
        name     = "edge readiness (503 while draining)"
        http     = "http://127.0.0.1:9901/readyz"
        interval = "5s"
        timeout  = "2s"
      },
    ]
  },
  {
    id   = "edge-metrics-1"
    name = "edge-metrics"
    port = 9902
    checks = [
      {
        id       = "edge-metrics-1-healthz"
        name     = "edge metrics endpoint"
        http     = "http://127.0.0.1:9902/healthz"
        interval = "10s"
        timeout  = "2s"
        # A dead edge stays listed long enough for EdgeDown to fire.
        deregister_critical_service_after = "10m"
      },
    ]
  },
]
