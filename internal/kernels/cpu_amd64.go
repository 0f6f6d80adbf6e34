package kernels

import "golang.org/x/sys/cpu"

// F16C has no flag in x/sys/cpu; every AVX2 CPU (Haswell, Zen 1 and later)
// has it, so AVX2 stands for AVX2+FMA+F16C.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
)
