package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/alecthomas/kong"

	"github.com/flight-sink/flight-sink/engine"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3". When it is empty
// the module version or VCS revision recorded in the binary is used.
var version string

// buildVersion returns the version this binary reports.
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version, the Go toolchain and the manifest format this build writes.
func (c *VersionCmd) Run(kctx *kong.Context) error {
	_, err := fmt.Fprintln(kctx.Stdout, versionLine())
	return err
}

// versionLine is what `flight-sink version` and `flight-sink --version` print.
func versionLine() string {
	return fmt.Sprintf("flight-sink %s (%s %s/%s, manifest format %d)",
		buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH, engine.FormatVersion)
}

// HelpCmd is `flight-sink help [CMD...]`; run rewrites it to `CMD --help` before parsing, so its
// Run is reached only through kong's own help.
type HelpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to describe."`
}

// Run prints the help of the whole tool.
func (c *HelpCmd) Run(kctx *kong.Context) error {
	return kctx.PrintUsage(false)
}
