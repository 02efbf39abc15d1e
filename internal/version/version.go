// Package version says which build of Spillway a binary is: the module
// version, the VCS revision and its time, whether the work tree had
// uncommitted changes, and the Go version. Every command prints it with
// --version, and both daemons serve it on /status and as the
// spillway_gfe_build_info and spillway_controlplane_build_info metrics.
//
// The values come from the build information the Go toolchain embeds
// (runtime/debug.ReadBuildInfo: "vcs.revision", "vcs.time",
// "vcs.modified"). A build without VCS information (a source tarball, a
// Docker build context without .git) can set them with the linker:
//
//	go build -ldflags "-X github.com/spillway-lb/spillway/internal/version.version=v1.2.0 \
//	    -X github.com/spillway-lb/spillway/internal/version.revision=$(git rev-parse HEAD)" ./cmd/...
//
// A value set with -X wins over the embedded one.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Set with -ldflags -X; empty means "from the build information".
var (
	version  string
	revision string
)

// Info is one binary's build. The zero value of a field means unknown.
type Info struct {
	// Version is the module version ("v1.2.0"), "(devel)" for a build
	// from a work tree, or the -X override.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from.
	Revision string `json:"revision,omitempty"`
	// Time is the commit time of Revision (UTC), not the build time.
	Time time.Time `json:"time,omitzero"`
	// Modified reports uncommitted changes in the work tree at build time.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary ("go1.26.0").
	GoVersion string `json:"go_version"`
}

// Get returns the running binary's build information, with the -X
// overrides applied. It never fails: what is unknown stays empty.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(bi, version, revision)
}

// FromBuildInfo returns the Info described by bi (nil: nothing embedded),
// with overrideVersion and overrideRevision in place of the embedded values
// when they are not empty. A revision set by override drops the embedded
// time and modified flag, which describe another commit. Version is never
// empty: without anything else it is "(devel)".
func FromBuildInfo(bi *debug.BuildInfo, overrideVersion, overrideRevision string) Info {
	i := Info{Version: "(devel)", GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		if bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.time":
				if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
					i.Time = t.UTC()
				}
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if overrideVersion != "" {
		i.Version = overrideVersion
	}
	if overrideRevision != "" && overrideRevision != i.Revision {
		i.Revision, i.Time, i.Modified = overrideRevision, time.Time{}, false
	}
	return i
}

// String is the one line --version prints after the command's name:
// "v1.2.0 (rev 0cc1780a12b4, 2026-12-01T15:00:00Z, modified) go1.26.0".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	var detail []string
	if i.Revision != "" {
		detail = append(detail, "rev "+short(i.Revision))
	}
	if !i.Time.IsZero() {
		detail = append(detail, i.Time.Format(time.RFC3339))
	}
	if i.Modified {
		detail = append(detail, "modified")
	}
	if len(detail) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(detail, ", "))
	}
	if i.GoVersion != "" {
		b.WriteString(" " + i.GoVersion)
	}
	return b.String()
}

// Labels are the labels of the daemons' spillway_*_build_info metrics:
// version, revision and go_version (an unknown revision is "").
func (i Info) Labels() map[string]string {
	return map[string]string{"version": i.Version, "revision": i.Revision, "go_version": i.GoVersion}
}

// Line is what every command prints for --version: its name, then String.
func Line(command string) string { return command + " " + Get().String() }

// short returns the first 12 characters of a revision.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
