//go:build !unix

package rally

// iovec stands in for syscall.Iovec where the system has none (Windows):
// there rally writes through net.Conn and never gathers by itself.
type iovec struct {
	Base *byte
	Len  uint64
}
