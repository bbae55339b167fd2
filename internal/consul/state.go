package consul

import (
	"fmt"

	"github.com/edgelb/edge/internal/trust"
)

// WriteState writes data and a newline to path (internal/trust): into a
// directory of edge's, through a new 0600 file beside it, fsync and
// rename, so a crash leaves the old file or the new one.
func WriteState(path string, data []byte) error {
	if err := trust.WriteFile(path, append(data, '\n')); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

// MaxStateFile bounds a state file edge reads back: a saved set of the
// largest pool, or the fleet's actions, is far smaller.
const MaxStateFile = 16 << 20
