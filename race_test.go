//go:build race

package rally

// raceEnabled: the race detector makes the code under test several times
// slower; the randomised tests run fewer sequences under it.
const raceEnabled = true
