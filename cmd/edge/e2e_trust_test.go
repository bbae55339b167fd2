package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReloadKeepsTokenFromFileNotEdges: the admin token_file is judged
// again on every reload (internal/trust). Replaced by another user's file
// (uid 65534), or by a symbolic link, the reload is refused with the file
// and the reason, and the token edge had keeps guarding writes: the
// replacement's token is refused. Edge's own file with a new token is
// then taken.
func TestReloadKeepsTokenFromFileNotEdges(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	const oldToken, newToken = "old-token-0123456789abcdef", "new-token-0123456789abcdef"
	tokenFile := filepath.Join(s.dir, "admin.tok")
	writeFile(t, tokenFile, oldToken+"\n")
	adminLine := fmt.Sprintf("admin: {address: %q}\n", s.admin)
	writeFile(t, s.cfg, strings.Replace(readFile(t, s.cfg), adminLine,
		fmt.Sprintf("admin: {address: %q, api: {token_file: %q}}\n", s.admin, tokenFile), 1))
	p := startEdge(t, s.cfg)

	const write = "/api/v1/pools/app/backends/b1/enable"
	accepts := func(tok string) bool {
		code, _ := s.apiCall(t, "POST", write, "", map[string]string{"Authorization": "Bearer " + tok})
		return code == 200
	}
	if !accepts(oldToken) {
		t.Fatal("the token from edge's own token_file is refused")
	}
	replace := func(make func(path string)) {
		t.Helper()
		if err := os.Remove(tokenFile); err != nil {
			t.Fatal(err)
		}
		make(tokenFile)
	}

	replace(func(path string) {
		writeFile(t, path, newToken+"\n")
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Skipf("chown to uid 65534: %v (not root)", err)
		}
	})
	p.reloadAndWait(t, "reload refused, keeping the running configuration")
	refused := p.logs()[strings.LastIndex(p.logs(), "reload refused"):]
	for _, w := range []string{tokenFile, "owned by uid 65534"} {
		if !strings.Contains(refused, w) {
			t.Errorf("the refusal lacks %q: %s", w, refused)
		}
	}
	if !accepts(oldToken) || accepts(newToken) {
		t.Errorf("another user's token_file: old token accepted %v, theirs %v; want the old one alone", accepts(oldToken), accepts(newToken))
	}

	elsewhere := filepath.Join(s.dir, "elsewhere.tok")
	writeFile(t, elsewhere, newToken+"\n")
	replace(func(path string) {
		if err := os.Symlink(elsewhere, path); err != nil {
			t.Fatal(err)
		}
	})
	p.reloadAndWait(t, "reload refused, keeping the running configuration")
	refused = p.logs()[strings.LastIndex(p.logs(), "reload refused"):]
	for _, w := range []string{tokenFile, "a symbolic link"} {
		if !strings.Contains(refused, w) {
			t.Errorf("the refusal lacks %q: %s", w, refused)
		}
	}
	if !accepts(oldToken) || accepts(newToken) {
		t.Errorf("token_file a symbolic link: old token accepted %v, new %v; want the old one alone", accepts(oldToken), accepts(newToken))
	}

	replace(func(path string) { writeFile(t, path, newToken+"\n") })
	p.reloadAndWait(t, "configuration reloaded")
	if accepts(oldToken) || !accepts(newToken) {
		t.Errorf("edge's own token_file: old token accepted %v, new %v; want the new one alone", accepts(oldToken), accepts(newToken))
	}
}

// TestReloadKeepsGeneratedTokenWhenStateDirNotEdges: the token edge
// generated in state_dir is judged again on every reload. With state_dir
// given to another user (uid 65534), or admin.token replaced by a link to
// another token, the reload is refused with the file and the reason, and
// the token edge had keeps guarding writes while the other opens nothing.
// Once state_dir is edge's again, a reload is taken.
func TestReloadKeepsGeneratedTokenWhenStateDirNotEdges(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	p := startEdge(t, s.cfg)
	state := filepath.Join(s.dir, "state")
	tokenFile := filepath.Join(state, "admin.token")
	oldToken := s.token(t)
	const otherToken = "other-token-0123456789abcdef"

	const write = "/api/v1/pools/app/backends/b1/enable"
	accepts := func(tok string) bool {
		code, _ := s.apiCall(t, "POST", write, "", map[string]string{"Authorization": "Bearer " + tok})
		return code == 200
	}
	if !accepts(oldToken) {
		t.Fatal("the token edge generated is refused")
	}
	refusedFor := func(want ...string) {
		t.Helper()
		p.reloadAndWait(t, "reload refused, keeping the running configuration")
		refused := p.logs()[strings.LastIndex(p.logs(), "reload refused"):]
		for _, w := range want {
			if !strings.Contains(refused, w) {
				t.Errorf("the refusal lacks %q: %s", w, refused)
			}
		}
		if !accepts(oldToken) || accepts(otherToken) {
			t.Errorf("after a refused reload: the old token accepted %v, the other %v; want the old one alone", accepts(oldToken), accepts(otherToken))
		}
	}

	if err := os.Chown(state, 65534, 65534); err != nil {
		t.Skipf("chown to uid 65534: %v (not root)", err)
	}
	refusedFor(state, "owned by uid 65534")
	if err := os.Chown(state, os.Geteuid(), os.Getegid()); err != nil {
		t.Fatal(err)
	}

	saved := filepath.Join(s.dir, "saved.token")
	if err := os.Rename(tokenFile, saved); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(s.dir, "elsewhere.token")
	writeFile(t, elsewhere, otherToken+"\n")
	if err := os.Chmod(elsewhere, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, tokenFile); err != nil {
		t.Fatal(err)
	}
	refusedFor(tokenFile, "a symbolic link")

	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(saved, tokenFile); err != nil {
		t.Fatal(err)
	}
	p.reloadAndWait(t, "configuration reloaded")
	if !accepts(oldToken) {
		t.Error("edge's own state_dir again: the token is refused")
	}
}
