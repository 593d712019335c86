package rally

// A connection needs to know, cheaply, which goroutine is calling it: a
// send is gathered by a cork only when it comes from the goroutine that
// holds the cork (a Server callback's own sends, not another goroutine's),
// a Write on an event loop's goroutine must not wait for the kernel, and
// Close called on the reading goroutine (from a hook) must not wait for
// that goroutine. Go has no goroutine identity in its API; the address of
// the running goroutine's descriptor serves, read in assembly from where
// the runtime keeps it: the TLS slot on 386 and amd64, the g register on
// arm, arm64, loong64, mips*, ppc64*, riscv64, s390x and wasm (every
// GOARCH Go supports; goroutine_$GOARCH.s). It costs a nanosecond. It is
// only compared for equality while the goroutine it names is known to be
// alive (it holds a cork or the read lock), so a descriptor reused after a
// goroutine exits cannot be mistaken for it.
//
// Without that assembly (a GOARCH Go adds later, or the build tag
// rally_nogid, which tests this path on any machine) identity is still
// exact, never absent: currentG reads the goroutine's number from the
// first line of its own stack trace (runtime.Stack). That walks the
// stack, about 4 µs a call instead of 5 ns (amd64), so sends and corks
// are slower there, but the contract is the same: another goroutine's
// sends are never held by a cork, and a Write on a loop goroutine never
// waits for the kernel. currentG never returns 0.
