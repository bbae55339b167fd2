package main

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// startDynamic starts discovery watchers and health checkers for the pools
// that use them.
func (e *edge) startDynamic(ctx context.Context, g *errgroup.Group) {}

// discoveryStatus is the discovery part of /status.
func (e *edge) discoveryStatus() any { return nil }
