package rally

// H2TransportsForTest returns how many transports of its own rally keeps
// for dialing over HTTP/2.
func H2TransportsForTest() int {
	n := 0
	h2Transports.Range(func(any, any) bool { n++; return true })
	return n
}
