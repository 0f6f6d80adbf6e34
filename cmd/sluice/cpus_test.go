package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupCPUs(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file string
		want int
	}{
		{"max 100000\n", 64},            // no limit
		{"200000 100000\n", 2},          // 2 CPUs
		{"150000 100000\n", 2},          // 1.5 rounds up
		{"50000 100000\n", 1},           // half a CPU: at least one thread
		{"12800000 100000\n", 64},       // a limit above the machine
		{"100000\n", 64},                // malformed
		{"-1 100000\n", 64},             // malformed
		{"100000 0\n", 64},              // no period
		{"9223372036854775807 1\n", 64}, // huge quota: no overflow
		{"x y\n", 64},
	} {
		path := filepath.Join(dir, "cpu.max")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := cgroupCPUs(path, 64); got != c.want {
			t.Errorf("%q: %d, want %d", c.file, got, c.want)
		}
	}
	if got := cgroupCPUs(filepath.Join(dir, "absent"), 8); got != 8 {
		t.Errorf("no file: %d, want 8", got)
	}
}
