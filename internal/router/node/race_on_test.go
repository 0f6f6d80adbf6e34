//go:build race

package node

// raceDetector: this test binary runs with the race detector (5-10x
// slower: the long corpus tests sample under it, as under -short).
const raceDetector = true
