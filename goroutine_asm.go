//go:build (386 || amd64 || arm || arm64 || loong64 || mips || mipsle || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x || wasm) && !rally_nogid

package rally

// currentG identifies the calling goroutine: the address of its
// descriptor (see goroutine.go), read in goroutine_$GOARCH.s.
//
//go:noescape
func currentG() uintptr
