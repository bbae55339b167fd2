//go:build tools
package tools
import (
_ "github.com/gorilla/websocket"
_ "github.com/valyala/fasthttp"
_ "github.com/pires/go-proxyproto"
_ "golang.org/x/net/http/httpguts"
_ "golang.org/x/sync/errgroup"
_ "go.yaml.in/yaml/v3"
_ "github.com/hashicorp/consul/api"
_ "github.com/prometheus/client_golang/prometheus"
)
