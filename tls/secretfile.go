package tls

import (
	"fmt"
	"io"
	"os"
)

// readSecretFile reads a private key or ticket key file, refusing one
// open to group or others (mode & 0o077): any other account on the host
// could read the key, or replace it. conf refuses such files at start
// and in `edge -check`; this holds the same rule for every reload, so a
// key rotated in with a careless mode is refused and the loaded one kept.
// The mode is read from the open file, so what is read is what was
// checked.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("mode %04o lets group or others at a secret; chmod 600 it (or 400)", m)
	}
	return io.ReadAll(f)
}
