package rally

import (
	"testing"
	"unsafe"
)

// Every connection carries its Conn, an idle one too: rally serve's 10,000
// idle connections are 4.0 MiB of Conns. The Go allocator rounds an
// object up to its size class (..., 384, 416, 448, 480, 512) and puts an
// 8-byte header before objects with pointers larger than 512 bytes, so a
// field more can cost 32 bytes a connection; what an idle connection
// never uses is made on first use instead (writeMore, connExtras, the
// send queue's lane, the deadline watch's state), and the read limits are
// the shared options' (readLimits), not the parser's.
func TestAConnFitsThe416ByteSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the sizes are those of 64-bit platforms")
	}
	if n := unsafe.Sizeof(Conn{}); n > 416 {
		t.Fatalf("a Conn is %d bytes, more than the 416 of its size class", n)
	}
}
