package rally

import "os"

// RALLY_TEST_EVENT_LOOP=1 runs every Server of the tests in event-loop
// mode (see testEventLoop), on two loops at least (testEventLoops).
func init() {
	if os.Getenv("RALLY_TEST_EVENT_LOOP") == "1" {
		testEventLoop, testEventLoops = true, 2
	}
}

// LoopWrites is the number of write system calls made by event-loop
// connections so far (benchmarks: writes per delivered message).
func LoopWrites() uint64 { return loopWriteCalls() }

// LoopWritesForTest is the number of write system calls made by s's own
// event loops so far, whatever other servers of the process do.
func (s *Server) LoopWritesForTest() uint64 { return s.loops.writeCalls() }
