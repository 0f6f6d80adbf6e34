package main

import "testing"

// The AMD and the Intel tables of one part sit in the same document: their
// headings name the CPU, so neither's anchor shadows the other's.
func TestPartHeadingNamesTheCPU(t *testing.T) {
	for _, c := range []struct{ cpu, want string }{
		{"AMD EPYC (family 25 model 17, 2 vCPUs)", "Dense qwen3 and gemma3 shapes (issue 24), on the AMD EPYC"},
		{"AMD EPYC 9R14 96-Core Processor (family 25 model 17, 2 vCPUs)", "Dense qwen3 and gemma3 shapes (issue 24), on the AMD EPYC"},
		{"Intel(R) Xeon(R) Processor (family 6 model 167, 2 vCPUs)", "Dense qwen3 and gemma3 shapes (issue 24), on the Intel Xeon"},
		{"", "Dense qwen3 and gemma3 shapes (issue 24)"},
	} {
		if got := partHeading("dense", c.cpu); got != c.want {
			t.Errorf("%q: %q, want %q", c.cpu, got, c.want)
		}
	}
}
