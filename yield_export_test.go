package rally

// OnStreamYield has f called each time a reading goroutine (goroutine
// mode) lets the others run while its peer streams large messages
// (readYield), until the test ends.
func OnStreamYield(t interface{ Cleanup(func()) }, f func()) {
	testHookStreamYield.Store(&f)
	t.Cleanup(func() { testHookStreamYield.Store(nil) })
}
