package kernels

import "golang.org/x/sys/cpu"

// F16C has no flag in x/sys/cpu; every AVX2 CPU (Haswell, Zen 1 and later)
// has it, so AVX2 stands for AVX2+FMA+F16C.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
)

// cpuFeatures lists the CPU features the paths care about.
func cpuFeatures() []string {
	var fs []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"avx2", cpu.X86.HasAVX2}, {"fma", cpu.X86.HasFMA},
		{"avx512f", cpu.X86.HasAVX512F}, {"avx512bw", cpu.X86.HasAVX512BW}, {"avx512vl", cpu.X86.HasAVX512VL},
		{"avx512vnni", cpu.X86.HasAVX512VNNI}, {"avx512bf16", cpu.X86.HasAVX512BF16}, {"avxvnni", cpu.X86.HasAVXVNNI},
	} {
		if f.has {
			fs = append(fs, f.name)
		}
	}
	return fs
}
