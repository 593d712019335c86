//go:build !(386 || amd64 || arm || arm64 || loong64 || mips || mipsle || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x || wasm) || rally_nogid

package rally

import (
	"runtime"
	"sync"
)

// stackHeads holds the buffers currentG reads a stack trace's first line
// into, so that a call does not allocate one.
var stackHeads = sync.Pool{New: func() any { return new([64]byte) }}

// currentG identifies the calling goroutine without assembly: its number,
// from the first line of its stack trace ("goroutine 18 [running]:").
// Exact, but it walks the goroutine's stack, microseconds a call instead
// of a nanosecond (see goroutine.go).
func currentG() uintptr {
	b := stackHeads.Get().(*[64]byte)
	n := runtime.Stack(b[:], false)
	const prefix = "goroutine "
	var id uintptr
	if n > len(prefix) && string(b[:len(prefix)]) == prefix {
		for _, ch := range b[len(prefix):n] {
			if ch < '0' || ch > '9' {
				break
			}
			id = id*10 + uintptr(ch-'0')
		}
	}
	if id == 0 {
		// A runtime whose traces read otherwise: failing loudly beats
		// corks that hold other goroutines' sends.
		panic("rally: cannot tell the calling goroutine from its stack trace: " + string(b[:n]))
	}
	stackHeads.Put(b)
	return id
}
