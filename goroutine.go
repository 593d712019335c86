package rally

// A connection needs to know, cheaply, which goroutine is calling it: a
// send is gathered by a cork only when it comes from the goroutine that
// holds the cork (a Server callback's own sends, not another goroutine's),
// and Close called on the reading goroutine (from a hook) must not wait
// for that goroutine. Go has no goroutine identity in its API; the
// address of the running goroutine's descriptor serves, read from where
// the runtime keeps it (the TLS slot on amd64, the g register on arm64).
// It is only compared for equality while the goroutine it names is known
// to be alive (it holds a cork or the read lock), so a descriptor reused
// after a goroutine exits cannot be mistaken for it.
//
// Where it is not available (other architectures) currentG returns 0, and
// every goroutine looks the same: corks then gather every goroutine's
// sends, and Close from a hook relies on the callback flag instead.
