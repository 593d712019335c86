package rally

import "sync"

// OnStreamYield has f called each time a reading goroutine (goroutine
// mode) lets the others run while its peer streams large messages
// (readYield), until the test ends.
func OnStreamYield(t interface{ Cleanup(func()) }, f func()) {
	testHookStreamYield.Store(&f)
	t.Cleanup(func() { testHookStreamYield.Store(nil) })
}

// HoldStreamGate takes every place of the gate through which reading
// goroutines whose peers stream wait for their turn, as that many such
// readers would, and has firstShare called each time a read is cut to
// what a first read takes while they wait. release gives the places
// back (and is called when the test ends if it was not).
func HoldStreamGate(t interface{ Cleanup(func()) }, firstShare func()) (release func()) {
	testHookStreamFirstShare.Store(&firstShare)
	for range cap(streamGate) {
		streamGate <- struct{}{}
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			for range cap(streamGate) {
				<-streamGate
			}
		})
	}
	t.Cleanup(func() {
		release()
		testHookStreamFirstShare.Store(nil)
	})
	return release
}
