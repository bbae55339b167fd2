package main

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// version and revision are stamped by scripts/build.sh and deploy/Dockerfile
// with -ldflags "-X main.version=$(git describe --always --dirty) -X
// main.revision=$(git rev-parse HEAD)". A build without them (go build, go
// install) falls back on what the Go toolchain recorded: the module version
// and, when built in a checkout with -buildvcs, the VCS revision.
var (
	version  = ""
	revision = ""
)

// build describes the running binary, for -version, /status and the
// edge_build_info metric.
type build struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"go_version"`
}

// String is the -version line after "edge ".
func (b build) String() string {
	return b.Version + " (revision " + b.Revision + ", " + b.GoVersion + ")"
}

// currentBuild reads the stamps and the binary's build info.
func currentBuild() build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return composeBuild(version, revision, bi)
}

// composeBuild prefers the -ldflags stamps, then the build info: the main
// module's version unless it is "(devel)", and the vcs.revision setting
// (with "-dirty" when vcs.modified says the tree had changes). What is known
// by neither is "dev" and "unknown".
func composeBuild(ver, rev string, bi *debug.BuildInfo) build {
	b := build{Version: ver, Revision: rev, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if b.Revision == "" {
			b.Revision = vcsRevision(bi.Settings)
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	return b
}

func vcsRevision(settings []debug.BuildSetting) string {
	var rev string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" && modified && !strings.HasSuffix(rev, "-dirty") {
		rev += "-dirty"
	}
	return rev
}
