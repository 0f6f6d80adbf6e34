package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// WorkerLists are the worker specs of a --workers-file: "host:port"
// addresses or DNS names (resolved and re-resolved like --prefill and
// --decode).
type WorkerLists struct {
	Prefill, Decode []string
}

// maxWorkersFile bounds what a workers file may hold (an operator's
// file, but a mistaken path must not make the router read a disk image).
const maxWorkersFile = 1 << 20

// ParseWorkers reads a workers file: one "prefill SPEC" or "decode SPEC"
// per line, # starts a comment, blank lines are skipped, a spec given
// twice counts once. Every spec must be host:port with a port in 1-65535.
// A bad line is an error naming it (the caller keeps its old lists).
func ParseWorkers(r io.Reader) (WorkerLists, error) {
	var wl WorkerLists
	sc := bufio.NewScanner(io.LimitReader(r, maxWorkersFile+1))
	n, size := 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > maxWorkersFile {
			return WorkerLists{}, fmt.Errorf("workers file: larger than %d bytes", maxWorkersFile)
		}
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return WorkerLists{}, fmt.Errorf("workers file line %d: want \"prefill HOST:PORT\" or \"decode HOST:PORT\", got %d fields", n, len(f))
		}
		host, port, err := net.SplitHostPort(f[1])
		if p, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
			return WorkerLists{}, fmt.Errorf("workers file line %d: %q is not HOST:PORT", n, truncate(f[1], 64))
		}
		var list *[]string
		switch f[0] {
		case "prefill":
			list = &wl.Prefill
		case "decode":
			list = &wl.Decode
		default:
			return WorkerLists{}, fmt.Errorf("workers file line %d: role %q is neither prefill nor decode", n, truncate(f[0], 32))
		}
		if !slices.Contains(*list, f[1]) {
			*list = append(*list, f[1])
		}
	}
	if err := sc.Err(); err != nil {
		return WorkerLists{}, fmt.Errorf("workers file: %w", err)
	}
	return wl, nil
}

// ReadWorkers reads and parses the workers file at path.
func ReadWorkers(path string) (WorkerLists, error) {
	f, err := os.Open(path)
	if err != nil {
		return WorkerLists{}, err
	}
	defer f.Close()
	return ParseWorkers(f)
}

// SetSpecs replaces the specs the next Sync resolves (a reloaded workers
// file).
func (d *Discovery) SetSpecs(specs []string) {
	d.mu.Lock()
	d.Specs = append([]string(nil), specs...)
	d.mu.Unlock()
}

// Reload re-reads a workers file into the discoveries of each role and
// syncs them at once: workers new to the file join, those gone from it
// get no new request and are closed once their requests are done
// (Cluster.Remove), the rest are untouched. Either discovery may be nil
// (a prefill worker follows only the decode workers). A file that does
// not parse, or that leaves a followed role with no worker, changes
// nothing and is returned as the error.
func Reload(ctx context.Context, path string, prefill, decode *Discovery) error {
	wl, err := ReadWorkers(path)
	if err != nil {
		return err
	}
	if prefill != nil && len(wl.Prefill) == 0 {
		return fmt.Errorf("workers file %s lists no prefill worker; keeping the current ones", path)
	}
	if decode != nil && len(wl.Decode) == 0 {
		return fmt.Errorf("workers file %s lists no decode worker; keeping the current ones", path)
	}
	for _, x := range []struct {
		d     *Discovery
		specs []string
	}{{prefill, wl.Prefill}, {decode, wl.Decode}} {
		if x.d != nil {
			x.d.SetSpecs(x.specs)
			x.d.Sync(ctx)
		}
	}
	return nil
}

// OnSignal calls reload for every value received on sig until ctx ends
// (the router and prefill worker pass SIGHUP, signal.Notify'd by them).
func OnSignal(ctx context.Context, sig <-chan os.Signal, reload func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			reload()
		}
	}
}
