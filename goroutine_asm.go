//go:build amd64 || arm64

package rally

// currentG identifies the calling goroutine (see goroutine.go).
//
//go:noescape
func currentG() uintptr
