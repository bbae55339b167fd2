package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/edgelb/edge/cmd/edge/internal/admin"
	"github.com/edgelb/edge/conf"
)

// upgradeClient is edge -upgrade: it asks the edge serving cfg's admin
// address to upgrade (admin.Client), waits for the outcome and prints it.
// It exits 0 once the new process serves, 1 with the reason otherwise.
func upgradeClient(cfg *conf.Config, stdout, stderr io.Writer) int {
	token, err := clientToken(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	c, err := admin.NewClient(cfg.Admin.Address, token, upgradeClientTimeout(cfg))
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		return 1
	}
	up, err := c.RequestUpgrade(func(st string) { fmt.Fprintln(stdout, "edge -upgrade:", st) })
	if err != nil {
		fmt.Fprintln(stderr, "edge -upgrade:", err)
		if errors.Is(err, admin.ErrNotLocal) {
			fmt.Fprintln(stderr, "edge -upgrade: run it on the edge host (ssh HOST edge -upgrade -config FILE), or through a tunnel to its loopback (ssh -L 9901:127.0.0.1:9901 HOST)")
		}
		return 1
	}
	fmt.Fprintf(stdout, "edge: upgraded to %s: pid %d now serves (version %s); pid %d drains\n", up.Binary, up.PID, up.Version, up.OldPID)
	return 0
}

// upgradeClientTimeout bounds edge -upgrade's request: the wait for a
// fleet slot, then the new process's start, and a margin.
func upgradeClientTimeout(cfg *conf.Config) time.Duration {
	d := cfg.Upgrade.Timeout.Std() + 30*time.Second
	if cfg.Upgrade.FleetConcurrency > 0 {
		d += cfg.Upgrade.FleetWait.Std()
	}
	return d
}

// clientToken is the credential edge's clients send: the file's token,
// else the one edge generated in state_dir. Reading that file is what
// makes the caller edge's own user; nobody else may upgrade.
func clientToken(cfg *conf.Config) (string, error) {
	tok, err := cfg.Admin.API.Token()
	if err != nil || tok != "" {
		return string(tok), err
	}
	if cfg.StateDir == "" {
		return "", errors.New("no admin token: the file sets no admin.api.token_file or token_env, and no state_dir where edge keeps a generated one (or send SIGUSR2 to edge's process)")
	}
	t, err := admin.ReadToken(cfg.StateDir)
	if err != nil {
		return "", fmt.Errorf("%w (edge generates it at its first start; only edge's own user may read it)", err)
	}
	return t, nil
}
