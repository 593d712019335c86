//go:build !unix

package loadgen

func openFileLimit() int { return 0 }
