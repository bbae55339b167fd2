package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/trust"
)

// stateVersion is bumped when the file format changes incompatibly.
const stateVersion = 1

// savedSet is the on-disk form of a pool's last good member set.
type savedSet struct {
	Version int              `json:"version"`
	Pool    string           `json:"pool"`
	Service string           `json:"service"`
	Index   uint64           `json:"index"`
	Saved   time.Time        `json:"saved"`
	Members []balance.Member `json:"members"`
}

// statePath is StateDir/discovery-<pool>.json; the pool name is reduced to a
// safe file name so a name like "../x" cannot escape the directory.
func statePath(dir, pool string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, pool)
	if safe == "" || strings.Trim(safe, ".") == "" {
		safe = "_" + safe
	}
	return filepath.Join(dir, "discovery-"+safe+".json")
}

// saveSet writes the set atomically: a temporary file in the same directory,
// fsync, then rename, so a crash leaves either the old or the new file.
func saveSet(path string, s savedSet) error {
	s.Version = stateVersion
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	return consul.WriteState(path, data)
}

// loadSet reads a saved set, if the file is edge's (internal/trust: a
// set planted by another user would route clients to their backends). A missing file is (savedSet{}, false, nil).
func loadSet(path string) (savedSet, bool, error) {
	data, err := trust.ReadFile(path, trust.State, consul.MaxStateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return savedSet{}, false, nil
	}
	if err != nil {
		return savedSet{}, false, fmt.Errorf("state file %s: %w", path, err)
	}
	var s savedSet
	if err := json.Unmarshal(data, &s); err != nil {
		return savedSet{}, false, fmt.Errorf("state file %s: %w", path, err)
	}
	if s.Version != stateVersion {
		return savedSet{}, false, fmt.Errorf("state file %s: version %d, want %d", path, s.Version, stateVersion)
	}
	for _, m := range s.Members {
		if m.ID == "" || m.Addr == "" {
			return savedSet{}, false, fmt.Errorf("state file %s: member without id or address", path)
		}
	}
	sortMembers(s.Members)
	return s, true, nil
}
