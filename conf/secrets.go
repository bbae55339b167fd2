package conf

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"

	"github.com/edgelb/edge/internal/trust"
)

const (
	// minSecretLen is the shortest cookie signing key accepted: 128 bits,
	// so that the HMAC cannot be brute-forced offline from one cookie.
	minSecretLen = 16
	// minSecretBits is the least estimated strength (secretBits) of a
	// cookie key that loads without a warning: a 16-byte key from 16 hex
	// digits carries 64 bits at most.
	minSecretBits = 64
	// maxSecretSize bounds what a secret file may hold.
	maxSecretSize = 64 << 10
)

// ConsulTokenEnv is the environment variable consulted for the Consul ACL
// token when the file sets neither token nor token_file. It is the name the
// consul CLI uses.
const ConsulTokenEnv = "CONSUL_HTTP_TOKEN"

// Secrets returns the cookie signing keys: current from secret_file or
// secret_env (nil when neither is set: the caller then makes a random key
// per process), and previous from previous_secret_file or
// previous_secret_env (empty when neither is set or the variable is unset).
// Keys are trimmed of surrounding whitespace and must be at least 16 bytes.
// Errors name the file or variable, never the content.
func (k *Cookie) Secrets() (current []byte, previous [][]byte, err error) {
	current, err = secret("secret", k.SecretFile, k.SecretEnv, true)
	if err != nil {
		return nil, nil, err
	}
	prev, err := secret("previous_secret", k.PreviousSecretFile, k.PreviousSecretEnv, false)
	if err != nil {
		return nil, nil, err
	}
	if prev != nil {
		previous = [][]byte{prev}
	}
	return current, previous, nil
}

// secret reads one key from a file or an environment variable. A named
// variable that is unset is an error only when required: a previous key
// variable left configured after a rotation finished simply means "none".
func secret(what, file, env string, required bool) ([]byte, error) {
	switch {
	case file != "" && env != "":
		return nil, fmt.Errorf("set only one of %s_file and %s_env", what, what)
	case file != "":
		b, err := readSecretFile(file)
		if err != nil {
			return nil, fmt.Errorf("cookie %s_file: %w", what, err)
		}
		if len(b) < minSecretLen {
			return nil, fmt.Errorf("cookie %s_file %s: %d bytes, need at least %d", what, file, len(b), minSecretLen)
		}
		return b, nil
	case env != "":
		v, ok := os.LookupEnv(env)
		b := bytes.TrimSpace([]byte(v))
		if !ok || len(b) == 0 {
			if !required {
				return nil, nil
			}
			return nil, fmt.Errorf("cookie %s_env: environment variable %s is unset or empty", what, env)
		}
		if len(b) < minSecretLen {
			return nil, fmt.Errorf("cookie %s_env: environment variable %s holds %d bytes, need at least %d", what, env, len(b), minSecretLen)
		}
		return b, nil
	}
	return nil, nil
}

// secretBits estimates the strength of key: its length times the Shannon
// entropy of its byte frequencies. It is an upper bound for a key made of
// independent bytes and catches repeated or few-symbol keys; it cannot
// see that a key is a dictionary word.
func secretBits(key []byte) float64 {
	var n [256]int
	for _, c := range key {
		n[c]++
	}
	var h float64
	for _, c := range n {
		if c > 0 {
			p := float64(c) / float64(len(key))
			h -= p * math.Log2(p)
		}
	}
	return h * float64(len(key))
}

// readSecretFile reads a small regular file and trims surrounding
// whitespace (the trailing newline editors add). Devices and pipes are
// refused so that a typo such as /dev/zero cannot hang or exhaust edge.
func readSecretFile(path string) ([]byte, error) {
	b, err := trust.ReadFile(path, trust.Secret, maxSecretSize)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	return b, nil
}

// checkFile reports whether path names an existing regular file, in words
// an operator can act on.
func checkFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such file", path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", path)
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: not a regular file", path)
	}
	return nil
}

// checkSecretFile is checkFile for a file that holds a secret: it must be
// edge's (internal/trust): not open to group or others (mode & 0o077 ==
// 0: any other account on the host, or a group it shares, could read the
// token or key; ssh refuses private keys for the same reason), owned by
// edge's user or root, named without a symbolic link, in directories
// nobody else can write to (where another user could plant the file).
func checkSecretFile(path string) error {
	if err := checkFile(path); err != nil {
		return err
	}
	f, err := trust.Open(path, trust.Secret)
	if err != nil {
		return err
	}
	return f.Close()
}

// ACLToken returns the Consul ACL token: token if set, else the content of
// token_file, else the CONSUL_HTTP_TOKEN environment variable, else "" (no
// ACLs). Errors name the file, never the content.
func (c *Consul) ACLToken() (Secret, error) {
	switch {
	case c.Token != "" && c.TokenFile != "":
		return "", errors.New("consul: set only one of token and token_file")
	case c.Token != "":
		return c.Token, nil
	case c.TokenFile != "":
		b, err := readSecretFile(c.TokenFile)
		if err != nil {
			return "", fmt.Errorf("consul token_file: %w", err)
		}
		return Secret(b), nil
	}
	return Secret(os.Getenv(ConsulTokenEnv)), nil
}

// Token returns the admin API's bearer token from token_file or token_env,
// or "" when neither is set. A token shorter than 16 bytes is refused: it
// guards operations that cut live connections. Errors name the file or
// variable, never the content.
func (a *AdminAPI) Token() (Secret, error) {
	switch {
	case a.TokenFile != "" && a.TokenEnv != "":
		return "", errors.New("admin.api: set only one of token_file and token_env")
	case a.TokenFile != "":
		b, err := readSecretFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("admin.api token_file: %w", err)
		}
		if len(b) < minSecretLen {
			return "", fmt.Errorf("admin.api token_file %s: %d bytes, need at least %d", a.TokenFile, len(b), minSecretLen)
		}
		return Secret(b), nil
	case a.TokenEnv != "":
		b := bytes.TrimSpace([]byte(os.Getenv(a.TokenEnv)))
		if len(b) == 0 {
			return "", fmt.Errorf("admin.api token_env: environment variable %s is unset or empty", a.TokenEnv)
		}
		if len(b) < minSecretLen {
			return "", fmt.Errorf("admin.api token_env: environment variable %s holds %d bytes, need at least %d", a.TokenEnv, len(b), minSecretLen)
		}
		return Secret(b), nil
	}
	return "", nil
}

// SealKey returns the 32-byte key of consul_seal_key_file (64 hex digits
// or base64), or nil when none is set. Errors name the file, never the
// content.
func (st *SessionTickets) SealKey() ([]byte, error) {
	if st.ConsulSealKeyFile == "" {
		return nil, nil
	}
	b, err := readSecretFile(st.ConsulSealKeyFile)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	key := make([]byte, 32)
	if n, err := hex.Decode(key, b); err == nil && n == 32 && len(b) == 64 {
		return key, nil
	}
	if n, err := base64.StdEncoding.Decode(key, b); err == nil && n == 32 && len(b) == 44 {
		return key, nil
	}
	clear(key)
	return nil, fmt.Errorf("%s: not 32 bytes as 64 hex digits or base64 (openssl rand -hex 32)", st.ConsulSealKeyFile)
}
