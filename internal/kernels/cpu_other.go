//go:build !amd64

package kernels

const (
	hasAVX2   = false
	hasAVX512 = false
)

func cpuFeatures() []string { return nil }

func cpuVendorAMD() bool { return false }
