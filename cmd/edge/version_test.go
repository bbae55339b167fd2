package main

import (
	"runtime/debug"
	"testing"
)

func TestComposeBuild(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name     string
		ver, rev string
		bi       *debug.BuildInfo
		want     build
	}{
		{"stamped by -ldflags", "v1.2.0-3-gabcdef0", "abcdef0123", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("ffff", "false")},
			build{"v1.2.0-3-gabcdef0", "abcdef0123", "go1.26.8"}},
		{"-buildvcs only", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123abcd", "false")},
			build{"dev", "0123abcd", "go1.26.8"}},
		{"-buildvcs, dirty tree", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20260101000000-0123abcd+dirty"}, Settings: vcs("0123abcd", "true")},
			build{"v0.0.0-20260101000000-0123abcd+dirty", "0123abcd-dirty", "go1.26.8"}},
		{"go install @version", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.3.0"}},
			build{"v1.3.0", "unknown", "go1.26.8"}},
		{"nothing known", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			build{"dev", "unknown", "go1.26.8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := composeBuild(tt.ver, tt.rev, tt.bi); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := composeBuild("", "", nil); got.Version != "dev" || got.Revision != "unknown" || got.GoVersion == "" {
		t.Errorf("without build info: got %+v", got)
	}
}
