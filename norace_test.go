//go:build !race

package rally

const raceEnabled = false
