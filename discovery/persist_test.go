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
