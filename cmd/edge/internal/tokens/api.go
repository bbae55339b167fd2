package tokens

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/cmd/edge/internal/admin"
)

// revokeRequest is the body of POST /api/v1/revocations.
type revokeRequest struct {
	Issuer  string    `json:"iss"`
	Subject string    `json:"sub"`
	ID      string    `json:"jti"`
	Before  time.Time `json:"before"`
	Until   time.Time `json:"until"`
	Reason  string    `json:"reason"`
}

// revokeAnswer is its answer.
type revokeAnswer struct {
	Result     string          `json:"result"`
	Scope      string          `json:"scope"`
	Revocation auth.Revocation `json:"revocation"`
}

// Endpoints are the admin API's revocations: GET /api/v1/revocations
// lists those in force by scope; POST /api/v1/revocations?scope=local|fleet
// adds one (400 for one that names nothing, 409 for scope fleet without a
// fleet). The default scope is fleet on an edge with a fleet, local
// otherwise: a revocation that holds on one edge of several protects
// nothing.
func (t *Tokens) Endpoints(fleetOn bool) []admin.Endpoint {
	list := func(*http.Request) (any, error) { return t.Revocations(), nil }
	add := func(r *http.Request) (any, error) { return t.revoke(r, fleetOn) }
	return []admin.Endpoint{
		{Method: "GET", Path: "/api/v1/revocations", Access: admin.Read, Handle: list},
		{Method: "POST", Path: "/api/v1/revocations", Access: admin.Write, Handle: add},
	}
}

func (t *Tokens) revoke(r *http.Request, fleetOn bool) (any, error) {
	scope := r.URL.Query().Get("scope")
	switch {
	case scope == "" && fleetOn:
		scope = string(admin.ScopeFleet)
	case scope == "":
		scope = string(admin.ScopeLocal)
	case scope != string(admin.ScopeLocal) && scope != string(admin.ScopeFleet):
		return nil, admin.Errorf(http.StatusBadRequest, "scope %q: want local or fleet", scope)
	}
	var body revokeRequest
	if err := admin.DecodeBody(r, &body); err != nil {
		return nil, err
	}
	rv := auth.Revocation{Issuer: body.Issuer, Subject: body.Subject, ID: body.ID, Before: body.Before,
		Until: body.Until, Reason: body.Reason}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	stored, err := t.Revoke(ctx, rv, scope == string(admin.ScopeFleet))
	switch {
	case errors.Is(err, ErrInvalid):
		return nil, admin.Errorf(http.StatusBadRequest, "%v", err)
	case errors.Is(err, ErrNoFleet):
		return nil, admin.Errorf(http.StatusConflict, "scope fleet needs consul.fleet.prefix, the Consul KV prefix the fleet shares")
	case err != nil:
		return nil, err
	}
	return revokeAnswer{Result: "ok", Scope: scope, Revocation: stored}, nil
}
