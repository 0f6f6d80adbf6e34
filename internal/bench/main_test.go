package bench

import (
	"os"
	"testing"

	"sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveSluiceBinary()
	os.Exit(code)
}

// sluiceBinary is the sluice command the serving benchmarks start.
func sluiceBinary(t *testing.T) string { return testenv.SluiceBinary(t) }
