package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
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
	usageFor(fs, "Usage: sluice version\n\nPrints the module version, the VCS revision and commit time the binary was\nbuilt from (\"+dirty\" when the tree had changes), the Go version and platform.\nA build without VCS stamping shows what the Makefile stamped at link time.\n")
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

// version and revision are stamped at link time by the Makefile's build
// and serve targets and the Dockerfile (-ldflags "-X main.version=...
// -X main.revision=..."), so that a binary built without VCS stamping
// (-buildvcs=false, a container build, a tarball without .git) still says
// what it is. Unset, the Go toolchain's stamps are used (debug.ReadBuildInfo).
var version, revision string

// buildVersion is the module version and the VCS revision the binary was
// built from: the link-time stamps first, else Go's build information,
// else "(devel)" and "unknown". rev is 12 hex digits, "+dirty" when the
// tree had changes; when is the commit time, or "".
func buildVersion(bi *debug.BuildInfo, ok bool) (ver, rev, when string) {
	ver, rev = version, revision
	if ok {
		if ver == "" {
			ver = bi.Main.Version
		}
		var dirty string
		var vcsRev string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev == "" && vcsRev != "" {
			rev = vcsRev + dirty
		}
		if revision != "" {
			when = "" // the toolchain's time is of another revision's tree
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if r, dirty, _ := strings.Cut(rev, "+"); len(r) > 12 {
		rev = r[:12]
		if dirty != "" {
			rev += "+" + dirty
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev, when
}

// versionString renders build information in one line: what `go version
// -m` would show of the binary.
func versionString(bi *debug.BuildInfo, ok bool) string {
	ver, rev, when := buildVersion(bi, ok)
	out := "sluice " + ver + " " + rev
	if when != "" {
		out += " " + when
	}
	goVersion := runtime.Version()
	if ok && bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	return fmt.Sprintf("%s %s %s/%s", out, goVersion, runtime.GOOS, runtime.GOARCH)
}

// logStart is every role's first log line: what is running, so that a log
// read later says which build wrote it.
func logStart(log *slog.Logger, role string) {
	ver, rev, _ := buildVersion(debug.ReadBuildInfo())
	log.Info("starting", "role", role, "version", ver, "revision", rev, "go", runtime.Version())
}
