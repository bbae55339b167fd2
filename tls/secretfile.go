package tls

import "github.com/edgelb/edge/internal/trust"

// maxSecretFile bounds a private key or ticket key file.
const maxSecretFile = 1 << 20

// readSecretFile reads a private key or ticket key file if it is edge's
// (internal/trust): not open to group or others (any other account on
// the host could read the key, or replace it), owned by edge's user or
// root, named without a symbolic link, in directories nobody else can
// write to. conf refuses such files at start and in `edge -check`; this
// holds the same rule for every reload, so a key rotated in with a
// careless mode or owner is refused and the loaded one kept. What is read
// is what was checked: the checks are made on the open file.
func readSecretFile(path string) ([]byte, error) {
	return trust.ReadFile(path, trust.Secret, maxSecretFile)
}

// maxStateFile bounds a file tls keeps in state_dir (an OCSP staple, an
// issuer certificate): a few kilobytes each.
const maxStateFile = 1 << 20

// readStateFile reads a staple or issuer edge saved in state_dir, if it is
// edge's (internal/trust): a file another user planted there, or a link
// they left in its place, is refused, never served or trusted.
func readStateFile(path string) ([]byte, error) {
	return trust.ReadFile(path, trust.State, maxStateFile)
}
