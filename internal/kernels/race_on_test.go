//go:build race

package kernels

// raceDetector: this test binary runs with the race detector, under which
// sync.Pool drops a quarter of what it is given (allocation counts differ).
const raceDetector = true
