//go:build race

package interop_test

// raceDetector is true when the tests run under the race detector.
const raceDetector = true
