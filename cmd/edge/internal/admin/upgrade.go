package admin

import (
	"net/http"
	"os"
	"path/filepath"
)

// Upgrader is the process upgrade as POST /api/v1/upgrade drives it;
// cmd/edge implements it over cmd/edge/internal/upgrade, which this package does
// not know.
type Upgrader interface {
	// Upgrade starts binary (an absolute path; "" the binary this process
	// was started as) as the new process and returns once it serves. An
	// error Errorf made (409 for an upgrade under way or refused) is
	// answered with its status, any other with 500 and its text.
	Upgrade(binary string) error
	// Binary is the binary an upgrade without one starts.
	Binary() string
}

// upgradeRequest is the optional body of POST /api/v1/upgrade.
type upgradeRequest struct {
	// Binary is an absolute path; default, the binary edge was started as.
	Binary string `json:"binary"`
}

// UpgradeEndpoints are POST /api/v1/upgrade and its short name, for hands
// at a terminal, POST /api/upgrade, over u: 200 with an UpgradeAnswer
// once the new process serves, 400 for a binary that is not an absolute
// path, and u's error otherwise.
func UpgradeEndpoints(u Upgrader) []Endpoint {
	h := func(r *http.Request) (any, error) { return upgradeHandle(u, r) }
	return []Endpoint{
		{Method: "POST", Path: "/api/v1/upgrade", Access: Write, Handle: h},
		{Method: "POST", Path: "/api/upgrade", Access: Write, Handle: h},
	}
}

// upgradeHandle is one POST /api/v1/upgrade.
func upgradeHandle(u Upgrader, r *http.Request) (any, error) {
	var body upgradeRequest
	if err := DecodeBody(r, &body); err != nil {
		return nil, err
	}
	if body.Binary != "" && !filepath.IsAbs(body.Binary) {
		return nil, Errorf(http.StatusBadRequest, "binary %q: want an absolute path", body.Binary)
	}
	if err := u.Upgrade(body.Binary); err != nil {
		return nil, err
	}
	bin := body.Binary
	if bin == "" {
		bin = u.Binary()
	}
	return UpgradeAnswer{Result: "ok", Binary: bin, OldPID: os.Getpid()}, nil
}
