package rally

import "flag"

// long makes the randomised tests run many more sequences:
// go test -run Invariants -long .
var long = flag.Bool("long", false, "run the randomised tests longer")

// LongTests reports whether -long was given, for the external test package.
func LongTests() bool { return *long }

// RaceDetector reports whether the tests run under the race detector, for
// the external test package.
func RaceDetector() bool { return raceEnabled }
