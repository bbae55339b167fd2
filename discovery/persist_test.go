package discovery

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSaveLoadSet(t *testing.T) {
	dir := t.TempDir()
	path := statePath(dir, "chat")
	want := savedSet{Pool: "chat", Service: "chat", Index: 42, Saved: time.Unix(1700000000, 0).UTC(), Members: ms("a", "b")}
	if err := saveSet(path, want); err != nil {
		t.Fatalf("save: %v", err)
	}
	got, ok, err := loadSet(path)
	if err != nil || !ok {
		t.Fatalf("load: got ok=%v err=%v, want ok", ok, err)
	}
	want.Version = stateVersion
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files in state dir: got %d, want 1 (no temporary files left)", len(entries))
	}
}

func TestLoadSetProblems(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, wantErr string
	}{
		{"garbage", "{not json", "state file"},
		{"other version", `{"version": 99}`, "version 99"},
		{"member without address", `{"version": 1, "members": [{"ID": "a"}]}`, "without id or address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, ok, err := loadSet(path)
			if ok || err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got ok=%v err=%v, want error containing %q", ok, err, tt.wantErr)
			}
		})
	}
	if _, ok, err := loadSet(filepath.Join(dir, "missing.json")); ok || err != nil {
		t.Errorf("missing file: got ok=%v err=%v, want neither", ok, err)
	}
}

func TestStatePathStaysInDir(t *testing.T) {
	for _, pool := range []string{"../etc/passwd", "..", "a/b", "", "chat"} {
		p := statePath("/state", pool)
		if filepath.Dir(p) != "/state" || strings.Contains(filepath.Base(p), "/") {
			t.Errorf("statePath(%q): got %q, want a file directly in /state", pool, p)
		}
	}
}

// TestLastKnownGoodIsEdges: a saved set decides where clients go after a
// restart, so one another user owns (uid 65534: planted to route clients
// to their backends) is refused with its file and owner, a state
// directory another user made is never written into, and a link planted
// at the file's name is replaced, not written through.
func TestLastKnownGoodIsEdges(t *testing.T) {
	dir := t.TempDir()
	path := statePath(dir, "chat")
	set := savedSet{Pool: "chat", Service: "chat", Index: 1, Members: ms("a")}
	if err := saveSet(path, set); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved set: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Skipf("chown to uid 65534: %v (not root)", err)
	}
	if _, ok, err := loadSet(path); ok || err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("another user's set: ok=%v err=%v, want a refusal naming the file and owner", ok, err)
	}

	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("edge's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := saveSet(path, set); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "edge's\n" {
		t.Errorf("saved through a link: the target now holds %q", b)
	}
	if _, ok, err := loadSet(path); !ok || err != nil {
		t.Errorf("the set saved in place of the link: ok=%v err=%v", ok, err)
	}

	planted := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := saveSet(statePath(planted, "chat"), set); err == nil || !strings.Contains(err.Error(), planted) {
		t.Errorf("save into another user's directory: %v, want a refusal naming it", err)
	}
	if entries, _ := os.ReadDir(planted); len(entries) != 0 {
		t.Errorf("another user's directory holds %d entries after a refused save", len(entries))
	}
}
