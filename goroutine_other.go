//go:build !amd64 && !arm64

package rally

// currentG is 0 where the goroutine cannot be told (see goroutine.go).
func currentG() uintptr { return 0 }
