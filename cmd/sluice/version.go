package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

func init() {
	register(command{
		name:    "version",
		summary: "print the version: module version, VCS revision and time, Go version",
		run:     func(args []string) int { return runVersion(args, os.Stdout) },
	})
}

func runVersion(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	usageFor(fs, "Usage: sluice version\n\nPrints the module version, the VCS revision and commit time the binary was\nbuilt from (\"+dirty\" when the tree had changes), the Go version and platform.\n")
	if code, ok := parseFlagsTo(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "version: unexpected arguments %q\n", fs.Args())
		return 2
	}
	fmt.Fprintln(stdout, versionString(debug.ReadBuildInfo()))
	return 0
}

// versionString renders build information: what `go version -m` would
// show of the binary, in one line.
func versionString(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return fmt.Sprintf("sluice (no build information) %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	out := "sluice " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " " + rev + dirty
		if when != "" {
			out += " " + when
		}
	}
	return fmt.Sprintf("%s %s %s/%s", out, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
}
