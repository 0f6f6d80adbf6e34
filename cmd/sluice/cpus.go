package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// cgroupCPUMax is the cgroup v2 CPU limit of this process's cgroup (in a
// container, its own). Kubernetes writes a pod's CPU limit there.
const cgroupCPUMax = "/sys/fs/cgroup/cpu.max"

// availableCPUs is the cores the default --threads uses: the machine's,
// lowered to the container's CPU limit. runtime.NumCPU counts every core
// of the node, so a pod limited to 2 CPUs on a 64-core node would run 64
// threads per step and be throttled most of each period.
func availableCPUs() int { return cgroupCPUs(cgroupCPUMax, runtime.NumCPU()) }

// cgroupCPUs reads a cgroup v2 cpu.max file ("QUOTA PERIOD" in
// microseconds, or "max PERIOD" for no limit) and returns ncpu lowered to
// the quota rounded up to whole cores, at least 1. A missing or malformed
// file (cgroup v1, not Linux) leaves ncpu.
func cgroupCPUs(path string, ncpu int) int {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64 {
		return ncpu
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return ncpu
	}
	quota, qerr := strconv.ParseInt(f[0], 10, 64)
	period, perr := strconv.ParseInt(f[1], 10, 64)
	if qerr != nil || perr != nil || quota <= 0 || period <= 0 {
		return ncpu
	}
	// Both are at most ~2^63: the division cannot overflow; round up.
	cores := quota / period
	if quota%period != 0 {
		cores++
	}
	return int(max(1, min(int64(ncpu), cores)))
}
