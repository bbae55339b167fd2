module github.com/edgelb/edge/bench

go 1.26.8

require (
	github.com/edgelb/edge v0.0.0
	github.com/gobwas/ws v1.5.0
	github.com/gorilla/websocket v1.5.3
)

require (
	github.com/gobwas/httphead v0.1.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)

// Only the tests import edge (its config loader checks the benchmark's edge
// configuration; its test backend answers the load generator's test), and
// they must see the edge of this checkout, never a published one.
replace github.com/edgelb/edge => ../
